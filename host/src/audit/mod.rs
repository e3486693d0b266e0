//! The audit: every session's durable, validated, hash-chained record, and reading it back.
//!
//! - [`event`]: the events and the record line each is stored as.
//! - [`fold`]: the pure fold over a session's events and the rules an event must pass.
//! - [`chain`]: how each line commits to the one before it (SHA-256), from a genesis value that
//!   names the session.
//! - [`checkpoint`]: signed checkpoints of a log's head, in a checkpoint log of their own.
//! - [`log`]: one session's log as the host writes it (validation, chaining, group commit), and
//!   `commit`: the shared threads that sync every open log.
//! - [`store`]: where logs live (the directory store is the embedded default); [`postgres`]: the
//!   store several hosts share, with a lease per session; [`scratch`]: the store of a dry run;
//!   [`descriptors`]: the directory store's open files, bounded; [`kept`]: a session's fold kept
//!   beside its log, so an open reads only what was appended since.
//! - [`subscribe`]: subscribers to durable events; [`redact`]: argument values kept out of logs;
//!   [`stats`]: what the commit threads have done.
//! - [`check`]: reading a log back for `approval-host log`; [`verify`]: checking chains, seq
//!   continuity and pairing for `approval-host verify`; [`evidence`]: checkpoint logs against
//!   their copy, and logs missing while their checkpoints remain.

pub mod chain;
pub mod check;
pub mod checkpoint;
pub(crate) mod commit;
pub mod descriptors;
pub mod error;
pub mod event;
pub mod evidence;
pub mod fold;
pub mod kept;
pub mod log;
pub mod postgres;
pub(crate) mod question_key;
pub mod redact;
pub mod scratch;
pub mod stats;
pub mod store;
pub mod subscribe;
pub mod verify;

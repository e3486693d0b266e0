//! approval-host answers one question for AI coding agents: may this specific action proceed?
//!
//! The path of a request, module by module:
//!
//! - [`service`]: the seam. An asker calls [`ApprovalService::request`] with an
//!   [`ApprovalRequest`] (agent, tool name, optional call id, reason and cancellation); the
//!   service checks the turn, audits the question, applies the session's [`policy`], runs the
//!   waterfall and audits the decision.
//! - [`waterfall`]: the ordered answerers (gates in front, one terminal answerer) that decide or
//!   delegate; failures are contained as `unavailable`. A listener that sends the question out of
//!   the process gets it only once it is durable.
//! - [`rules`]: standing rules, the first gate of the waterfall (after the `never` check): a
//!   matching reject rule rejects, a matching allow rule allows the one call, anything else goes
//!   on; proposals a person (or, by scope, a plugin) makes with a decision become rules.
//! - [`plugin`]: answerers and gates as sandboxed WebAssembly components; a plugin that imports
//!   only the host interface decides in place on the asking task.
//! - [`outcome`]: the closed vocabularies, `allowed-once | rejected | cancelled | unavailable`
//!   and `allow-once | reject | cancel | next`; [`answer`]: what a listener says beyond its
//!   decision (a bounded reason, a proposed standing rule), which the decided event records and
//!   the asker turns into the text the model reads ([`tools::texts`]).
//! - [`audit`]: everything that makes the record: [`log`], [`store`], [`fold`], [`event`], the
//!   durable session log, validated before commit,
//!   group-committed with `fdatasync` on a few shared commit threads (`commit`; no thread per
//!   session), crash-recovered on open. A question decided in process and its decision share one
//!   sync.
//! - [`subscribe`]: subscribers to sessions' durable events (what `serve` notifications and a
//!   console follow).
//! - [`serve`]: the host as a process: JSON-RPC clients over stdio, a Unix socket or TCP with TLS
//!   and tokens ([`serve::auth`]), and the web console ([`serve::console`]), whose people answer
//!   as the last listener of the waterfall and see sessions, rules and plugins.
//! - [`policy`]: `ask | never` per session, folded from the log over the deployment default, and
//!   the exact texts an agent sees.
//! - [`config`]: the deployment file. [`check`]: reading a log back for the `log` command.
//!
//! ```no_run
//! # async fn demo() -> Result<(), approval_host::ApprovalError> {
//! use approval_host::{ApprovalRequest, ApprovalService, Outcome, Policy};
//! let service = ApprovalService::open_dir(".approval-host", Policy::Ask);
//! let agent = service.agent("session-1", "agent-1").await?;
//! service.start_turn("session-1").await?;
//! let outcome = service
//!     .request(ApprovalRequest::new(&agent, "bash").call_id("call-1"))
//!     .await?;
//! assert_eq!(outcome, Outcome::Unavailable); // no answerer registered: fail closed
//! service.end_turn("session-1").await?;
//! # Ok(()) }
//! ```

pub mod acp;
pub mod agent;
pub mod answer;
pub mod assemble;
pub mod audit;
pub mod bundled;
pub mod claude_code;
pub mod config;
pub mod conformance;
pub mod outcome;
pub mod pem;
pub mod plugin;
pub mod policy;
pub mod rules;
pub mod serve;
pub mod service;
mod session;
pub mod tools;
pub mod waterfall;

pub use audit::{check, event, fold, log, postgres, store, subscribe};

pub use agent::Agent;
pub use answer::{Answer, Proposal};
pub use audit::error::LogError;
pub use config::{ConfigError, Deployment, Isolation, PluginSpec, Role};
pub use outcome::{Decision, Failure, FailureKind, Outcome};
pub use plugin::{Mounted, Plugin, PluginError, PluginHost};
pub use policy::Policy;
pub use postgres::{PgOptions, PgStore};
pub use service::ApprovalError;
pub use service::{ApprovalRequest, ApprovalService, Verdict};
pub use store::{CommitMode, DirStore, Journal, OpenedLog, Store};
pub use subscribe::{Subscriber, Subscription};
pub use waterfall::{Explained, Listener, Position, Question, Registration, Scope};

/// The error types, re-exported where embedders found them before they moved beside what fails
/// ([`audit::error`], [`service`]).
pub mod error {
    pub use crate::audit::error::LogError;
    pub use crate::service::ApprovalError;
}

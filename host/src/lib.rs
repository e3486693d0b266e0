//! approval-host answers one question for AI coding agents: may this specific action proceed?
//!
//! The modules in layers, top down; a module imports only from layers below it:
//!
//! - [`serve`]: the host as a process: JSON-RPC clients over stdio, a Unix socket or TCP with TLS
//!   and tokens ([`serve::auth`]), and the web console ([`serve::console`]), whose people answer
//!   as the last listener of the waterfall and see sessions, rules and plugins.
//! - [`assemble`]: turns a [`Deployment`] into the running parts (the store, the checkpointer, the
//!   rule book, the plugin host and mounted plugins, the hook's and the agent's options) and
//!   reloads them. No feature module reads the deployment file.
//! - [`config`]: the deployment file, one file per section, each parsing into the type of the
//!   feature it configures.
//! - [`acp`], [`claude_code`], [`cli_hooks`], [`mcp`], [`tools`]: the askers (an ACP client, the
//!   Claude Code hook, the Codex, Gemini CLI and Copilot CLI hooks, the MCP gateway, the tool
//!   runtime and its exact texts,
//!   [`tools::texts`]); [`after_tool`]: what every CLI's after-tool hook records (a call that
//!   ran unasked); [`conformance`]: the cases every build of the example gates must pass.
//! - [`service`]: the seam. An asker calls [`ApprovalService::request`] with an
//!   [`ApprovalRequest`] (agent, tool name, optional call id, reason and cancellation); the
//!   service checks the turn, audits the question, applies the session's [`policy`], runs the
//!   waterfall and audits the decision (`request.rs`); standing rules made with a decision are
//!   vetted and kept (`standing.rs`).
//! - [`rules`]: standing rules, the first gate of the waterfall (after the built-in protections
//!   and the `never` check): a matching reject rule rejects, a matching allow rule allows the one
//!   call, anything else goes on. [`plugin`]: answerers and gates as sandboxed WebAssembly
//!   components; a plugin that imports only the host interface decides in place on the asking
//!   task.
//! - [`waterfall`]: the ordered answerers (gates in front, one terminal answerer) that decide or
//!   delegate; failures are contained as `unavailable`. A listener that sends the question out of
//!   the process gets it only once it is durable.
//! - [`agent`] and the session registry: who asks, and the open turn of each session.
//! - [`audit`]: everything that makes the record: [`audit::log`] (the durable session log,
//!   validated before commit, group-committed with `fdatasync` on a few shared commit threads,
//!   crash-recovered on open), [`audit::store`] (the store seam and the directory store),
//!   [`audit::postgres`], [`audit::event`], [`audit::fold`], the hash chain and signed
//!   checkpoints, [`audit::verify`], [`audit::subscribe`] (what `serve` notifications and the
//!   console follow), and [`audit::error::LogError`].
//! - The vocabulary: [`outcome`] (`allowed-once | rejected | cancelled | unavailable` and
//!   `allow-once | reject | cancel | next`), [`answer`] (what a listener says beyond its decision:
//!   a bounded reason, a proposed standing rule, and who may make it), [`policy`] (`ask | never`
//!   and the exact texts an agent sees), [`pem`] (certificates and keys read from files), [`private`] (files and directories only the
//!   host's user may read).
//!
//! The crate-root re-exports (`approval_host::event`, `approval_host::store`, …, and the types
//! below) are for embedders; the crate itself uses the real paths.
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
pub mod after_tool;
pub mod agent;
pub mod answer;
pub mod assemble;
pub mod audit;
pub mod bundled;
pub mod claude_code;
pub mod cli_hooks;
pub mod config;
pub mod conformance;
mod idle;
pub mod mcp;
pub mod outcome;
pub mod pem;
pub mod plugin;
pub mod policy;
pub mod private;
pub mod replay;
pub mod rules;
pub mod serve;
pub mod service;
mod session;
pub mod telemetry;
pub mod tools;
pub mod waterfall;

pub use audit::{check, event, fold, log, postgres, store, subscribe};

pub use agent::Agent;
pub use answer::{Answer, Proposal};
pub use audit::error::LogError;
pub use config::{ConfigError, Deployment};
pub use outcome::{Decision, Failure, FailureKind, Outcome};
pub use plugin::spec::{Isolation, PluginSpec, Role};
pub use plugin::{Mounted, Plugin, PluginError, PluginHost};
pub use policy::Policy;
pub use postgres::{PgOptions, PgStore};
pub use service::ApprovalError;
pub use service::{ApprovalRequest, ApprovalService, Verdict};
pub use store::{CommitMode, DetachedSync, DirStore, Journal, OpenedLog, Store, SyncDone};
pub use subscribe::{Subscriber, Subscription};
pub use waterfall::{Explained, Listener, Position, Question, Registration, Scope};

/// The error types, re-exported where embedders found them before they moved beside what fails
/// ([`audit::error`], [`service`]).
pub mod error {
    pub use crate::audit::error::LogError;
    pub use crate::service::ApprovalError;
}

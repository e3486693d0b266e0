//! The Agent Client Protocol side of the host, on the official `agent-client-protocol` crate
//! (protocol v1).
//!
//! - [`AcpAnswerer`]: the terminal answerer that asks the client owning the asking agent with
//!   `session/request_permission`. A harness embedding the host in its own ACP agent registers
//!   it and calls [`AcpAnswerer::own`] when a client opens a session.
//! - [`ScriptedAgent`]: a whole ACP agent whose model is a [`Script`], served by
//!   `approval-host acp` so a real client can watch the approval flow end to end.

mod agent;
mod answerer;
mod script;

pub use agent::{
    AGENT_NAME, ANSWERER_NAME, AgentOptions, MODE_SOURCE, ScriptedAgent, session_modes,
};
pub use answerer::{
    ALLOW_ALWAYS, ALLOW_ONCE, AcpAnswerer, REJECT_ALWAYS, REJECT_ONCE, always_allow_name,
    always_reject_name, permission_options, permission_options_with_rule,
};
pub use script::{Script, ScriptError, ScriptedCall, Turn};

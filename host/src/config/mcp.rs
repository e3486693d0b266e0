//! `[mcp]`: how the MCP gateway treats the tools it lists, into the gateway's own
//! [`McpConfig`](crate::mcp::McpConfig).
//!
//! ```toml
//! [mcp]
//! hide-rejected-tools = true   # leave out of tools/list what a reject rule refuses (the default)
//! # the server's requests of the agent that go on to it (each recorded); the default is all three
//! server-requests = ["sampling/createMessage", "elicitation/create", "roots/list"]
//! ```

use toml::Value;

use super::read::{Ctx, table, type_name, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 2] = ["hide-rejected-tools", "server-requests"];
const PLACE: &str = "[mcp]";

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, PLACE, value)? {
        match k.as_str() {
            "hide-rejected-tools" => {
                d.mcp.hide_rejected_tools = v.as_bool().ok_or_else(|| {
                    ctx.err(
                        PLACE,
                        format!(
                            "hide-rejected-tools must be true or false, not {}",
                            type_name(v)
                        ),
                    )
                })?;
            }
            "server-requests" => {
                let known = crate::mcp::methods::SERVER_REQUESTS;
                let usage = || {
                    format!(
                        "server-requests is a list of the server's requests to pass to the agent, each one of {}",
                        known.join(", ")
                    )
                };
                let list = v.as_array().ok_or_else(|| ctx.err(PLACE, usage()))?;
                let mut methods = Vec::new();
                for item in list {
                    let method = item
                        .as_str()
                        .filter(|m| known.contains(m))
                        .ok_or_else(|| ctx.err(PLACE, format!("{}, not {item}", usage())))?;
                    methods.push(method.to_owned());
                }
                d.mcp.server_requests = methods;
            }
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
        }
    }
    Ok(())
}

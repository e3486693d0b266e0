//! `[mcp]`: how the MCP gateway treats the tools it lists, into the gateway's own
//! [`McpConfig`](crate::mcp::McpConfig).
//!
//! ```toml
//! [mcp]
//! hide-rejected-tools = true   # leave out of tools/list what a reject rule refuses (the default)
//! ```

use toml::Value;

use super::read::{Ctx, table, type_name, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 1] = ["hide-rejected-tools"];
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
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
        }
    }
    Ok(())
}

//! `[mcp]`: how the MCP gateway treats the tools it lists, into the gateway's own
//! [`McpConfig`](crate::mcp::McpConfig).
//!
//! ```toml
//! [mcp]
//! hide-rejected-tools = true   # leave out of tools/list what a reject rule refuses (the default)
//! # the server's requests of the agent that go on to it (each recorded); the default is all three
//! server-requests = ["sampling/createMessage", "elicitation/create", "roots/list"]
//! # browser origins the HTTP endpoint answers (any other Origin is refused; agents send none)
//! allowed-origins = ["https://tools.example.com:443"]
//! # host names it answers as, besides loopback's and the --listen address
//! allowed-hosts = ["gateway.example.com"]
//! session-idle-s = 300         # an HTTP session idle this long is closed
//! # pin each tool's definition when first seen ("first-use", the default), only when a person
//! # approves it ("ask"), or not at all ("off"); a changed definition is withheld until approved
//! pin = "first-use"
//! ```

use toml::Value;

use super::read::{Ctx, table, type_name, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 6] = [
    "hide-rejected-tools",
    "pin",
    "server-requests",
    "allowed-origins",
    "allowed-hosts",
    "session-idle-s",
];
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
            "allowed-origins" => {
                d.mcp.allowed_origins = strings(ctx, k, v, |o| {
                    // `:*` is any port, as the HTTP transport reads it.
                    let o = o.strip_suffix(":*").unwrap_or(o);
                    let parsed = url::Url::parse(o).ok()?;
                    (matches!(parsed.scheme(), "http" | "https")
                        && parsed.host().is_some()
                        && parsed.path() == "/"
                        && !o.ends_with('/'))
                    .then_some(())
                    .or((o == "null").then_some(()))
                })?;
            }
            "allowed-hosts" => {
                d.mcp.allowed_hosts = strings(ctx, k, v, |h| {
                    (!h.is_empty() && !h.contains(['/', '@', ' ', '*'])).then_some(())
                })?;
            }
            "session-idle-s" => {
                let secs = v
                    .as_integer()
                    .filter(|n| (1..=86_400).contains(n))
                    .ok_or_else(|| {
                        ctx.err(
                            PLACE,
                            format!(
                                "session-idle-s is a number of seconds from 1 to 86400, not {v}"
                            ),
                        )
                    })?;
                d.mcp.session_idle = std::time::Duration::from_secs(secs as u64);
            }
            "pin" => {
                use crate::mcp::pins::PinMode;
                d.mcp.pin = v.as_str().and_then(PinMode::parse).ok_or_else(|| {
                    ctx.err(
                        PLACE,
                        format!(
                            "pin is one of \"{}\", not {v}",
                            PinMode::NAMES.join("\", \"")
                        ),
                    )
                })?;
            }
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
        }
    }
    Ok(())
}

/// A list of strings, each checked by `fits`.
fn strings(
    ctx: &Ctx,
    key: &str,
    value: &Value,
    fits: impl Fn(&str) -> Option<()>,
) -> Result<Vec<String>, ConfigError> {
    let usage = |item: &Value| {
        let example = match key {
            "allowed-origins" => {
                "scheme://host[:port] with no path, e.g. https://tools.example.com:443"
            }
            _ => "a host name or host:port, e.g. gateway.example.com",
        };
        ctx.err(PLACE, format!("{key} is a list of {example}; not {item}"))
    };
    let list = value.as_array().ok_or_else(|| usage(value))?;
    list.iter()
        .map(|item| {
            item.as_str()
                .filter(|s| fits(s).is_some())
                .map(str::to_owned)
                .ok_or_else(|| usage(item))
        })
        .collect()
}

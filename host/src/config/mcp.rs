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
//!
//! # many servers behind one gateway (`approval-host mcp --config FILE`, no server of its own):
//! # the agent sees each tool as <name>__<tool>; rules still read mcp__<name>__<tool>
//! [[mcp.server]]
//! name = "notes"
//! command = ["python3", "notes_server.py"]
//! env = { NOTES_DIR = "/srv/notes" }   # besides the gateway's own environment
//!
//! [[mcp.server]]
//! name = "github"
//! url = "https://mcp.example.com/mcp"  # streamable HTTP
//! ```

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, known_keys, table, type_name, unread};
use super::{ConfigError, Deployment};

const KEYS: [Key; 7] = [
    Key {
        name: "hide-rejected-tools",
        kind: "boolean",
        default: "`true`",
        meaning: "Leave out of `tools/list` every tool a reject rule refuses whatever its arguments, in the caller's session.",
    },
    Key {
        name: "server",
        kind: "list of tables (`[[mcp.server]]`)",
        default: "`[]` (the command line names the server)",
        meaning: "The servers behind one gateway, started as `approval-host mcp --config FILE` with no server of its own.",
    },
    Key {
        name: "pin",
        kind: r#"`"first-use"` | `"ask"` | `"off"`"#,
        default: r#"`"first-use"`"#,
        meaning: "Pin each tool's definition when first seen (`first-use`), only when a person approves it (`ask`), or not at all (`off`); a definition that differs from its pin is withheld until a person approves it.",
    },
    Key {
        name: "server-requests",
        kind: "list of strings",
        default: "all three",
        meaning: "The server's requests of the agent that are passed on (each recorded), from `sampling/createMessage`, `elicitation/create` and `roots/list`; the ones left out are refused.",
    },
    Key {
        name: "allowed-origins",
        kind: "list of strings (`scheme://host[:port]`)",
        default: "`[]` (no browser origin)",
        meaning: "Browser origins the HTTP endpoint answers (`:*` for any port, or `null`); a request with any other `Origin` is refused (403). Agents send none.",
    },
    Key {
        name: "allowed-hosts",
        kind: "list of strings (host or `host:port`)",
        default: "`[]`",
        meaning: "Host names the HTTP endpoint answers as, besides loopback's and the `--listen` address (the DNS-rebinding check).",
    },
    Key {
        name: "session-idle-s",
        kind: "integer (1–86400)",
        default: "`300`",
        meaning: "Seconds after which an idle HTTP session is closed, ending its turn.",
    },
];
const PLACE: &str = "[mcp]";

/// `[mcp]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: PLACE,
    about: "How the MCP gateway treats the tools it lists and the requests it passes on. Read at start: a reload does not change these keys.",
    keys: &KEYS,
};

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, PLACE, value)? {
        match known_key(ctx, PLACE, k, &KEYS)? {
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
            "server" => d.mcp.servers = servers(ctx, v)?,
            other => return Err(unread(ctx, PLACE, other)),
        }
    }
    Ok(())
}

const SERVER_KEYS: [Key; 4] = [
    Key {
        name: "name",
        kind: "string",
        default: "none (required)",
        meaning: "The server's name in tool names and rules: letters, digits, `-` and `_`, at most 64, without `__` and not starting or ending with `_`; unique among the servers.",
    },
    Key {
        name: "command",
        kind: "list of strings (program first)",
        default: "none (`command` or `url`)",
        meaning: "The program and its arguments, for a server the gateway starts over stdio.",
    },
    Key {
        name: "url",
        kind: "string (`http(s)://` URL)",
        default: "none (`command` or `url`)",
        meaning: "A streamable HTTP endpoint the gateway reaches.",
    },
    Key {
        name: "env",
        kind: "table of strings",
        default: "`{}`",
        meaning: "Environment variables for a `command` server, besides the gateway's own environment; not with `url`.",
    },
];

/// `[[mcp.server]]` in the reference.
pub(super) const SERVER_SECTION: Section = Section {
    shown: "[[mcp.server]]",
    about: "One server behind the gateway: a name and either a command the gateway starts or a URL it reaches. The agent sees each tool as `<name>__<tool>`; rules read `mcp__<name>__<tool>`.",
    keys: &SERVER_KEYS,
};

/// `[[mcp.server]]`: each a name and either a command (with `env`) or a URL.
fn servers(ctx: &Ctx, value: &Value) -> Result<Vec<crate::mcp::ServerEntry>, ConfigError> {
    use crate::mcp::{ServerEntry, Upstream};
    let list = value.as_array().ok_or_else(|| {
        ctx.err(
            PLACE,
            "server is a list of tables: write each as [[mcp.server]]".to_owned(),
        )
    })?;
    let mut entries: Vec<ServerEntry> = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let place = format!("[[mcp.server]] #{}", i + 1);
        let fields = table(ctx, &place, item)?;
        let name = match fields.get("name") {
            Some(Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(ctx.err(
                    &place,
                    format!("name must be a string, not {}", type_name(other)),
                ));
            }
            None => {
                return Err(ctx.err(
                    &place,
                    "name is missing: the server's name in rules (mcp__<name>__<tool>)".to_owned(),
                ));
            }
        };
        crate::mcp::check_server_name(&name)
            .map_err(|e| ctx.err(&place, e.to_string().replacen("--name ", "name ", 1)))?;
        if entries.iter().any(|e| e.name == name) {
            return Err(ctx.err(&place, format!("name {name:?} is taken by an earlier [[mcp.server]]: each needs a name of its own")));
        }
        let place = format!("[[mcp.server]] {name:?}");
        known_keys(ctx, &place, fields, &SERVER_KEYS)?;
        let upstream = match (fields.get("command"), fields.get("url")) {
            (Some(command), None) => {
                let words = command
                    .as_array()
                    .and_then(|words| {
                        words
                            .iter()
                            .map(|w| w.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                    })
                    .filter(|words| words.first().is_some_and(|p| !p.is_empty()))
                    .ok_or_else(|| {
                        ctx.err(&place, format!("command is the program and its arguments, a list of strings with the program first, not {command}"))
                    })?;
                let env = match fields.get("env") {
                    None => Vec::new(),
                    Some(env) => env
                        .as_table()
                        .and_then(|t| {
                            t.iter()
                                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                                .collect::<Option<Vec<_>>>()
                        })
                        .filter(|vars| {
                            vars.iter().all(|(k, v)| {
                                !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0')
                            })
                        })
                        .ok_or_else(|| {
                            ctx.err(
                                &place,
                                format!("env is a table of variable names to strings, not {env}"),
                            )
                        })?,
                };
                Upstream::command(words)
                    .map_err(|e| ctx.err(&place, e.to_string()))?
                    .with_env(env)
            }
            (None, Some(url)) => {
                if fields.contains_key("env") {
                    return Err(ctx.err(
                        &place,
                        "env is for a server the gateway starts (command), not one reached by url"
                            .to_owned(),
                    ));
                }
                let url = url.as_str().ok_or_else(|| {
                    ctx.err(
                        &place,
                        format!("url must be a string, not {}", type_name(url)),
                    )
                })?;
                Upstream::url(url).map_err(|e| {
                    ctx.err(&place, e.to_string().replacen("--upstream ", "url ", 1))
                })?
            }
            (Some(_), Some(_)) => {
                return Err(ctx.err(&place, "give either command (a server the gateway starts) or url (one it reaches), not both".to_owned()));
            }
            (None, None) => {
                return Err(ctx.err(&place, "give command (a server the gateway starts, e.g. [\"npx\", \"some-server\"]) or url (a streamable HTTP endpoint)".to_owned()));
            }
        };
        entries.push(ServerEntry { name, upstream });
    }
    Ok(entries)
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

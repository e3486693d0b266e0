//! `[[hook]]`: Claude-Code-style command hooks, each parsed into the tool runtime's own
//! [`HookSpec`].

use std::time::Duration;

use toml::Value;

use super::ConfigError;
use super::key::{Key, Section};
use super::read::{Ctx, known_keys, positive, string};
use crate::tools::hooks::{HookSpec, PRE_TOOL_USE};

/// Default time a hook may run.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

const KEYS: [Key; 4] = [
    Key {
        name: "event",
        kind: r#"`"PreToolUse"`"#,
        default: "none (required)",
        meaning: "When the hook runs: before a tool call (the only event supported).",
    },
    Key {
        name: "matcher",
        kind: "string (regular expression)",
        default: r#"`""` (every tool)"#,
        meaning: "The tools the hook runs for: a regular expression over the tool name; empty or `*` for all.",
    },
    Key {
        name: "command",
        kind: "string",
        default: "none (required)",
        meaning: "The shell command (`sh -c`) run with the call as JSON on stdin: exit 2 blocks with stderr as the reason, exit 0 with JSON may decide; one that cannot start, crashes or exits otherwise denies.",
    },
    Key {
        name: "timeout_ms",
        kind: "integer (1–600000)",
        default: "`60000`",
        meaning: "How long the hook may run, in milliseconds; one that times out denies.",
    },
];

/// `[[hook]]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[[hook]]",
    about: "Claude-Code-style command hooks the host's own tool runtime (as `approval-host acp` serves it) runs before each tool call, in file order; several hooks merge deny > ask > allow.",
    keys: &KEYS,
};

pub(super) fn entry(ctx: &Ctx, index: usize, entry: &Value) -> Result<HookSpec, ConfigError> {
    let place = format!("hook #{}", index + 1);
    let place = place.as_str();
    let table = entry
        .as_table()
        .ok_or_else(|| ctx.err(place, "each [[hook]] must be a table"))?;
    known_keys(ctx, place, table, &KEYS)?;
    match table.get("event") {
        None => return Err(ctx.err(place, "event is missing (\"PreToolUse\")")),
        Some(v) => {
            let event = string(ctx, place, "event", v)?;
            if event != PRE_TOOL_USE {
                return Err(ctx.err(
                    place,
                    format!("event = {event:?}: only \"PreToolUse\" is supported"),
                ));
            }
        }
    }
    let command = match table.get("command") {
        None => return Err(ctx.err(place, "command is missing")),
        Some(v) => string(ctx, place, "command", v)?.to_owned(),
    };
    if command.trim().is_empty() {
        return Err(ctx.err(place, "command must not be empty"));
    }
    let matcher = match table.get("matcher") {
        None => String::new(),
        Some(v) => string(ctx, place, "matcher", v)?.to_owned(),
    };
    if !matches!(matcher.as_str(), "" | "*")
        && let Err(e) = regex::Regex::new(&matcher)
    {
        return Err(ctx.err(place, format!("matcher = {matcher:?}: {e}")));
    }
    let timeout = match table.get("timeout_ms") {
        None => DEFAULT_HOOK_TIMEOUT,
        Some(v) => Duration::from_millis(positive(ctx, place, "timeout_ms", v, 600_000)?),
    };
    Ok(HookSpec {
        matcher,
        command,
        timeout,
    })
}

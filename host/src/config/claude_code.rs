//! `[claude-code]`: how the Claude Code hook answers calls nobody decided, into the hook's own
//! [`HookOptions`](crate::claude_code::HookOptions).

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, table, unread};
use super::{ConfigError, Deployment};
use crate::claude_code::PERMISSION_MODES;

const KEYS: [Key; 2] = [
    Key {
        name: "when-undecided",
        kind: r#"`"ask"` | `"defer"` | `"deny"`"#,
        default: r#"`"ask"`"#,
        meaning: "What the hook prints for a call no rule, gate or answerer decided: `ask` (Claude Code prompts), `defer` (no decision: Claude Code's own permission rules and mode apply) or `deny`.",
    },
    Key {
        name: "defer-in-modes",
        kind: "list of strings (Claude Code permission modes)",
        default: "`[]`",
        meaning: "Permission modes (`default`, `acceptEdits`, `plan`, `bypassPermissions`, `dontAsk`) in which an undecided call is deferred whatever `when-undecided` says; a gate's allow or deny is printed in every mode.",
    },
];

/// `[claude-code]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[claude-code]",
    about: "How the Claude Code hook answers calls nobody decided.",
    keys: &KEYS,
};

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    const PLACE: &str = "[claude-code]";
    for (k, v) in table(ctx, PLACE, value)? {
        match known_key(ctx, PLACE, k, &KEYS)? {
            "when-undecided" => {
                d.claude_code.when_undecided = string(ctx, PLACE, "when-undecided", v)?
                    .parse()
                    .map_err(|e: String| ctx.err(PLACE, e))?;
            }
            "defer-in-modes" => {
                let list = v.as_array().ok_or_else(|| {
                    ctx.err(PLACE, "defer-in-modes must be a list of permission modes")
                })?;
                for m in list {
                    let m = string(ctx, PLACE, "defer-in-modes", m)?;
                    if !PERMISSION_MODES.contains(&m) {
                        return Err(ctx.err(
                            PLACE,
                            format!(
                                "defer-in-modes: {m:?} is not a Claude Code permission mode (expected one of {})",
                                PERMISSION_MODES.join(", ")
                            ),
                        ));
                    }
                    d.claude_code.defer_in_modes.push(m.to_owned());
                }
            }
            other => return Err(unread(ctx, PLACE, other)),
        }
    }
    Ok(())
}

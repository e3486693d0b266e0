//! `[claude-code]`: how the Claude Code hook answers calls nobody decided, into the hook's own
//! [`HookOptions`](crate::claude_code::HookOptions).

use toml::Value;

use super::read::{Ctx, string, table, unknown_key};
use super::{ConfigError, Deployment};
use crate::claude_code::PERMISSION_MODES;

const KEYS: [&str; 2] = ["when-undecided", "defer-in-modes"];

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    const PLACE: &str = "[claude-code]";
    for (k, v) in table(ctx, PLACE, value)? {
        match k.as_str() {
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
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
        }
    }
    Ok(())
}

//! `[sandbox]`: the sandbox mode of sessions without their own switch.

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, table, unread};
use super::{ConfigError, Deployment};

const KEYS: [Key; 1] = [Key {
    name: "mode",
    kind: r#"`"read-only"` | `"workspace-write"` | `"danger-full-access"`"#,
    default: r#"`"read-only"`"#,
    meaning: "The mode the bash tool runs a session's commands under unless the session switched its own: `read-only` writes nowhere but `/dev/null`, `workspace-write` also the workspace and its temp directory, `danger-full-access` anywhere. A confining mode refuses to run where the kernel lacks Landlock.",
}];

/// `[sandbox]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[sandbox]",
    about: "The sandbox mode of sessions without their own switch.",
    keys: &KEYS,
};

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[sandbox]", value)? {
        match known_key(ctx, "[sandbox]", k, &KEYS)? {
            "mode" => {
                d.sandbox_mode = string(ctx, "[sandbox]", "mode", v)?
                    .parse()
                    .map_err(|e: String| ctx.err("[sandbox]", e))?;
            }
            other => return Err(unread(ctx, "[sandbox]", other)),
        }
    }
    Ok(())
}

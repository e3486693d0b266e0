//! `[approval]`: the approval policy of sessions without their own switch.

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, table, unread};
use super::{ConfigError, Deployment};

const KEYS: [Key; 1] = [Key {
    name: "policy",
    kind: r#"`"ask"` | `"never"`"#,
    default: r#"`"ask"`"#,
    meaning: "The policy of a session that has not switched its own: `ask` puts each question to the rules, gates and answerers; `never` rejects every question before any answerer runs.",
}];

/// `[approval]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[approval]",
    about: "The approval policy of sessions without their own switch.",
    keys: &KEYS,
};

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[approval]", value)? {
        match known_key(ctx, "[approval]", k, &KEYS)? {
            "policy" => {
                let value = super::read::string(ctx, "[approval]", "policy", v)?;
                d.default_policy = value.parse().map_err(|_| ConfigError::Policy {
                    path: ctx.path.to_owned(),
                    at: ctx.locator.locate("[approval]", "policy"),
                    value: value.to_owned(),
                })?;
            }
            other => return Err(unread(ctx, "[approval]", other)),
        }
    }
    Ok(())
}

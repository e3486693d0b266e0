//! `[approval]`: the approval policy of sessions without their own switch.

use toml::Value;

use super::read::{Ctx, table, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 1] = ["policy"];

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[approval]", value)? {
        match k.as_str() {
            "policy" => {
                let value = super::read::string(ctx, "[approval]", "policy", v)?;
                d.default_policy = value.parse().map_err(|_| ConfigError::Policy {
                    path: ctx.path.to_owned(),
                    at: ctx.locator.locate("[approval]", "policy"),
                    value: value.to_owned(),
                })?;
            }
            other => return Err(unknown_key(ctx, "[approval]", other, &KEYS)),
        }
    }
    Ok(())
}

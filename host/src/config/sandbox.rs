//! `[sandbox]`: the sandbox mode of sessions without their own switch.

use toml::Value;

use super::read::{Ctx, string, table, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 1] = ["mode"];

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[sandbox]", value)? {
        match k.as_str() {
            "mode" => {
                d.sandbox_mode = string(ctx, "[sandbox]", "mode", v)?
                    .parse()
                    .map_err(|e: String| ctx.err("[sandbox]", e))?;
            }
            other => return Err(unknown_key(ctx, "[sandbox]", other, &KEYS)),
        }
    }
    Ok(())
}

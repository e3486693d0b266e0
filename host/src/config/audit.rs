//! `[audit]`: the key checkpoints are signed with, and a second place for them.

use toml::Value;

use super::read::{Ctx, string, table, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 2] = ["signing-key", "checkpoint-copy"];

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[audit]", value)? {
        match k.as_str() {
            "signing-key" => {
                let file = string(ctx, "[audit]", "signing-key", v)?;
                d.signing_key = Some(ctx.dir.join(file));
            }
            "checkpoint-copy" => {
                let dir = string(ctx, "[audit]", "checkpoint-copy", v)?;
                d.checkpoint_copy = Some(ctx.dir.join(dir));
            }
            other => return Err(unknown_key(ctx, "[audit]", other, &KEYS)),
        }
    }
    if d.checkpoint_copy.is_some() && d.signing_key.is_none() {
        return Err(ctx.err(
            "[audit]",
            "checkpoint-copy needs signing-key: only signed checkpoints are copied",
        ));
    }
    Ok(())
}

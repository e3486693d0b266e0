//! `[audit]`: the key checkpoints are signed with, a second place for them, and the argument
//! values no log may hold (`redact`).

use toml::Value;

use super::read::{Ctx, string, string_list, table, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 3] = ["signing-key", "checkpoint-copy", "redact"];

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
            "redact" => {
                let entries = string_list(ctx, "[audit]", "redact", v)?;
                d.redact = crate::audit::redact::Redaction::parse(&entries)
                    .map_err(|e| ctx.err("[audit]", e.to_string()))?;
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

//! `[audit]`: the key checkpoints are signed with, a second place for them, and the argument
//! values no log may hold (`redact`).

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, string_list, table, unread};
use super::{ConfigError, Deployment};

const KEYS: [Key; 3] = [
    Key {
        name: "signing-key",
        kind: "string (path)",
        default: "unset (no checkpoints)",
        meaning: "The Ed25519 key file (`approval-host keygen FILE`) every log's checkpoints are signed with, relative to this file; keep it outside the state directory.",
    },
    Key {
        name: "checkpoint-copy",
        kind: "string (path)",
        default: "unset",
        meaning: "A second directory every checkpoint is also appended to (relative to this file; another disk or a mount only the host can append to), which `verify --checkpoints DIR` checks against. Needs `signing-key`.",
    },
    Key {
        name: "redact",
        kind: "list of strings",
        default: "`[]` (nothing redacted)",
        meaning: "Argument values replaced with `\"[redacted]\"` before a `tool/call` is written or shown: a JSON pointer (`/env/API_KEY`), matched exactly, or a member name (`password`) at any depth, matched without regard to case, `-` or `_`.",
    },
];

/// `[audit]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[audit]",
    about: "Signed checkpoints of every log, a second copy of them, and the argument values no log may hold.",
    keys: &KEYS,
};

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    for (k, v) in table(ctx, "[audit]", value)? {
        match known_key(ctx, "[audit]", k, &KEYS)? {
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
            other => return Err(unread(ctx, "[audit]", other)),
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

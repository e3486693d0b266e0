//! How a deployment file's values are read: where an error points (file, line, section, field),
//! strings, bounded integers, string tables, and the known keys of each section, its reference
//! table ([`Key`]), used for the check, the message and the documentation.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::ConfigError;
use super::key::Key;
use super::locate;

pub(super) struct Ctx<'a> {
    pub(super) path: &'a Path,
    pub(super) dir: &'a Path,
    pub(super) locator: locate::Locator<'a>,
}

impl Ctx<'_> {
    pub(super) fn err(&self, place: &str, message: impl Into<String>) -> ConfigError {
        let message = message.into();
        ConfigError::Field {
            path: self.path.to_owned(),
            at: self.locator.locate(place, &message),
            place: place.to_owned(),
            message,
        }
    }

    pub(super) fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    v.type_str()
}

pub(super) fn string<'v>(
    ctx: &Ctx,
    place: &str,
    key: &str,
    v: &'v Value,
) -> Result<&'v str, ConfigError> {
    v.as_str().ok_or_else(|| {
        ctx.err(
            place,
            format!("{key} must be a string, not {}", type_name(v)),
        )
    })
}

pub(super) fn string_list(
    ctx: &Ctx,
    place: &str,
    key: &str,
    v: &Value,
) -> Result<Vec<String>, ConfigError> {
    let items = v
        .as_array()
        .ok_or_else(|| ctx.err(place, format!("{key} must be a list of strings")))?;
    items
        .iter()
        .map(|i| string(ctx, place, key, i).map(str::to_owned))
        .collect()
}

pub(super) fn positive(
    ctx: &Ctx,
    place: &str,
    key: &str,
    v: &Value,
    max: i64,
) -> Result<u64, ConfigError> {
    match v.as_integer() {
        Some(n) if n > 0 && n <= max => Ok(n as u64),
        Some(n) => Err(ctx.err(place, format!("{key} = {n}: must be between 1 and {max}"))),
        None => Err(ctx.err(
            place,
            format!("{key} must be an integer, not {}", type_name(v)),
        )),
    }
}

pub(super) fn string_table(
    ctx: &Ctx,
    place: &str,
    key: &str,
    v: &Value,
) -> Result<Vec<(String, String)>, ConfigError> {
    let table = v.as_table().ok_or_else(|| {
        ctx.err(
            place,
            format!("[plugin.{key}] must be a table, not {}", type_name(v)),
        )
    })?;
    table
        .iter()
        .map(|(k, v)| {
            let s = v.as_str().ok_or_else(|| {
                ctx.err(
                    place,
                    format!("{key}.{k} must be a string, not {}", type_name(v)),
                )
            })?;
            Ok((k.clone(), s.to_owned()))
        })
        .collect()
}

/// Words joined as a person lists them: `a`, `a or b`, `a, b or c`.
pub(super) fn listed(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The error for a key `place` does not know, listing the ones it does (`names`).
pub(super) fn unknown(ctx: &Ctx, place: &str, key: &str, names: &[&str]) -> ConfigError {
    ctx.err(
        place,
        format!("unknown key {key:?} (expected {})", listed(names)),
    )
}

/// The error for a key `place` does not know: one its reference table does not document.
pub(super) fn unknown_key(ctx: &Ctx, place: &str, key: &str, known: &[Key]) -> ConfigError {
    let names: Vec<&str> = known.iter().map(|k| k.name).collect();
    unknown(ctx, place, key, &names)
}

/// `key` as one of `known`, else the unknown-key error. A parser matches on what this returns,
/// so a key reaches its code only when the reference documents it.
pub(super) fn known_key(
    ctx: &Ctx,
    place: &str,
    key: &str,
    known: &[Key],
) -> Result<&'static str, ConfigError> {
    known
        .iter()
        .find(|k| k.name == key)
        .map(|k| k.name)
        .ok_or_else(|| unknown_key(ctx, place, key, known))
}

/// Refuses the first key of `table` that is not one of `known`.
pub(super) fn known_keys(
    ctx: &Ctx,
    place: &str,
    table: &Table,
    known: &[Key],
) -> Result<(), ConfigError> {
    match table
        .keys()
        .find(|k| !known.iter().any(|n| n.name == k.as_str()))
    {
        Some(key) => Err(unknown_key(ctx, place, key, known)),
        None => Ok(()),
    }
}

/// The error for a documented key no arm of its parser reads: a bug, which the reference's
/// tests find before a file could set the key to no effect.
pub(super) fn unread(ctx: &Ctx, place: &str, key: &str) -> ConfigError {
    ctx.err(
        place,
        format!("{key}: the reference documents this key but the parser does not read it (a bug in approval-host)"),
    )
}

/// `value` as the table `place` must be.
pub(super) fn table<'v>(
    ctx: &Ctx,
    place: &str,
    value: &'v Value,
) -> Result<&'v Table, ConfigError> {
    value
        .as_table()
        .ok_or_else(|| ctx.err(place, "must be a table"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn words_are_listed_as_a_person_lists_them() {
        assert_eq!(super::listed(&["policy"]), "policy");
        assert_eq!(super::listed(&["a", "b"]), "a or b");
        assert_eq!(super::listed(&["a", "b", "c"]), "a, b or c");
    }
}

//! `[[plugin]]`: each entry parsed into the plugin host's own [`PluginSpec`], its paths resolved
//! against the deployment file and checked to exist.

use std::time::Duration;

use toml::Value;

use super::ConfigError;
use super::read::{Ctx, known_keys, positive, string, string_list, string_table};
use crate::plugin::pending::{OnTimeout, Wait};
use crate::plugin::spec::{Isolation, PluginSpec, Role};

const KEYS: [&str; 15] = [
    "name",
    "path",
    "role",
    "sha256",
    "timeout_ms",
    "memory_mb",
    "isolation",
    "config",
    "files",
    "allow-hosts",
    "secrets",
    "wait_ms",
    "on-timeout",
    "cases",
    "mode",
];

/// A `[[plugin]]` entry: the plugin host's spec, the conformance cases (`cases = "…"`) a
/// version must pass before it serves, and whether it is a shadow (`mode = "shadow"`).
pub(super) fn entry(
    ctx: &Ctx,
    index: usize,
    entry: &Value,
) -> Result<(PluginSpec, Option<std::path::PathBuf>, bool), ConfigError> {
    let numbered = format!("plugin #{}", index + 1);
    let table = entry
        .as_table()
        .ok_or_else(|| ctx.err(&numbered, "each [[plugin]] must be a table"))?;
    let name = match table.get("name") {
        None => return Err(ctx.err(&numbered, "name is missing")),
        Some(v) => string(ctx, &numbered, "name", v)?.to_owned(),
    };
    if name.is_empty() || name.chars().any(|c| c.is_control()) {
        return Err(ctx.err(
            &numbered,
            format!("name = {name:?}: must be non-empty, without control characters"),
        ));
    }
    let place = format!("plugin {name:?}");
    let place = place.as_str();
    known_keys(ctx, place, table, &KEYS)?;
    let path = match table.get("path") {
        None => return Err(ctx.err(place, "path is missing")),
        Some(v) => ctx.resolve(string(ctx, place, "path", v)?),
    };
    if !path.is_file() {
        return Err(ctx.err(
            place,
            format!("path {:?}: no such file", path.display().to_string()),
        ));
    }
    let role = match table.get("role") {
        None => return Err(ctx.err(place, "role is missing (\"gate\" or \"answerer\")")),
        Some(v) => match string(ctx, place, "role", v)? {
            "gate" => Role::Gate,
            "answerer" => Role::Answerer,
            other => {
                return Err(ctx.err(
                    place,
                    format!("role = {other:?}: must be \"gate\" or \"answerer\""),
                ));
            }
        },
    };
    let mut spec = PluginSpec::new(name, path, role);
    if let Some(v) = table.get("sha256") {
        let digest = string(ctx, place, "sha256", v)?;
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ctx.err(
                place,
                format!("sha256 = {digest:?}: must be 64 hexadecimal digits"),
            ));
        }
        spec.sha256 = Some(digest.to_ascii_lowercase());
    }
    if let Some(v) = table.get("timeout_ms") {
        spec.timeout = Duration::from_millis(positive(ctx, place, "timeout_ms", v, 600_000)?);
    }
    if let Some(v) = table.get("memory_mb") {
        spec.memory_bytes = positive(ctx, place, "memory_mb", v, 4096)? << 20;
    }
    if let Some(v) = table.get("isolation") {
        spec.isolation = match string(ctx, place, "isolation", v)? {
            "reuse" => Isolation::Reuse,
            "per-decision" => Isolation::PerDecision,
            other => {
                return Err(ctx.err(
                    place,
                    format!("isolation = {other:?}: must be \"reuse\" or \"per-decision\""),
                ));
            }
        };
    }
    if let Some(v) = table.get("config") {
        spec.config = string_table(ctx, place, "config", v)?.into_iter().collect();
    }
    if let Some(v) = table.get("files") {
        for (guest, host) in string_table(ctx, place, "files", v)? {
            if !guest.starts_with('/') {
                return Err(ctx.err(
                    place,
                    format!("files.{guest:?}: the guest path must be absolute"),
                ));
            }
            let host = ctx.resolve(&host);
            if !host.is_dir() {
                return Err(ctx.err(
                    place,
                    format!(
                        "files.{guest:?} = {:?}: no such directory",
                        host.display().to_string()
                    ),
                ));
            }
            spec.files.push((guest, host));
        }
    }
    if let Some(v) = table.get("allow-hosts") {
        for entry in string_list(ctx, place, "allow-hosts", v)? {
            let grant = crate::plugin::net::HostGrant::parse(&entry)
                .map_err(|why| ctx.err(place, format!("allow-hosts {entry:?}: {why}")))?;
            if !spec.allow_hosts.contains(&grant) {
                spec.allow_hosts.push(grant);
            }
        }
    }
    if let Some(v) = table.get("secrets") {
        for (name, source) in string_table(ctx, place, "secrets", v)? {
            if !crate::plugin::secret::valid_name(&name) {
                return Err(ctx.err(
                    place,
                    format!("secrets.{name:?}: a name is letters, digits, - and _"),
                ));
            }
            let secret = crate::plugin::secret::Secret::load(&source, |p| ctx.resolve(p))
                .map_err(|why| ctx.err(place, format!("secrets.{name}: {why}")))?;
            spec.secrets.insert(name, secret);
        }
    }
    let on_timeout = match table.get("on-timeout") {
        None => None,
        Some(v) => {
            let word = string(ctx, place, "on-timeout", v)?;
            Some(OnTimeout::parse(word).ok_or_else(|| {
                ctx.err(
                    place,
                    format!("on-timeout = {word:?}: must be \"reject\" or \"unavailable\""),
                )
            })?)
        }
    };
    match table.get("wait_ms") {
        Some(v) => {
            let max = crate::plugin::pending::MAX_WAIT.as_millis() as i64;
            spec.wait = Some(Wait {
                wait: Duration::from_millis(positive(ctx, place, "wait_ms", v, max)?),
                on_timeout: on_timeout.unwrap_or_default(),
            });
        }
        // An `on-timeout` without a wait would say nothing: a typo, most likely.
        None if on_timeout.is_some() => {
            return Err(ctx.err(place, "on-timeout goes with wait_ms, which is missing"));
        }
        None => {}
    }
    let cases = match table.get("cases") {
        None => None,
        Some(v) => {
            let path = ctx.resolve(string(ctx, place, "cases", v)?);
            // Read now, so a file that is not a case file refuses the deployment here.
            crate::conformance::Suite::load(&path)
                .map_err(|e| ctx.err(place, format!("cases: {e}")))?;
            Some(path)
        }
    };
    let shadow = match table.get("mode") {
        None => false,
        Some(v) => match string(ctx, place, "mode", v)? {
            "decide" => false,
            "shadow" => true,
            other => {
                return Err(ctx.err(
                    place,
                    format!("mode = {other:?}: must be \"decide\" or \"shadow\""),
                ));
            }
        },
    };
    if shadow && cases.is_some() {
        return Err(ctx.err(
            place,
            "cases apply to a deciding version; a shadow is tried on live traffic instead",
        ));
    }
    if shadow && spec.leaves_process() {
        // A shadow sees questions already settled: what it sends out would ask people, or
        // tell services, about decisions that are not theirs to make.
        return Err(ctx.err(
            place,
            "a shadow may not reach out or wait (allow-hosts, wait_ms): it is tried on questions already settled",
        ));
    }
    Ok((spec, cases, shadow))
}

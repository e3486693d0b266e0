//! `[[plugin]]`: each entry parsed into the plugin host's own [`PluginSpec`], its paths resolved
//! against the deployment file and checked to exist.

use std::time::Duration;

use toml::Value;

use super::ConfigError;
use super::key::{Key, Section};
use super::read::{Ctx, known_keys, positive, string, string_list, string_table};
use crate::plugin::pending::{OnTimeout, Wait};
use crate::plugin::spec::{Isolation, PluginSpec, Role};

const KEYS: [Key; 15] = [
    Key {
        name: "name",
        kind: "string",
        default: "none (required)",
        meaning: "The plugin's name in logs and audit events: non-empty, without control characters, unique among deciding versions (a shadow may share its deciding version's).",
    },
    Key {
        name: "path",
        kind: "string (path)",
        default: "none (required)",
        meaning: "The component (`.wasm`), relative to this file; it must exist.",
    },
    Key {
        name: "role",
        kind: r#"`"gate"` | `"answerer"`"#,
        default: "none (required)",
        meaning: "`gate`: asked, in file order, before every answerer; `answerer`: asked, in file order, after the gates.",
    },
    Key {
        name: "sha256",
        kind: "string (64 hex digits)",
        default: "unset",
        meaning: "Pins the component: a file with any other SHA-256 digest is refused at load.",
    },
    Key {
        name: "timeout_ms",
        kind: "integer (1–600000)",
        default: "`1000`",
        meaning: "How long one decision may run, instantiation included; past it the request settles `unavailable`.",
    },
    Key {
        name: "memory_mb",
        kind: "integer (1–4096)",
        default: "`64`",
        meaning: "The plugin's linear-memory cap, in MiB.",
    },
    Key {
        name: "isolation",
        kind: r#"`"reuse"` | `"per-decision"`"#,
        default: r#"`"reuse"`"#,
        meaning: "`reuse` keeps a healthy instance for the next decision; `per-decision` starts a fresh one each time (a few microseconds more a decision).",
    },
    Key {
        name: "config",
        kind: "table of strings",
        default: "`{}`",
        meaning: "Strings the plugin reads with `host.config` and checks in `validate-config` at load (usually written as `[plugin.config]`).",
    },
    Key {
        name: "files",
        kind: "table of strings (guest path = directory)",
        default: "`{}`",
        meaning: "Read-only directories the plugin may read: an absolute guest path mapped to a host directory, relative to this file, that must exist (`[plugin.files]`).",
    },
    Key {
        name: "allow-hosts",
        kind: "list of strings",
        default: "`[]`",
        meaning: "The hosts a plugin of API 0.3 may send HTTP requests to: `host`, `host:port` or `http(s)://host[:port]` (HTTPS when no scheme is written), compared exactly; no path, wildcard or credentials.",
    },
    Key {
        name: "secrets",
        kind: r#"table of strings (name = `"env:VAR"` | `"file:PATH"`)"#,
        default: "`{}`",
        meaning: "Secrets the plugin uses by name (letters, digits, `-` and `_`), read at load from an environment variable or a file (relative to this file); a value is never written in the deployment.",
    },
    Key {
        name: "wait_ms",
        kind: "integer (1–86400000)",
        default: "unset (the plugin does not wait)",
        meaning: "How long a question the plugin answers `pending` waits for its callback (`serve --callbacks`), in milliseconds.",
    },
    Key {
        name: "on-timeout",
        kind: r#"`"unavailable"` | `"reject"`"#,
        default: r#"`"unavailable"`"#,
        meaning: "How a wait that runs out settles: `unavailable`, or `reject` with the reason that no answer came. Only with `wait_ms`.",
    },
    Key {
        name: "cases",
        kind: "string (path)",
        default: "unset",
        meaning: "A conformance case file, relative to this file, that every version must pass before it serves, at start and at every reload. Not for a shadow.",
    },
    Key {
        name: "mode",
        kind: r#"`"decide"` | `"shadow"`"#,
        default: r#"`"decide"`"#,
        meaning: "`shadow`: the version sees every settled question after its decision and records what it would have answered, never changing an outcome; a shadow may not have `allow-hosts`, `wait_ms` or `cases`.",
    },
];

/// `[[plugin]]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[[plugin]]",
    about: "A WebAssembly gate or answerer, one entry per plugin (or shadow). Loading is all or nothing: an entry that does not load refuses the file.",
    keys: &KEYS,
};

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

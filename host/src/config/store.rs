//! `[store]`: where a deployment's session logs and rules live when not in the state directory.
//!
//! ```toml
//! [store]
//! url = "postgres://approvals@db.internal/approvals"  # never with a password in it
//! password-file = "/run/secrets/approvals-db"         # or password-env = "APPROVALS_DB_PASSWORD"
//! lease-seconds = 15                                   # how soon another host takes over
//! ca-file = "db-ca.pem"                                # TLS to the database: trust these CAs (default: the system's)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use toml::Value;

use super::ConfigError;
use super::key::{Key, Section};
use super::read::{Ctx, known_key, positive, string, unread};

const KEYS: [Key; 5] = [
    Key {
        name: "url",
        kind: "string (`postgres://` URL)",
        default: "none (required)",
        meaning: "The database, as `postgres://user@host/db`; a URL with a password in it is refused. TCP connections use TLS with the certificate checked unless the URL's `sslmode` says otherwise; a command's `--store URL` takes its place.",
    },
    Key {
        name: "password-file",
        kind: "string (path)",
        default: "unset",
        meaning: "A file holding the password, relative to this file, read at start (trailing newlines dropped). Not with `password-env`.",
    },
    Key {
        name: "password-env",
        kind: "string",
        default: "unset (`APPROVAL_HOST_DB_PASSWORD`, when set)",
        meaning: "The environment variable holding the password. Not with `password-file`.",
    },
    Key {
        name: "lease-seconds",
        kind: "integer (1–3600)",
        default: "`15`",
        meaning: "How long a host's lease on a session lasts unless renewed: how soon another host takes over a dead host's sessions.",
    },
    Key {
        name: "ca-file",
        kind: "string (path)",
        default: "unset (the system's authorities)",
        meaning: "The certificate authorities (PEM) the database's TLS certificate must chain to, relative to this file; the file must exist.",
    },
];

/// `[store]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[store]",
    about: "A PostgreSQL database for session logs and rules, which several hosts share; the state directory holds them when the section is absent.",
    keys: &KEYS,
};

/// The deployment's `[store]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The database URL (no password).
    pub url: String,
    /// A file holding the password (relative to the deployment file), read at start.
    pub password_file: Option<PathBuf>,
    /// An environment variable holding the password.
    pub password_env: Option<String>,
    /// How long a session's lease lasts unless renewed.
    pub lease: Duration,
    /// The certificate authorities (PEM) the database's TLS certificate must chain to (relative
    /// to the deployment file); the system's when omitted.
    pub ca_file: Option<PathBuf>,
}

impl StoreConfig {
    /// The password, from the file or the variable the table names, or from
    /// [`crate::audit::postgres::PASSWORD_ENV`] when it names neither.
    pub fn password(&self) -> Result<Option<String>, String> {
        if let Some(file) = &self.password_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("[store] password-file {}: {e}", file.display()))?;
            return Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()));
        }
        let var = self
            .password_env
            .as_deref()
            .unwrap_or(crate::audit::postgres::PASSWORD_ENV);
        match std::env::var(var) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) if self.password_env.is_none() => Ok(None),
            Err(e) => Err(format!("[store] password-env {var}: {e}")),
        }
    }
}

pub(super) fn parse(ctx: &Ctx, value: &Value) -> Result<StoreConfig, ConfigError> {
    let table = value
        .as_table()
        .ok_or_else(|| ctx.err("[store]", "must be a table"))?;
    let mut url = None;
    let mut password_file = None;
    let mut password_env = None;
    let mut lease = crate::audit::postgres::DEFAULT_LEASE;
    let mut ca_file = None;
    for (k, v) in table {
        match known_key(ctx, "[store]", k, &KEYS)? {
            "url" => {
                let u = string(ctx, "[store]", "url", v)?;
                crate::audit::postgres::check_url(u)
                    .map_err(|e| ctx.err("[store]", format!("url: {e}")))?;
                url = Some(u.to_owned());
            }
            "password-file" => {
                password_file = Some(ctx.resolve(string(ctx, "[store]", "password-file", v)?));
            }
            "password-env" => {
                password_env = Some(string(ctx, "[store]", "password-env", v)?.to_owned());
            }
            "ca-file" => {
                let file = ctx.resolve(string(ctx, "[store]", "ca-file", v)?);
                if !file.is_file() {
                    return Err(ctx.err(
                        "[store]",
                        format!("ca-file {:?}: no such file", file.display().to_string()),
                    ));
                }
                ca_file = Some(file);
            }
            "lease-seconds" => {
                lease = Duration::from_secs(positive(ctx, "[store]", "lease-seconds", v, 3600)?);
            }
            other => return Err(unread(ctx, "[store]", other)),
        }
    }
    if password_file.is_some() && password_env.is_some() {
        return Err(ctx.err(
            "[store]",
            "password-file and password-env: give one of them",
        ));
    }
    let url = url.ok_or_else(|| ctx.err("[store]", "url is missing"))?;
    Ok(StoreConfig {
        url,
        password_file,
        password_env,
        lease,
        ca_file,
    })
}

/// The database a command works on, if any: `url` (a command line's `--store`) over the
/// deployment's `[store] url`, keeping the table's password, lease and CA settings; `None` when
/// neither names one (the state directory then holds the logs).
pub fn options(
    deployment: Option<&super::Deployment>,
    url: Option<&str>,
) -> Result<Option<crate::audit::postgres::PgOptions>, crate::audit::postgres::DbError> {
    let table = deployment.and_then(|d| d.store.as_ref());
    let config = match (url, table) {
        (None, None) => return Ok(None),
        (Some(url), table) => {
            crate::audit::postgres::check_url(url)?;
            StoreConfig {
                url: url.to_owned(),
                ..table.cloned().unwrap_or(StoreConfig {
                    url: String::new(),
                    password_file: None,
                    password_env: None,
                    lease: crate::audit::postgres::DEFAULT_LEASE,
                    ca_file: None,
                })
            }
        }
        (None, Some(table)) => table.clone(),
    };
    let mut options = crate::audit::postgres::PgOptions::new(&config.url);
    options.password = config
        .password()
        .map_err(crate::audit::postgres::DbError::Password)?;
    options.lease = config.lease;
    options.ca_file = config.ca_file.clone();
    Ok(Some(options))
}

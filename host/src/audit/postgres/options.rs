//! How to reach the database: its URL (never with a password), the password's source, the lease,
//! the pool's size and TLS; and why it could not be reached or used.

use std::str::FromStr;
use std::time::Duration;

/// How long a lease lasts unless renewed; renewed every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// Most connections one store opens.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// How to reach the database and how this host takes part.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user@host:port/dbname?...` or `host=... dbname=...`, without a password.
    pub url: String,
    /// The password, read from an environment variable or a file by the caller.
    pub password: Option<String>,
    /// How long a session's lease lasts without renewal: how soon another host may take over the
    /// sessions of a host that died.
    pub lease: Duration,
    /// How this host names itself in lease rows (and so in another host's "in use by" error).
    pub host_label: String,
    /// Create or migrate the schema when it is behind, instead of refusing to start.
    pub migrate: bool,
    /// Most connections open at once.
    pub max_connections: usize,
    /// The certificate authorities (PEM) a TLS connection's server certificate must chain to;
    /// `None`: the system's. TLS is used as the URL's `sslmode` says (`prefer` by default,
    /// `require` to refuse a server without it; a Unix socket never uses it).
    pub ca_file: Option<std::path::PathBuf>,
}

impl PgOptions {
    /// Options for `url` with the defaults: a 15 s lease, the machine's host name and process id
    /// as the label, no migration.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            password: None,
            lease: DEFAULT_LEASE,
            host_label: default_host_label(),
            migrate: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            ca_file: None,
        }
    }
}

pub(super) fn default_host_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host} pid {}", std::process::id())
}

/// Why the store could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error("store URL: {0}")]
    Url(String),
    /// The URL carries a password, which would show in process listings and shell history.
    #[error(
        "store URL: a password in the URL is refused (it would show in process listings); set {env} or the deployment's [store] password-file instead"
    )]
    PasswordInUrl {
        /// The environment variable to use instead.
        env: &'static str,
    },
    /// The TLS settings for the database could not be used.
    #[error("store TLS: {0}")]
    Tls(String),
    /// The password file or variable could not be read.
    #[error("store password: {0}")]
    Password(String),
    /// The database could not be reached or refused a statement.
    #[error("database {what}: {reason}")]
    Database {
        /// What was being done.
        what: &'static str,
        /// The database's or the connection's error.
        reason: String,
    },
    /// The schema is older than this host's and migration was not asked for.
    #[error(
        "the database schema is at version {found}, this host needs version {needed}: run `approval-host db migrate` (or start with --migrate)"
    )]
    SchemaBehind {
        /// The version found.
        found: i32,
        /// The version this host needs.
        needed: i32,
    },
    /// The schema is newer than this host knows.
    #[error(
        "the database schema is at version {found}, newer than this host knows ({known}): upgrade approval-host"
    )]
    SchemaAhead {
        /// The version found.
        found: i32,
        /// The newest version this host knows.
        known: i32,
    },
}

/// The TLS connector for database connections: the server's certificate must chain to the
/// authorities in `ca_file`, or to the system's.
pub(super) fn tls_connector(
    ca_file: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, DbError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = crate::pem::certs(path).map_err(|e| DbError::Tls(e.to_string()))?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| DbError::Tls(format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            // Certificates the system store holds but rustls cannot use are skipped.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| DbError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The environment variable a command-line store URL's password comes from.
pub const PASSWORD_ENV: &str = "APPROVAL_HOST_DB_PASSWORD";

/// Checks a store URL given where it could be seen (a command line, a deployment file): it must
/// parse and must not carry a password.
pub fn check_url(url: &str) -> Result<(), DbError> {
    let (config, _) = parse_url(url)?;
    if config.get_password().is_some() {
        return Err(DbError::PasswordInUrl { env: PASSWORD_ENV });
    }
    Ok(())
}

/// How a store URL's connections are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TLS, with the server's certificate checked against the CA file or the system's
    /// authorities and its name against the host: a server without TLS, or a man in the middle,
    /// is refused. The default over TCP (and what `verify-full`, `verify-ca` and `require` ask).
    Verified,
    /// TLS when the server offers it, plaintext otherwise: written as `sslmode=prefer`, warned of.
    Opportunistic,
    /// Plaintext: written as `sslmode=disable`, warned of.
    Plain,
    /// A Unix socket: local, no TLS.
    Local,
}

/// The `sslmode` a URL writes, if it writes one (`postgres://…?sslmode=x` or `sslmode=x`).
fn written_ssl_mode(url: &str) -> Option<&str> {
    let at = url.find("sslmode=")?;
    let value = &url[at + "sslmode=".len()..];
    let end = value
        .find(|c: char| c == '&' || c.is_whitespace())
        .unwrap_or(value.len());
    Some(&value[..end])
}

/// Parses a store URL with the host's TLS default: over TCP, a URL that names no `sslmode` is
/// `verify-full` (TLS, certificate and host name checked), never libpq's `prefer`, which a man in
/// the middle can downgrade to plaintext. `verify-full` and `verify-ca` are accepted and mean
/// what rustls always does (chain and name checked).
pub(super) fn parse_url(url: &str) -> Result<(tokio_postgres::Config, Transport), DbError> {
    let written = written_ssl_mode(url);
    let spelled = match written {
        Some(mode @ ("verify-full" | "verify-ca")) => {
            url.replacen(&format!("sslmode={mode}"), "sslmode=require", 1)
        }
        _ => url.to_owned(),
    };
    let spelled = query_host_overrides(&spelled);
    let mut config =
        tokio_postgres::Config::from_str(&spelled).map_err(|e| DbError::Url(e.to_string()))?;
    // A `hostaddr` is an IP address reached over TCP, whatever `host` says.
    let over_tcp = !config.get_hostaddrs().is_empty()
        || config
            .get_hosts()
            .iter()
            .any(|h| matches!(h, tokio_postgres::config::Host::Tcp(_)));
    let transport = if !over_tcp {
        // libpq never uses TLS on a Unix socket, whatever `sslmode` says; neither do we (no
        // `SSLRequest` round trip the server can only refuse).
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        Transport::Local
    } else {
        match written {
            None | Some("require" | "verify-full" | "verify-ca") => {
                config.ssl_mode(tokio_postgres::config::SslMode::Require);
                Transport::Verified
            }
            Some("prefer") => Transport::Opportunistic,
            _ => Transport::Plain,
        }
    };
    Ok((config, transport))
}

/// A URL's `host` query parameter replaces the hosts before the path, as libpq reads it
/// (`postgres://u@localhost:5432/db?host=/run/postgresql` is the socket in `/run/postgresql`):
/// tokio-postgres would add it to them instead, and try TCP to `localhost` first. The ports written
/// before the path stay, by position, as in libpq, unless the query names its own. The URL is cut
/// where tokio-postgres cuts it (the user at the first `@`, the hosts up to the next `/` or `?`);
/// any URL this does not apply to, or whose ports are not numbers, is returned as it is.
fn query_host_overrides(url: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let Some(rest) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|p| url.strip_prefix(p))
    else {
        return Cow::Borrowed(url);
    };
    let (credentials, after) = match rest.find('@') {
        Some(at) => rest.split_at(at + 1),
        None => ("", rest),
    };
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let (hosts, path_and_query) = after.split_at(end);
    let Some((_, query)) = path_and_query.split_once('?') else {
        return Cow::Borrowed(url);
    };
    let names = |key: &str| {
        query.split('&').any(|pair| {
            pair.split_once('=').is_some_and(|(k, _)| {
                percent_encoding::percent_decode_str(k).decode_utf8_lossy() == key
            })
        })
    };
    if !names("host") {
        return Cow::Borrowed(url);
    }
    let ports: Vec<&str> = hosts
        .split(',')
        .map(|chunk| {
            let port = match chunk.strip_prefix('[') {
                Some(v6) => v6.split_once("]:").map(|(_, port)| port),
                None => chunk.split_once(':').map(|(_, port)| port),
            };
            port.filter(|p| !p.is_empty()).unwrap_or("5432")
        })
        .collect();
    if !ports.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        return Cow::Borrowed(url);
    }
    let written = hosts.contains(':');
    let scheme = &url[..url.len() - rest.len()];
    let mut spelled = format!("{scheme}{credentials}{path_and_query}");
    if written && !names("port") {
        spelled.push_str("&port=");
        spelled.push_str(&ports.join(","));
    }
    Cow::Owned(spelled)
}

/// How connections to the database at `url` are protected (see [`Transport`]).
pub fn transport(url: &str) -> Result<Transport, DbError> {
    parse_url(url).map(|(_, t)| t)
}

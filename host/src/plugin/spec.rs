//! What a deployment says about one plugin: its file, role, pin, limits, isolation, config and
//! directory grants. The deployment file's `[[plugin]]` entries parse into it; the plugin host
//! loads from it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Whether a plugin gates (asked before every answerer) or answers (terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Asked before every answerer, in file order; decides or delegates.
    Gate,
    /// Asked after every gate, in file order.
    Answerer,
}

impl Role {
    /// `gate` or `answerer`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Gate => "gate",
            Role::Answerer => "answerer",
        }
    }
}

/// Whether a healthy instance serves the next decision or each decision gets a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// Warm reuse of healthy instances (the default: measured ~30× cheaper per decision).
    Reuse,
    /// A fresh instance per decision: no state survives between decisions.
    PerDecision,
}

impl Isolation {
    /// `reuse` or `per-decision`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::Reuse => "reuse",
            Isolation::PerDecision => "per-decision",
        }
    }
}

/// Default per-decision deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Default linear-memory cap, in MiB.
pub const DEFAULT_MEMORY_MB: u64 = 64;

/// One `[[plugin]]` entry, validated and with paths resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// Unique name, used in logs and audit events.
    pub name: String,
    /// The component file.
    pub path: PathBuf,
    /// Gate or answerer.
    pub role: Role,
    /// The expected SHA-256 of the file (lowercase hex), when pinned.
    pub sha256: Option<String>,
    /// Per-decision deadline.
    pub timeout: Duration,
    /// Linear-memory cap in bytes.
    pub memory_bytes: u64,
    /// Instance reuse.
    pub isolation: Isolation,
    /// Strings the plugin reads with `host.config`.
    pub config: BTreeMap<String, String>,
    /// Read-only directory grants: guest path → host directory.
    pub files: Vec<(String, PathBuf)>,
    /// The hosts a plugin of API 0.3 may send HTTP requests to (`allow-hosts`); none by default.
    pub allow_hosts: Vec<super::grant::HostGrant>,
    /// Secrets by the name the plugin uses (`secrets`): their values never enter the sandbox.
    pub secrets: BTreeMap<String, super::secret::Secret>,
    /// How long a question may wait for the plugin's callback, and how it settles when none
    /// comes (`wait`, `on-timeout`); without it, the plugin may not answer `pending`.
    pub wait: Option<super::pending::Wait>,
}

impl PluginSpec {
    /// A spec with the defaults for everything but name, path and role.
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>, role: Role) -> Self {
        PluginSpec {
            name: name.into(),
            path: path.into(),
            role,
            sha256: None,
            timeout: DEFAULT_TIMEOUT,
            memory_bytes: DEFAULT_MEMORY_MB << 20,
            isolation: Isolation::Reuse,
            config: BTreeMap::new(),
            files: Vec::new(),
            allow_hosts: Vec::new(),
            secrets: BTreeMap::new(),
            wait: None,
        }
    }

    /// Whether the plugin sends its questions out of the process: it may reach hosts, or wait
    /// for a callback. Its questions are durable before it runs.
    pub fn leaves_process(&self) -> bool {
        !self.allow_hosts.is_empty() || self.wait.is_some()
    }
}

//! The deployment file (TOML): the default approval policy and the plugins, in order.
//!
//! Loading is strict: an unknown key, a value outside a vocabulary, a duplicate plugin name or a
//! missing file is an error that names the file, the plugin and the field, never a silently
//! ignored setting. Relative paths are resolved against the deployment file's directory.
//!
//! Each section has a file of its own that documents its keys (a [`Section`], the only key list
//! its unknown-key check uses) and parses it into the type of the feature it configures
//! (`approval.rs`, `sandbox.rs`, `audit.rs`, `store.rs`, `rules.rs`, `claude_code.rs`,
//! `plugin.rs`, `answerer.rs`, `hook.rs`, `token.rs`, `limits.rs`, `telemetry.rs`, `mcp.rs`); this
//! file calls one function per section
//! ([`SECTIONS`], the top-level keys written once). How values are read is `read.rs`; where an
//! error points in the file, `locate.rs`; the reference the key tables make
//! (`docs/reference/deployment.md`), `keys.rs`; the places the deployment's policy lives, which its
//! built-in rules protect, `protected.rs`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

pub mod answerer;
mod approval;
mod audit;
mod claude_code;
pub mod hook;
mod key;
pub mod keys;
pub mod limits;
mod locate;
mod mcp;
mod plugin;
mod protected;
mod read;
pub mod rules;
mod sandbox;
pub mod store;
mod telemetry;
pub mod token;
pub use locate::Location;

pub use crate::plugin::spec::{DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, Isolation, PluginSpec, Role};
pub use hook::DEFAULT_HOOK_TIMEOUT;
pub use key::{Key, Section};
pub use keys::{reference, reference_markdown};
pub use rules::{RulesConfig, StaticRule};

use crate::claude_code::HookOptions;
use crate::policy::{POLICY_VOCABULARY_ERROR, Policy};
use crate::tools::hooks::HookSpec;
use crate::tools::sandbox::SandboxMode;
use read::Ctx;

/// A deployment file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the deployment file")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{}{at}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        at: Location,
        /// What the parser said.
        message: String,
    },
    /// `[approval] policy` is outside the vocabulary.
    #[error("{}{at}: [approval] policy = {value:?}: {POLICY_VOCABULARY_ERROR}", path.display())]
    Policy {
        /// The file.
        path: PathBuf,
        /// The line and column of the value.
        at: Location,
        /// The refused value.
        value: String,
    },
    /// A key or value outside a plugin entry's contract.
    #[error("{}{at}: {place}: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The line and column of the key (or table) the error is about.
        at: Location,
        /// Where: `[approval]`, `plugin "name"`, `plugin #2` (when it has no usable name)...
        place: String,
        /// The field and what is wrong with it.
        message: String,
    },
}

/// A loaded deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// The file it came from; `None` for the embedded default.
    pub path: Option<PathBuf>,
    /// The policy of sessions without their own switch (`ask` when omitted).
    pub default_policy: Policy,
    /// Plugins in file order (the waterfall puts gates first, then answerers).
    pub plugins: Vec<PluginSpec>,
    /// `[[plugin]] mode = "shadow"`: versions that see every settled question without a say.
    pub shadows: Vec<PluginSpec>,
    /// Command hooks (`[[hook]]`), in file order.
    pub hooks: Vec<HookSpec>,
    /// `[sandbox] mode`: the sandbox mode of sessions without their own switch (`read-only`
    /// when omitted).
    pub sandbox_mode: SandboxMode,
    /// `[audit] signing-key`: the Ed25519 key file checkpoints are signed with (relative to this
    /// file; keep it outside the state directory). No checkpoints when omitted.
    pub signing_key: Option<PathBuf>,
    /// `[audit] checkpoint-copy`: a second directory every checkpoint is also appended to
    /// (relative to this file; another disk or a mount only the host can append to), so a state
    /// directory whose checkpoint logs were removed or cut is still checked against the copy.
    pub checkpoint_copy: Option<PathBuf>,
    /// `[audit] redact`: the `tool/call` argument values no log may hold.
    pub redact: crate::audit::redact::Redaction,
    /// `[rules]` and `[[rule]]`: standing rules.
    pub rules: RulesConfig,
    /// `[claude-code]`: how the Claude Code hook answers calls nobody decided.
    pub claude_code: HookOptions,
    /// `[store]`: a shared database for session logs and rules; the state directory when
    /// omitted.
    pub store: Option<store::StoreConfig>,
    /// `[[token]]`: who may connect to `serve` over a socket or the network.
    pub tokens: Vec<token::TokenSpec>,
    /// `[[answerer]] kind = "web"`: the web console as the last answerer.
    pub web_answerer: Option<answerer::WebAnswererSpec>,
    /// `[limits]`: how much one client of `serve` may hold.
    pub limits: limits::Limits,
    /// `[[plugin]] cases = "…"`: per plugin name, the conformance cases a version must pass
    /// before it serves (at start and at every reload).
    pub plugin_cases: std::collections::BTreeMap<String, PathBuf>,
    /// `[telemetry]`: where traces go; no tracing when omitted.
    pub telemetry: Option<crate::telemetry::TelemetryConfig>,
    /// `[mcp]`: how the MCP gateway lists tools.
    pub mcp: crate::mcp::McpConfig,
}

/// `[claude-code]` (`when-undecided = "ask" | "defer"`, `defer-in-modes = ["plan", ...]`):
/// the hook's own options type.
pub type ClaudeCodeConfig = HookOptions;

/// How one top-level key is parsed into the deployment.
type Parse = fn(&Ctx, &Value, &mut Deployment) -> Result<(), ConfigError>;

/// The top-level keys of a deployment file, as the unknown-key message lists them, and their
/// parsers; [`reference`] documents each, in this order.
pub const SECTIONS: [(&str, &str); 14] = [
    ("approval", "[approval]"),
    ("sandbox", "[sandbox]"),
    ("audit", "[audit]"),
    ("store", "[store]"),
    ("rules", "[rules]"),
    ("claude-code", "[claude-code]"),
    ("plugin", "[[plugin]]"),
    ("answerer", "[[answerer]]"),
    ("rule", "[[rule]]"),
    ("hook", "[[hook]]"),
    ("token", "[[token]]"),
    ("limits", "[limits]"),
    ("telemetry", "[telemetry]"),
    ("mcp", "[mcp]"),
];

fn section(key: &str) -> Option<Parse> {
    Some(match key {
        "approval" => approval::parse,
        "sandbox" => sandbox::parse,
        "audit" => audit::parse,
        "store" => store_section,
        "rules" => rules::parse,
        "claude-code" => claude_code::parse,
        "plugin" => plugins,
        "answerer" => answerers,
        "rule" => rules::entries,
        "hook" => hooks,
        "token" => tokens,
        "limits" => limits::parse,
        "telemetry" => telemetry::parse,
        "mcp" => mcp::parse,
        _ => return None,
    })
}

fn store_section(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    d.store = Some(store::parse(ctx, value)?);
    Ok(())
}

fn plugins(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let entries = value
        .as_array()
        .ok_or_else(|| ctx.err("plugin", "must be an array of [[plugin]] tables"))?;
    let mut names = HashSet::new();
    let mut shadow_names = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let (spec, cases, shadow) = plugin::entry(ctx, i, entry)?;
        // A shadow may share its name with the deciding version it is tried against.
        let (taken, which) = if shadow {
            (&mut shadow_names, "shadow")
        } else {
            (&mut names, "plugin")
        };
        if !taken.insert(spec.name.clone()) {
            return Err(ctx.err(
                &format!("plugin #{}", i + 1),
                format!(
                    "name = {:?} is used by an earlier {which}; names must be unique",
                    spec.name
                ),
            ));
        }
        if let Some(cases) = cases {
            d.plugin_cases.insert(spec.name.clone(), cases);
        }
        if shadow {
            d.shadows.push(spec);
        } else {
            d.plugins.push(spec);
        }
    }
    Ok(())
}

fn answerers(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let list = value
        .as_array()
        .ok_or_else(|| ctx.err("[[answerer]]", "must be an array of tables"))?;
    for (i, v) in list.iter().enumerate() {
        let spec = answerer::parse(ctx, v, i + 1)?;
        if d.web_answerer.is_some() {
            return Err(ctx.err(
                &format!("[[answerer]] #{}", i + 1),
                "a second kind = \"web\" answerer: the console answers once",
            ));
        }
        d.web_answerer = Some(spec);
    }
    Ok(())
}

fn hooks(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let entries = value
        .as_array()
        .ok_or_else(|| ctx.err("hook", "must be an array of [[hook]] tables"))?;
    for (i, entry) in entries.iter().enumerate() {
        d.hooks.push(hook::entry(ctx, i, entry)?);
    }
    Ok(())
}

fn tokens(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let list = value
        .as_array()
        .ok_or_else(|| ctx.err("[[token]]", "must be an array of tables"))?;
    for (i, v) in list.iter().enumerate() {
        let spec = token::parse(ctx, v, i + 1)?;
        if d.tokens.iter().any(|t| t.name == spec.name) {
            return Err(ctx.err(
                &format!("[[token]] #{}", i + 1),
                format!("name {:?} is used twice", spec.name),
            ));
        }
        d.tokens.push(spec);
    }
    Ok(())
}

impl Deployment {
    /// The embedded default: policy `ask` and no plugin, so every request settles `unavailable`
    /// (fail-closed without configuration).
    pub fn embedded() -> Self {
        Deployment {
            path: None,
            default_policy: Policy::Ask,
            plugins: Vec::new(),
            shadows: Vec::new(),
            hooks: Vec::new(),
            sandbox_mode: SandboxMode::ReadOnly,
            signing_key: None,
            checkpoint_copy: None,
            redact: crate::audit::redact::Redaction::default(),
            rules: RulesConfig::default(),
            claude_code: HookOptions::default(),
            store: None,
            tokens: Vec::new(),
            web_answerer: None,
            limits: limits::Limits::default(),
            plugin_cases: std::collections::BTreeMap::new(),
            telemetry: None,
            mcp: crate::mcp::McpConfig::default(),
        }
    }

    /// Loads a deployment file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses deployment text; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let doc: Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: path.to_owned(),
                at: e
                    .span()
                    .map_or_else(Location::default, |s| locate::line_column(text, s.start)),
                message: e.message().trim_end().to_owned(),
            })?;
        let ctx = Ctx {
            path,
            dir: path.parent().unwrap_or(Path::new(".")),
            locator: locate::Locator::new(text),
        };
        let mut deployment = Deployment {
            path: Some(path.to_owned()),
            ..Deployment::embedded()
        };
        for (key, value) in &doc {
            let Some(parse) = section(key) else {
                let known: Vec<&str> = SECTIONS.iter().map(|(_, shown)| *shown).collect();
                return Err(read::unknown(&ctx, "top level", key, &known));
            };
            parse(&ctx, value, &mut deployment)?;
        }
        Ok(deployment)
    }
}

impl AsRef<[PluginSpec]> for Deployment {
    /// The deployment's plugins, in file order: what mounting it loads.
    fn as_ref(&self) -> &[PluginSpec] {
        &self.plugins
    }
}

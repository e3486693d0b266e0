//! The deployment file (TOML): the default approval policy and the plugins, in order.
//!
//! Loading is strict: an unknown key, a value outside a vocabulary, a duplicate plugin name or a
//! missing file is an error that names the file, the plugin and the field, never a silently
//! ignored setting. Relative paths are resolved against the deployment file's directory.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

pub mod answerer;
mod locate;
mod protected;
pub mod store;
pub mod token;
pub use locate::Location;

use crate::claude_code::HookOptions;
use crate::policy::{POLICY_VOCABULARY_ERROR, Policy};
use crate::tools::hooks::{HookSpec, PRE_TOOL_USE};
use crate::tools::sandbox::SandboxMode;

/// Default time a hook may run.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

const HOOK_KEYS: [&str; 4] = ["event", "matcher", "command", "timeout_ms"];

fn hook(ctx: &Ctx, index: usize, entry: &Value) -> Result<HookSpec, ConfigError> {
    let place = format!("hook #{}", index + 1);
    let place = place.as_str();
    let table = entry
        .as_table()
        .ok_or_else(|| ctx.err(place, "each [[hook]] must be a table"))?;
    for key in table.keys() {
        if !HOOK_KEYS.contains(&key.as_str()) {
            return Err(ctx.err(
                place,
                format!(
                    "unknown key {key:?} (expected one of {})",
                    HOOK_KEYS.join(", ")
                ),
            ));
        }
    }
    match table.get("event") {
        None => return Err(ctx.err(place, "event is missing (\"PreToolUse\")")),
        Some(v) => {
            let event = string(ctx, place, "event", v)?;
            if event != PRE_TOOL_USE {
                return Err(ctx.err(
                    place,
                    format!("event = {event:?}: only \"PreToolUse\" is supported"),
                ));
            }
        }
    }
    let command = match table.get("command") {
        None => return Err(ctx.err(place, "command is missing")),
        Some(v) => string(ctx, place, "command", v)?.to_owned(),
    };
    if command.trim().is_empty() {
        return Err(ctx.err(place, "command must not be empty"));
    }
    let matcher = match table.get("matcher") {
        None => String::new(),
        Some(v) => string(ctx, place, "matcher", v)?.to_owned(),
    };
    if !matches!(matcher.as_str(), "" | "*")
        && let Err(e) = regex::Regex::new(&matcher)
    {
        return Err(ctx.err(place, format!("matcher = {matcher:?}: {e}")));
    }
    let timeout = match table.get("timeout_ms") {
        None => DEFAULT_HOOK_TIMEOUT,
        Some(v) => Duration::from_millis(positive(ctx, place, "timeout_ms", v, 600_000)?),
    };
    Ok(HookSpec {
        matcher,
        command,
        timeout,
    })
}

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

pub use crate::plugin::spec::{DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, Isolation, PluginSpec, Role};

/// A loaded deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// The file it came from; `None` for the embedded default.
    pub path: Option<PathBuf>,
    /// The policy of sessions without their own switch (`ask` when omitted).
    pub default_policy: Policy,
    /// Plugins in file order (the waterfall puts gates first, then answerers).
    pub plugins: Vec<PluginSpec>,
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
}

/// `[claude-code]` (`when-undecided = "ask" | "defer"`, `defer-in-modes = ["plan", ...]`):
/// the hook's own options type.
pub type ClaudeCodeConfig = HookOptions;

/// A deployment's standing-rule settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesConfig {
    /// Whether the file has a `[rules]` table or `[[rule]]` entries (standing rules are then on
    /// even before any rule was added).
    pub declared: bool,
    /// `[rules] plugins-may-create`: the scopes a plugin's `allow-always` / `reject-always`
    /// proposal may create (none by default: such a proposal is the one-shot decision).
    pub plugins_may_create: Vec<crate::answer::RuleScope>,
    /// `[[rule]]` entries: static project rules, in file order.
    pub rules: Vec<StaticRule>,
}

/// A `[[rule]]` entry: `rule = "Bash(npm run test:*)"`, `effect = "allow" | "reject"` (default
/// `allow`), `reason = "..."`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticRule {
    /// `Tool` or `Tool(pattern)`.
    pub rule: String,
    /// Allow or reject.
    pub effect: crate::answer::Effect,
    /// Why.
    pub reason: Option<String>,
}

const PLUGIN_KEYS: [&str; 9] = [
    "name",
    "path",
    "role",
    "sha256",
    "timeout_ms",
    "memory_mb",
    "isolation",
    "config",
    "files",
];

struct Ctx<'a> {
    path: &'a Path,
    dir: &'a Path,
    locator: locate::Locator<'a>,
}

impl Ctx<'_> {
    fn err(&self, place: &str, message: impl Into<String>) -> ConfigError {
        let message = message.into();
        ConfigError::Field {
            path: self.path.to_owned(),
            at: self.locator.locate(place, &message),
            place: place.to_owned(),
            message,
        }
    }

    fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    v.type_str()
}

fn string<'v>(ctx: &Ctx, place: &str, key: &str, v: &'v Value) -> Result<&'v str, ConfigError> {
    v.as_str().ok_or_else(|| {
        ctx.err(
            place,
            format!("{key} must be a string, not {}", type_name(v)),
        )
    })
}

fn positive(ctx: &Ctx, place: &str, key: &str, v: &Value, max: i64) -> Result<u64, ConfigError> {
    match v.as_integer() {
        Some(n) if n > 0 && n <= max => Ok(n as u64),
        Some(n) => Err(ctx.err(place, format!("{key} = {n}: must be between 1 and {max}"))),
        None => Err(ctx.err(
            place,
            format!("{key} must be an integer, not {}", type_name(v)),
        )),
    }
}

fn string_table(
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

fn plugin(ctx: &Ctx, index: usize, entry: &Value) -> Result<PluginSpec, ConfigError> {
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
    for key in table.keys() {
        if !PLUGIN_KEYS.contains(&key.as_str()) {
            return Err(ctx.err(
                place,
                format!(
                    "unknown key {key:?} (expected one of {})",
                    PLUGIN_KEYS.join(", ")
                ),
            ));
        }
    }
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
    Ok(spec)
}

impl Deployment {
    /// The embedded default: policy `ask` and no plugin, so every request settles `unavailable`
    /// (fail-closed without configuration).
    pub fn embedded() -> Self {
        Deployment {
            path: None,
            default_policy: Policy::Ask,
            plugins: Vec::new(),
            hooks: Vec::new(),
            sandbox_mode: SandboxMode::ReadOnly,
            signing_key: None,
            checkpoint_copy: None,
            rules: RulesConfig::default(),
            claude_code: HookOptions::default(),
            store: None,
            tokens: Vec::new(),
            web_answerer: None,
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
        let dir = path.parent().unwrap_or(Path::new("."));
        let ctx = Ctx {
            path,
            dir,
            locator: locate::Locator::new(text),
        };
        let mut default_policy = Policy::Ask;
        let mut plugins = Vec::new();
        let mut hooks = Vec::new();
        let mut sandbox_mode = SandboxMode::ReadOnly;
        let mut signing_key = None;
        let mut checkpoint_copy = None;
        let mut rules = RulesConfig::default();
        let mut claude_code = HookOptions::default();
        let mut store = None;
        let mut tokens: Vec<token::TokenSpec> = Vec::new();
        let mut web_answerer = None;
        for (key, value) in &doc {
            match key.as_str() {
                "approval" => {
                    let table = value
                        .as_table()
                        .ok_or_else(|| ctx.err("[approval]", "must be a table"))?;
                    for (k, v) in table {
                        match k.as_str() {
                            "policy" => {
                                let value = string(&ctx, "[approval]", "policy", v)?;
                                default_policy =
                                    value.parse().map_err(|_| ConfigError::Policy {
                                        path: path.to_owned(),
                                        at: ctx.locator.locate("[approval]", "policy"),
                                        value: value.to_owned(),
                                    })?;
                            }
                            other => {
                                return Err(ctx.err(
                                    "[approval]",
                                    format!("unknown key {other:?} (expected policy)"),
                                ));
                            }
                        }
                    }
                }
                "plugin" => {
                    let entries = value.as_array().ok_or_else(|| {
                        ctx.err("plugin", "must be an array of [[plugin]] tables")
                    })?;
                    let mut names = HashSet::new();
                    for (i, entry) in entries.iter().enumerate() {
                        let spec = plugin(&ctx, i, entry)?;
                        if !names.insert(spec.name.clone()) {
                            return Err(ctx.err(
                                &format!("plugin #{}", i + 1),
                                format!(
                                    "name = {:?} is used by an earlier plugin; names must be unique",
                                    spec.name
                                ),
                            ));
                        }
                        plugins.push(spec);
                    }
                }
                "sandbox" => {
                    let table = value
                        .as_table()
                        .ok_or_else(|| ctx.err("[sandbox]", "must be a table"))?;
                    for (k, v) in table {
                        match k.as_str() {
                            "mode" => {
                                sandbox_mode = string(&ctx, "[sandbox]", "mode", v)?
                                    .parse()
                                    .map_err(|e: String| ctx.err("[sandbox]", e))?;
                            }
                            other => {
                                return Err(ctx.err(
                                    "[sandbox]",
                                    format!("unknown key {other:?} (expected mode)"),
                                ));
                            }
                        }
                    }
                }
                "store" => store = Some(store::parse(&ctx, value)?),
                "answerer" => {
                    let list = value
                        .as_array()
                        .ok_or_else(|| ctx.err("[[answerer]]", "must be an array of tables"))?;
                    for (i, v) in list.iter().enumerate() {
                        let spec = answerer::parse(&ctx, v, i + 1)?;
                        if web_answerer.is_some() {
                            return Err(ctx.err(
                                &format!("[[answerer]] #{}", i + 1),
                                "a second kind = \"web\" answerer: the console answers once",
                            ));
                        }
                        web_answerer = Some(spec);
                    }
                }
                "token" => {
                    let list = value
                        .as_array()
                        .ok_or_else(|| ctx.err("[[token]]", "must be an array of tables"))?;
                    for (i, v) in list.iter().enumerate() {
                        let spec = token::parse(&ctx, v, i + 1)?;
                        if tokens.iter().any(|t| t.name == spec.name) {
                            return Err(ctx.err(
                                &format!("[[token]] #{}", i + 1),
                                format!("name {:?} is used twice", spec.name),
                            ));
                        }
                        tokens.push(spec);
                    }
                }
                "audit" => {
                    let table = value
                        .as_table()
                        .ok_or_else(|| ctx.err("[audit]", "must be a table"))?;
                    for (k, v) in table {
                        match k.as_str() {
                            "signing-key" => {
                                let file = string(&ctx, "[audit]", "signing-key", v)?;
                                signing_key = Some(ctx.dir.join(file));
                            }
                            "checkpoint-copy" => {
                                let dir = string(&ctx, "[audit]", "checkpoint-copy", v)?;
                                checkpoint_copy = Some(ctx.dir.join(dir));
                            }
                            other => {
                                return Err(ctx.err(
                                    "[audit]",
                                    format!(
                                        "unknown key {other:?} (expected signing-key or checkpoint-copy)"
                                    ),
                                ));
                            }
                        }
                    }
                    if checkpoint_copy.is_some() && signing_key.is_none() {
                        return Err(ctx.err(
                            "[audit]",
                            "checkpoint-copy needs signing-key: only signed checkpoints are copied",
                        ));
                    }
                }
                "rules" => {
                    rules.declared = true;
                    let table = value
                        .as_table()
                        .ok_or_else(|| ctx.err("[rules]", "must be a table"))?;
                    for (k, v) in table {
                        match k.as_str() {
                            "plugins-may-create" => {
                                let list = v.as_array().ok_or_else(|| {
                                    ctx.err(
                                        "[rules]",
                                        "plugins-may-create must be a list of scopes",
                                    )
                                })?;
                                for s in list {
                                    let s = string(&ctx, "[rules]", "plugins-may-create", s)?;
                                    let scope = serde_json::from_value(serde_json::json!(s))
                                        .map_err(|_| {
                                            ctx.err(
                                                "[rules]",
                                                format!("plugins-may-create: {s:?} is not one of \"session\", \"project\" or \"user\""),
                                            )
                                        })?;
                                    rules.plugins_may_create.push(scope);
                                }
                            }
                            other => {
                                return Err(ctx.err(
                                    "[rules]",
                                    format!("unknown key {other:?} (expected plugins-may-create)"),
                                ));
                            }
                        }
                    }
                }
                "claude-code" => {
                    let table = value
                        .as_table()
                        .ok_or_else(|| ctx.err("[claude-code]", "must be a table"))?;
                    for (k, v) in table {
                        match k.as_str() {
                            "when-undecided" => {
                                claude_code.when_undecided =
                                    string(&ctx, "[claude-code]", "when-undecided", v)?
                                        .parse()
                                        .map_err(|e: String| ctx.err("[claude-code]", e))?;
                            }
                            "defer-in-modes" => {
                                let list = v.as_array().ok_or_else(|| {
                                    ctx.err(
                                        "[claude-code]",
                                        "defer-in-modes must be a list of permission modes",
                                    )
                                })?;
                                for m in list {
                                    let m = string(&ctx, "[claude-code]", "defer-in-modes", m)?;
                                    if !crate::claude_code::PERMISSION_MODES.contains(&m) {
                                        return Err(ctx.err(
                                            "[claude-code]",
                                            format!(
                                                "defer-in-modes: {m:?} is not a Claude Code permission mode (expected one of {})",
                                                crate::claude_code::PERMISSION_MODES.join(", ")
                                            ),
                                        ));
                                    }
                                    claude_code.defer_in_modes.push(m.to_owned());
                                }
                            }
                            other => {
                                return Err(ctx.err(
                                    "[claude-code]",
                                    format!(
                                        "unknown key {other:?} (expected when-undecided or defer-in-modes)"
                                    ),
                                ));
                            }
                        }
                    }
                }
                "rule" => {
                    rules.declared = true;
                    let entries = value
                        .as_array()
                        .ok_or_else(|| ctx.err("rule", "must be an array of [[rule]] tables"))?;
                    for (i, entry) in entries.iter().enumerate() {
                        let place = format!("[[rule]] #{}", i + 1);
                        let table = entry
                            .as_table()
                            .ok_or_else(|| ctx.err(&place, "must be a table"))?;
                        let mut rule = None;
                        let mut effect = crate::answer::Effect::Allow;
                        let mut reason = None;
                        for (k, v) in table {
                            match k.as_str() {
                                "rule" => {
                                    let text = string(&ctx, &place, "rule", v)?;
                                    crate::rules::pattern::parse(text)
                                        .map_err(|e| ctx.err(&place, e.to_string()))?;
                                    rule = Some(text.to_owned());
                                }
                                "effect" => {
                                    effect = string(&ctx, &place, "effect", v)?.parse().map_err(
                                        |e: crate::answer::UnknownWord| {
                                            ctx.err(&place, e.to_string())
                                        },
                                    )?;
                                }
                                "reason" => {
                                    reason = Some(string(&ctx, &place, "reason", v)?.to_owned())
                                }
                                other => {
                                    return Err(ctx.err(
                                        &place,
                                        format!("unknown key {other:?} (expected rule, effect or reason)"),
                                    ));
                                }
                            }
                        }
                        let rule = rule.ok_or_else(|| ctx.err(&place, "missing key \"rule\""))?;
                        rules.rules.push(StaticRule {
                            rule,
                            effect,
                            reason,
                        });
                    }
                }
                "hook" => {
                    let entries = value
                        .as_array()
                        .ok_or_else(|| ctx.err("hook", "must be an array of [[hook]] tables"))?;
                    for (i, entry) in entries.iter().enumerate() {
                        hooks.push(hook(&ctx, i, entry)?);
                    }
                }
                other => {
                    return Err(ctx.err(
                        "top level",
                        format!(
                            "unknown key {other:?} (expected [approval], [sandbox], [audit], [store], [rules], [claude-code], [[plugin]], [[answerer]], [[rule]], [[hook]] or [[token]])"
                        ),
                    ));
                }
            }
        }
        Ok(Deployment {
            path: Some(path.to_owned()),
            default_policy,
            plugins,
            hooks,
            sandbox_mode,
            signing_key,
            checkpoint_copy,
            rules,
            claude_code,
            store,
            tokens,
            web_answerer,
        })
    }
}

impl AsRef<[PluginSpec]> for Deployment {
    /// The deployment's plugins, in file order: what mounting it loads.
    fn as_ref(&self) -> &[PluginSpec] {
        &self.plugins
    }
}

//! From a deployment file to the running parts, and from a changed file to the parts again.
//!
//! The one place below the binary and `serve` that reads a [`Deployment`] for the features it
//! configures: the store ([`open_store`]), the checkpointer ([`checkpointer`]), the rule book and
//! its static rules ([`rule_book`], [`statics`]), the built-in protections
//! ([`Deployment::protected`]), the mounted plugins ([`mount`], [`reload_plugins`]) and shadows
//! ([`shadows`]), and the
//! Claude Code hook's and the ACP agent's options ([`hook_options`], [`agent_options`]). The
//! features themselves never see the deployment file; each takes the part of it that is its own.
//! Errors name the deployment file ([`AssembleError`]).

use std::path::Path;
use std::sync::Arc;

use crate::acp::AgentOptions;
use crate::audit::checkpoint::{self, Checkpointer, KeyError};
use crate::audit::kept::{FoldKey, KeySource};
use crate::audit::postgres::{DbError, PgStore};
use crate::audit::store::{DirStore, Store};
use crate::claude_code::{HookOptions, WhenUndecided};
use crate::config::Deployment;
use crate::conformance;
use crate::plugin::cache::CacheKey;
use crate::plugin::mount::{Mounted, ReloadReport};
use crate::plugin::shadow::Shadows;
use crate::plugin::slot::QuarantinePolicy;
use crate::plugin::spec::PluginSpec;
use crate::plugin::{PluginError, PluginHost};
use crate::rules::{self, Clock, Rule, RuleBook, RuleError};
use crate::service::ApprovalService;
use crate::waterfall::AfterDecision;

/// A part of a deployment that could not be put together, naming the deployment file.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// A plugin of the deployment did not load.
    #[error("{file}: {source}")]
    Plugin {
        /// The deployment file.
        file: String,
        /// Why.
        #[source]
        source: PluginError,
    },
    /// The standing rules could not be read.
    #[error("{file}: standing rules: {source}")]
    Rules {
        /// The deployment file.
        file: String,
        /// Why.
        #[source]
        source: RuleError,
    },
    /// The deployment's `[audit] signing-key` cannot be used.
    #[error("{file}: [audit] signing-key: {source}")]
    SigningKey {
        /// The deployment file.
        file: String,
        /// Why.
        #[source]
        source: KeyError,
    },
    /// The store could not be opened.
    #[error("{file}: store: {source}")]
    Store {
        /// The deployment file.
        file: String,
        /// Why.
        #[source]
        source: DbError,
    },
    /// The deployment's `[telemetry]` exporter could not start.
    #[error("{file}: {source}")]
    Telemetry {
        /// The deployment file.
        file: String,
        /// Why.
        #[source]
        source: crate::telemetry::TelemetryError,
    },
}

/// How a deployment is named in errors: its file, or `default` for the embedded one.
pub fn file_of(deployment: &Deployment) -> String {
    deployment
        .path
        .as_ref()
        .map_or_else(|| "default".to_owned(), |p| p.display().to_string())
}

/// The store a command works on: the database the command line's `url` or the deployment's
/// `[store]` names, else the directory store under `state_dir`. `migrate` creates or migrates
/// the database schema when it is behind.
///
/// # Errors
/// The database options are wrong, or it cannot be reached.
pub fn open_store(
    deployment: Option<&Deployment>,
    url: Option<&str>,
    state_dir: &Path,
    migrate: bool,
) -> Result<Arc<dyn Store>, DbError> {
    match crate::config::store::options(deployment, url)? {
        None => Ok(Arc::new(
            match deployment.and_then(|d| d.limits.open_logs) {
                Some(open_logs) => DirStore::with_open_logs(state_dir, open_logs),
                None => DirStore::new(state_dir),
            }
            .keeping_folds(fold_keys()),
        )),
        Some(mut options) => {
            options.migrate = migrate;
            Ok(Arc::new(PgStore::connect(options)?))
        }
    }
}

/// What the directory store seals its kept folds with: a key derived from the host's local key
/// (the compiled cache's, outside the state directory), read or made the first time a log opens.
/// Without it no fold is kept, and every open reads its whole log.
fn fold_keys() -> Arc<KeySource> {
    KeySource::new(|| {
        let path = CacheKey::default_path()?;
        match CacheKey::load_or_create(&path) {
            Ok(key) => Some(FoldKey::from_bytes(key.derive(b"kept session folds"))),
            Err(e) => {
                tracing::debug!(key = %path.display(), error = %e, "no key: session folds are not kept");
                None
            }
        }
    })
}

/// The checkpointer the deployment asks for (`[audit] signing-key`, and `checkpoint-copy`),
/// keeping checkpoints under `state_dir`; `None` without a key.
///
/// # Errors
/// The key cannot be read.
pub fn checkpointer(
    deployment: &Deployment,
    state_dir: &Path,
) -> Result<Option<Arc<Checkpointer>>, KeyError> {
    let Some(path) = &deployment.signing_key else {
        return Ok(None);
    };
    let key = checkpoint::load_signing_key(path)?;
    let mut checkpointer = Checkpointer::new(key, state_dir);
    if let Some(copy) = &deployment.checkpoint_copy {
        checkpointer = checkpointer.with_copy(copy);
    }
    Ok(Some(Arc::new(checkpointer)))
}

/// The project a deployment's rules belong to: its file's canonical path (every session served
/// from one deployment file shares them), or `default` for the embedded default.
pub fn project_of(deployment: &Deployment) -> String {
    match &deployment.path {
        Some(path) => std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string(),
        None => "default".to_owned(),
    }
}

/// The deployment's `[[rule]]` entries as rules (ids `deployment-<n>` in file order).
///
/// # Errors
/// An entry that does not parse (the deployment loader has already refused such a file).
pub fn statics(deployment: &Deployment) -> Result<Vec<Rule>, RuleError> {
    let file = file_of(deployment);
    Ok(deployment
        .rules
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            RuleBook::deployment_rule(
                format!("deployment-{}", i + 1),
                &r.rule,
                r.effect,
                &file,
                r.reason.clone(),
            )
        })
        .collect::<Result<Vec<_>, _>>()?)
}

/// The rule book of a deployment: its `[[rule]]` entries, its project's and the user's rules
/// from `store`, and its `[rules] plugins-may-create`.
///
/// # Errors
/// A rules log that cannot be read.
pub fn rule_book(
    store: Arc<dyn Store>,
    deployment: &Deployment,
    clock: Clock,
) -> Result<Arc<RuleBook>, RuleError> {
    RuleBook::open(
        store,
        &project_of(deployment),
        statics(deployment)?,
        deployment.rules.plugins_may_create.clone(),
        clock,
    )
}

/// Whether a one-shot command keeps standing rules: when the deployment declares any (`[rules]`,
/// `[[rule]]`) or the store already holds user or project rules; otherwise it does not open the
/// rules logs at all.
pub fn wants_rules(store: &dyn Store, deployment: &Deployment) -> bool {
    let exists = |name: &str| store.log_len(name).ok().flatten() != Some(0);
    deployment.rules.declared
        || exists(rules::USER_LOG)
        || exists(&rules::project_log(&project_of(deployment)))
}

/// Moves `book` to a reloaded deployment: its `[[rule]]` entries and `plugins-may-create`.
pub fn reload_rules(book: &RuleBook, deployment: &Deployment) {
    match statics(deployment) {
        Ok(statics) => book.set_deployment(statics, deployment.rules.plugins_may_create.clone()),
        Err(e) => tracing::warn!(error = %e, "the reloaded [[rule]] entries were not applied"),
    }
}

/// Everything a service needs from a deployment before its plugins: the checkpointer, what
/// the logs redact, the built-in protections of `state_dir`, and, when `rules` says so, the rule
/// book.
///
/// # Errors
/// The signing key or the rules logs cannot be read.
pub fn prepare(
    service: &ApprovalService,
    deployment: &Deployment,
    state_dir: &Path,
    rules: bool,
) -> Result<(), AssembleError> {
    let file = file_of(deployment);
    service.set_checkpointer(checkpointer(deployment, state_dir).map_err(|source| {
        AssembleError::SigningKey {
            file: file.clone(),
            source,
        }
    })?);
    service.set_redaction(deployment.redact.clone());
    // The places that hold this deployment's policy, which no agent may change.
    service.set_protected(Some(deployment.protected(state_dir)));
    if rules {
        let book = rule_book(service.store(), deployment, rules::system_clock())
            .map_err(|source| AssembleError::Rules { file, source })?;
        service.set_rules(Some(book));
    }
    Ok(())
}

/// Loads the deployment's plugins on `host` and mounts them on `service`, all or nothing.
///
/// # Errors
/// A plugin that does not load, named with the deployment file.
pub fn mount(
    service: &ApprovalService,
    host: &PluginHost,
    deployment: &Deployment,
    quarantine: QuarantinePolicy,
) -> Result<Mounted, AssembleError> {
    let failed = |source| AssembleError::Plugin {
        file: file_of(deployment),
        source,
    };
    // A plugin with conformance cases serves only if its version passes them.
    for spec in &deployment.plugins {
        if deployment.plugin_cases.contains_key(&spec.name) {
            let bytes = std::fs::read(&spec.path).map_err(|source| {
                failed(PluginError::Read {
                    name: spec.name.clone(),
                    path: spec.path.clone(),
                    source,
                })
            })?;
            passes_cases(host, deployment, spec, &bytes).map_err(|why| {
                failed(PluginError::Refused {
                    name: spec.name.clone(),
                    why,
                })
            })?;
        }
    }
    Mounted::load_with(service, host, deployment, quarantine).map_err(failed)
}

/// Loads the deployment's shadow plugins on `host` and has `service` show them every settled
/// question (none: nothing sees them). All or nothing.
///
/// # Errors
/// A shadow that does not load, named with the deployment file.
pub fn shadows(
    service: &ApprovalService,
    host: &PluginHost,
    deployment: &Deployment,
    quarantine: QuarantinePolicy,
) -> Result<Arc<Shadows>, AssembleError> {
    let shadows = Shadows::load(host, &deployment.shadows, quarantine).map_err(|source| {
        AssembleError::Plugin {
            file: file_of(deployment),
            source,
        }
    })?;
    let after: Option<Arc<dyn AfterDecision>> = if shadows.is_empty() {
        None
    } else {
        Some(shadows.clone())
    };
    service.set_after_decision(after);
    Ok(shadows)
}

/// Whether this version of `spec`'s plugin (`bytes`) passes the conformance cases the
/// deployment names for it (`cases = "…"`; none: it passes). A case without its own config runs
/// with the deployment's. The cases run in a scratch state directory, never the host's.
fn passes_cases(
    host: &PluginHost,
    deployment: &Deployment,
    spec: &PluginSpec,
    bytes: &[u8],
) -> Result<(), String> {
    let Some(path) = deployment.plugin_cases.get(&spec.name) else {
        return Ok(());
    };
    let suite = conformance::Suite::load(path).map_err(|e| format!("cases: {e}"))?;
    let cases: Vec<conformance::Case> = suite
        .for_plugin(&spec.name)
        .cloned()
        .map(|mut case| {
            if case.config.is_empty() {
                case.config = spec.config.clone();
            }
            case
        })
        .collect();
    // Its own thread and runtime: this runs from blocking code, inside or outside a runtime.
    let results = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
                let service = ApprovalService::open_dir(scratch.path(), crate::policy::Policy::Ask);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(conformance::run(host, spec, bytes, &cases, &service))
                    .map_err(|e| e.to_string())
            })
            .join()
            .unwrap_or_else(|_| Err("the cases panicked".to_owned()))
    })
    .map_err(|e| format!("cases {}: {e}", path.display()))?;
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed())
        .map(|r| format!("{:?} expects {}, got {}", r.name, r.expect, r.answer))
        .collect();
    match failed.as_slice() {
        [] => Ok(()),
        _ => Err(format!(
            "cases {}: {} of {} failed: {}",
            path.display(),
            failed.len(),
            results.len(),
            failed.join("; ")
        )),
    }
}

/// Moves a running service to a reloaded deployment's plugins, default policy and `[audit]
/// redact` (its rules: [`reload_rules`]). Blocking: run it off the async workers.
pub fn reload_plugins(
    service: &ApprovalService,
    mounted: &mut Mounted,
    host: &PluginHost,
    deployment: &Deployment,
) -> ReloadReport {
    let report = mounted.apply_checked(host, deployment, &|spec, bytes| {
        passes_cases(host, deployment, spec, bytes)
    });
    service.set_default_policy(deployment.default_policy);
    service.set_redaction(deployment.redact.clone());
    report
}

/// Starts the deployment's `[telemetry]`, when it has one, tracing every question `service`
/// settles from now on. Call [`Telemetry::shutdown`](crate::telemetry::Telemetry::shutdown)
/// before the process ends, or the last traces are lost.
///
/// # Errors
/// [`AssembleError::Telemetry`] when the exporter cannot start.
pub fn telemetry(
    service: &ApprovalService,
    deployment: &Deployment,
) -> Result<Option<Arc<crate::telemetry::Telemetry>>, AssembleError> {
    let Some(config) = &deployment.telemetry else {
        return Ok(None);
    };
    let telemetry =
        crate::telemetry::Telemetry::start(config).map_err(|source| AssembleError::Telemetry {
            file: file_of(deployment),
            source,
        })?;
    service.add_observer(telemetry.clone());
    Ok(Some(telemetry))
}

/// The Claude Code hook's options: the deployment's `[claude-code]`, with the command line's
/// `--when-undecided` over it.
pub fn hook_options(deployment: &Deployment, when_undecided: Option<WhenUndecided>) -> HookOptions {
    let mut options = deployment.claude_code.clone();
    if let Some(w) = when_undecided {
        options.when_undecided = w;
    }
    options
}

/// The ACP agent's options: the deployment's hooks and sandbox mode.
pub fn agent_options(deployment: &Deployment) -> AgentOptions {
    AgentOptions {
        hooks: deployment.hooks.clone(),
        sandbox_mode: deployment.sandbox_mode,
        ..AgentOptions::default()
    }
}

//! `approval-host conform`: a plugin against conformance cases, each in its own audited session.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::ApprovalService;

use crate::{Context, UsageError, wiring};

/// The arguments of `conform`.
#[derive(clap::Args, Debug)]
pub(crate) struct ConformArgs {
    /// The component.
    pub(crate) plugin: PathBuf,
    /// The case file.
    #[arg(long, value_name = "FILE")]
    pub(crate) cases: PathBuf,
    /// The plugin's name, which selects the cases [default: the file's stem].
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// A deployment whose `[[plugin]]` entry of this name gives the plugin its grants: hosts it
    /// may reach, secrets, directories, `wait_ms`, timeout and memory (its config comes from each
    /// case). Without it, the plugin runs with none.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// Runs `conform`.
pub(crate) fn run(ctx: &Context, args: ConformArgs) -> Result<ExitCode> {
    let ConformArgs {
        plugin,
        cases,
        name,
        config,
    } = args;
    let suite =
        approval_host::conformance::Suite::load(&cases).map_err(|e| UsageError(e.to_string()))?;
    let name = name.unwrap_or_else(|| crate::check::plugin_name(&plugin));
    let base = base_spec(config.as_deref(), &name, &plugin)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(conform(ctx, &plugin, &suite, &name, &cases, base))
}

/// The spec a plugin's cases run with: its entry in `config` when given (with `plugin` as its
/// component), else none of the grants.
pub(crate) fn base_spec(
    config: Option<&Path>,
    name: &str,
    plugin: &Path,
) -> Result<approval_host::PluginSpec> {
    let Some(config) = config else {
        return Ok(approval_host::conformance::spec(name, plugin));
    };
    let deployment = approval_host::Deployment::load(config)?;
    let mut spec = deployment
        .plugins
        .into_iter()
        .chain(deployment.shadows)
        .find(|p| p.name == name)
        .ok_or_else(|| {
            UsageError(format!(
                "{}: no [[plugin]] named {name:?}",
                config.display()
            ))
        })?;
    spec.path = plugin.to_owned();
    // A case is one question: a pinned digest is for the deployment's own component file.
    spec.sha256 = None;
    Ok(spec)
}

pub(crate) async fn conform(
    ctx: &crate::Context,
    plugin: &Path,
    suite: &approval_host::conformance::Suite,
    name: &str,
    cases_file: &Path,
    base: approval_host::PluginSpec,
) -> Result<ExitCode> {
    let state_dir = ctx.dir.as_path();
    use approval_host::conformance;
    let cases: Vec<_> = suite.for_plugin(name).collect();
    if cases.is_empty() {
        return Err(UsageError(format!(
            "{}: no case for plugin {name:?} (cases name it with \"gate\", or name no gate)",
            cases_file.display()
        ))
        .into());
    }
    let bytes = std::fs::read(plugin).with_context(|| format!("reading {}", plugin.display()))?;
    let state = tempfile::tempdir().context("creating a state directory")?;
    let service = ApprovalService::open_dir(state.path(), approval_host::Policy::Ask);
    let host = wiring::cached_host(state_dir, ctx.quiet)?;
    let results = conformance::run(&host, &base, &bytes, cases, &service)
        .await
        .map_err(|e| match e {
            conformance::ConformanceError::Plugin(e) => {
                anyhow::Error::new(UsageError(e.to_string()))
            }
            other => anyhow::Error::new(other),
        })?;
    let failed = results.iter().filter(|r| !r.passed()).count();
    for r in &results {
        let said = |reason: &Option<String>| match reason {
            Some(reason) => format!(" ({reason:?})"),
            None => String::new(),
        };
        if r.passed() {
            println!("ok    {}: {}{}", r.name, r.answer, said(&r.expect_reason));
        } else {
            println!(
                "FAIL  {}: answered {}{}, expected {}{}",
                r.name,
                r.answer,
                said(&r.reason),
                r.expect,
                said(&r.expect_reason)
            );
        }
    }
    println!("{name}: {} passed, {failed} failed", results.len() - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

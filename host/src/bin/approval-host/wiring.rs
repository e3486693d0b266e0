//! Putting a deployment together for a command: where its logs live (`--store`, `[store]`, or
//! the state directory), its parts through [`approval_host::assemble`], a plugin host whose
//! compiled cache lives in the state directory, and what a store or assembly error means for the
//! exit code.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use approval_host::assemble::{self, AssembleError};
use approval_host::audit::postgres::DbError;
use approval_host::plugin::QuarantinePolicy;
use approval_host::{ApprovalService, Deployment, Mounted, PluginHost, Store};

use crate::{Context as Ctx, UsageError, progress};

/// The store of a command: `--store`, else the deployment's `[store]`, else the state directory.
pub(crate) fn open(
    ctx: &Ctx,
    deployment: Option<&Deployment>,
    migrate: bool,
) -> Result<Arc<dyn Store>> {
    let state_dir = ctx.dir.as_path();
    approval_host::assemble::open_store(deployment, ctx.store.as_deref(), state_dir, migrate)
        .map_err(db_error)
}

/// A service over the command's store.
pub(crate) fn service(ctx: &Ctx, deployment: &Deployment) -> Result<ApprovalService> {
    Ok(ApprovalService::with_store(
        open(ctx, Some(deployment), false)?,
        deployment.default_policy,
    ))
}

/// Whether the command works on a database rather than the state directory.
pub(crate) fn on_database(ctx: &Ctx, deployment: Option<&Deployment>) -> bool {
    ctx.store.as_deref().is_some() || deployment.is_some_and(|d| d.store.is_some())
}

/// A store the user named wrongly (or one at the wrong schema) is a usage error (exit 2); one
/// that cannot be reached is an error (exit 1).
pub(crate) fn db_error(e: DbError) -> anyhow::Error {
    match e {
        DbError::Database { .. } => anyhow::Error::new(e),
        other => UsageError(format!("store: {other}")).into(),
    }
}

/// A plugin host keeping compiled components under `<state-dir>/cache`: a command run per tool
/// call (`ask`, the Claude Code hook) would otherwise compile a Python or JavaScript plugin, which
/// takes seconds, every time.
pub(crate) fn cached_host(state_dir: &Path, quiet: bool) -> Result<PluginHost> {
    let host = PluginHost::with_cache(
        Arc::new(approval_host::plugin::TracingSink),
        approval_host::plugin::cache::CompiledCache::new(state_dir.join("cache")),
    )?;
    host.observe_compiles(progress::observer(quiet));
    Ok(host)
}

/// What a deployment that cannot be put together means for the exit code: its own fault (a
/// signing key or a plugin that cannot be used, exit 2), or a failure (exit 1).
pub(crate) fn assemble_error(e: AssembleError) -> anyhow::Error {
    match e {
        AssembleError::SigningKey { .. } | AssembleError::Plugin { .. } => {
            UsageError(e.to_string()).into()
        }
        other => other.into(),
    }
}

/// Puts a deployment together on `service` (checkpointer, protections, standing rules when it
/// keeps any) and loads its plugins.
pub(crate) fn mount(
    service: &ApprovalService,
    deployment: &Deployment,
    state_dir: &Path,
    quiet: bool,
) -> Result<Option<Plugins>> {
    let rules = assemble::wants_rules(&*service.store(), deployment);
    assemble::prepare(service, deployment, state_dir, rules).map_err(assemble_error)?;
    if deployment.plugins.is_empty() && deployment.shadows.is_empty() {
        return Ok(None);
    }
    let host = cached_host(state_dir, quiet)?;
    let mounted = assemble::mount(service, &host, deployment, QuarantinePolicy::default())
        .map_err(assemble_error)?;
    let shadows = assemble::shadows(service, &host, deployment, QuarantinePolicy::default())
        .map_err(assemble_error)?;
    Ok(Some(Plugins {
        _host: host,
        _mounted: mounted,
        shadows,
    }))
}

/// [`mount`] without the shadows: what a hook that answers and exits at once loads (its
/// shadows run afterwards, `shadow settle`).
pub(crate) fn mount_deciding(
    service: &ApprovalService,
    deployment: &Deployment,
    state_dir: &Path,
    quiet: bool,
) -> Result<Option<(PluginHost, Mounted)>> {
    let rules = assemble::wants_rules(&*service.store(), deployment);
    assemble::prepare(service, deployment, state_dir, rules).map_err(assemble_error)?;
    if deployment.plugins.is_empty() {
        return Ok(None);
    }
    // One question, then the process exits: a pool sized for its plugins, unless conformance
    // cases run at mount (each case's config loads the plugin again).
    let sink = Arc::new(approval_host::plugin::TracingSink);
    let cache = approval_host::plugin::cache::CompiledCache::new(state_dir.join("cache"));
    let host = if deployment.plugin_cases.is_empty() {
        PluginHost::for_one_question(sink, cache, deployment.plugins.len())?
    } else {
        PluginHost::with_cache(sink, cache)?
    };
    // A hook compiles only when nothing compiled ahead (`init`): said once, not as progress.
    host.observe_compiles(progress::cold_cache_observer(state_dir, quiet));
    let mounted = assemble::mount(service, &host, deployment, QuarantinePolicy::default())
        .map_err(assemble_error)?;
    // The host with them: its engine (and the deadlines' ticker) lives as long as they do.
    Ok(Some((host, mounted)))
}

/// A command's loaded plugins, kept for as long as it asks.
pub(crate) struct Plugins {
    _host: PluginHost,
    _mounted: Mounted,
    shadows: std::sync::Arc<approval_host::plugin::shadow::Shadows>,
}

impl Plugins {
    /// Waits for the shadows still running (a one-shot command, before it exits).
    pub(crate) async fn shadows_done(&self) {
        self.shadows.idle().await;
    }
}

/// The stack each worker thread of a long-running server gets. Deciding a call reads agent
/// input (a shell command's structure) that may nest deeply; the readers cap it, and this keeps
/// a wide margin, since one overflow would take the whole server down.
const SERVER_STACK: usize = 16 << 20;

/// The async runtime of `serve` and of `mcp --listen`: multi-threaded, with [`SERVER_STACK`]
/// stacks.
pub(crate) fn server_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    build(tokio::runtime::Builder::new_multi_thread())
}

/// The async runtime of a hook answering in process: one question, asked on the hook's own
/// thread, with no workers to start and wake (what blocks still runs off it, as in
/// [`run_one_client`]). Its log commits on that thread too ([`commit_in_place`]): the hook has
/// nothing else to do while a sync waits.
///
/// [`commit_in_place`]: approval_host::audit::log::commit_in_place
pub(crate) fn one_question_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    approval_host::audit::log::commit_in_place();
    build(tokio::runtime::Builder::new_current_thread())
}

/// Runs `future` as a server with one client, `mcp` over stdio, does: on one thread (with
/// [`SERVER_STACK`], like a server's workers), so that a call goes from the agent to its question
/// and on to its server with no hand-off between workers (in the gateway bench, 8–9% less CPU
/// per call and 27–40 µs less at p50 than on two workers). What blocks still runs off it: logs
/// open and commit on their own threads, WASI plugins on the plugin threads, and an inline
/// plugin is stopped at its budget as on any worker.
pub(crate) fn run_one_client<F>(future: F) -> anyhow::Result<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    use anyhow::Context as _;
    let runtime = build(tokio::runtime::Builder::new_current_thread())?;
    std::thread::scope(|scope| {
        let ran = std::thread::Builder::new()
            .name("mcp-gateway".to_owned())
            .stack_size(SERVER_STACK)
            .spawn_scoped(scope, || {
                let out = runtime.block_on(future);
                runtime.shutdown_timeout(std::time::Duration::from_millis(500));
                out
            })
            .context("starting the gateway's thread")?;
        ran.join()
            .map_err(|_| anyhow::anyhow!("the gateway's thread panicked"))
    })
}

fn build(mut builder: tokio::runtime::Builder) -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    builder
        .enable_all()
        .thread_stack_size(SERVER_STACK)
        .build()
        .context("starting the async runtime")
}

/// Says on stderr where plugins' callbacks are received (stdout may be an agent's or the
/// protocol's): whoever asked for port 0 learns the port here.
pub(crate) fn announce_callbacks(
    listener: &tokio::net::TcpListener,
    tls: bool,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    eprintln!(
        "callbacks listening on {}://{}",
        if tls { "https" } else { "http" },
        listener.local_addr().context("--callbacks")?
    );
    Ok(())
}

//! Putting a deployment together for a command: its parts through [`approval_host::assemble`],
//! a plugin host whose compiled cache lives in the state directory, and what an assembly error
//! means for the exit code.

use std::path::Path;

use anyhow::Result;
use approval_host::assemble::{self, AssembleError};
use approval_host::plugin::QuarantinePolicy;
use approval_host::{ApprovalService, Deployment, Mounted, PluginHost};

use crate::{UsageError, progress};

/// A plugin host keeping compiled components under `<state-dir>/cache`: a command run per tool
/// call (`ask`, the Claude Code hook) would otherwise compile a Python or JavaScript plugin, which
/// takes seconds, every time.
pub(crate) fn cached_host(state_dir: &Path, quiet: bool) -> Result<PluginHost> {
    let host = PluginHost::with_cache(
        std::sync::Arc::new(approval_host::plugin::TracingSink),
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
) -> Result<Option<(PluginHost, Mounted)>> {
    let rules = assemble::wants_rules(&*service.store(), deployment);
    assemble::prepare(service, deployment, state_dir, rules).map_err(assemble_error)?;
    if deployment.plugins.is_empty() {
        return Ok(None);
    }
    let host = cached_host(state_dir, quiet)?;
    let mounted = assemble::mount(service, &host, deployment, QuarantinePolicy::default())
        .map_err(assemble_error)?;
    Ok(Some((host, mounted)))
}

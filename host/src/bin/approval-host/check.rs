//! `approval-host check`: whether a component fits the plugin world, and what it targets.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::{PluginError, PluginSpec, Role};

use crate::{Context, wiring};

/// The arguments of `check`.
#[derive(clap::Args, Debug)]
pub(crate) struct CheckArgs {
    /// The component file.
    pub(crate) plugin: PathBuf,
}

/// Runs `check`.
pub(crate) fn run(ctx: &Context, args: CheckArgs) -> Result<ExitCode> {
    check(ctx, &args.plugin)
}

/// A plugin's name from its file: the stem, as in `allow-tools.wasm`.
pub(crate) fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().into_owned())
}

pub(crate) fn check(ctx: &crate::Context, path: &Path) -> Result<ExitCode> {
    let state_dir = ctx.dir.as_path();
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let host = wiring::cached_host(state_dir, ctx.quiet)?;
    let spec = PluginSpec::new(plugin_name(path), path, Role::Gate);
    match host.load_bytes(&spec, &bytes) {
        Ok(plugin) => {
            let inspection = host.inspect(&bytes).map_err(anyhow::Error::msg)?;
            println!(
                "{}: fits approval:plugin/answerer@{}",
                path.display(),
                plugin.api_version()
            );
            println!("  exports: {}", inspection.exports.join(", "));
            println!("  imports: {}", inspection.imports.join(", "));
            println!("  sha256:  {}", plugin.digest());
            if let Some((version, adds)) = approval_host::plugin::api_changes(plugin.api_version())
            {
                let newest = approval_host::plugin::NEWEST_API_VERSION;
                if version == newest {
                    println!("  api:     {version}, the newest this host serves; over 0.1 it:");
                    for change in adds {
                        println!("           - {change}");
                    }
                } else {
                    println!(
                        "  api:     {version}; this host also serves {newest}, which adds what `approval-host new` skeletons use (see docs/plugin-authors.md, \"What changed in 0.2\")"
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(PluginError::Component { reason, .. }) => {
            println!("{}: {reason}", path.display());
            Ok(ExitCode::from(1))
        }
        Err(other) => Err(other.into()),
    }
}

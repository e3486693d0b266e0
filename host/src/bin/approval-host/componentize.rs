//! `approval-host componentize`: a core WebAssembly module (C, wasi-libc) becomes a plugin
//! component.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::Context;

/// The arguments of `componentize`.
#[derive(clap::Args, Debug)]
pub(crate) struct ComponentizeArgs {
    /// The core module.
    pub(crate) module: PathBuf,
    /// Where to write the component.
    #[arg(short, long, value_name = "FILE")]
    pub(crate) output: PathBuf,
}

/// Runs `componentize`.
pub(crate) fn run(ctx: &Context, args: ComponentizeArgs) -> Result<ExitCode> {
    componentize(ctx, &args.module, &args.output)
}

fn componentize(ctx: &crate::Context, module: &Path, output: &Path) -> Result<ExitCode> {
    let bytes = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let component = match approval_host::plugin::componentize::componentize(&bytes) {
        Ok(component) => component,
        Err(e) => {
            println!("{}: {e}", module.display());
            return Ok(ExitCode::from(1));
        }
    };
    // Write whole or not at all: a partial component must never be loadable.
    let temp = output.with_extension("wasm.partial");
    std::fs::write(&temp, &component).with_context(|| format!("writing {}", temp.display()))?;
    std::fs::rename(&temp, output).with_context(|| format!("writing {}", output.display()))?;
    crate::check::check(ctx, output)
}

//! `approval-host test [DIR]`: a plugin made by `new`, from source to a loaded, tested gate in one
//! command. Builds it with its own `build.sh`, checks the component against the plugin world,
//! and runs its conformance cases through the real seam; prints one summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::UsageError;

/// The files of a plugin directory `test` reads.
pub const DEPLOYMENT: &str = "deployment.toml";
/// Its conformance cases.
pub const CASES: &str = "cases.json";
/// Its build script.
pub const BUILD: &str = "build.sh";

/// Runs `test` on `dir`.
pub fn run(ctx: &crate::Context, dir: &Path) -> Result<ExitCode> {
    let deployment_file = dir.join(DEPLOYMENT);
    if !deployment_file.exists() || !dir.join(BUILD).exists() {
        return Err(UsageError(format!(
            "{}: not a plugin made by `approval-host new` (no {DEPLOYMENT} or {BUILD})",
            dir.display()
        ))
        .into());
    }
    // Read before the build, so not through `Deployment::load`, which wants the component to
    // exist already.
    let (name, wasm) = plugin_of(&deployment_file)?;

    // 1. Build, with this binary on PATH (a C build componentizes with it).
    let started = Instant::now();
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let path = std::env::join_paths(
        std::iter::once(exe_dir).chain(
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
    )
    .context("building PATH")?;
    eprintln!("test: building {name} ({BUILD})…");
    let built = std::process::Command::new("bash")
        .arg(BUILD)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .with_context(|| format!("running {}", dir.join(BUILD).display()))?;
    if !built.status.success() {
        let err = String::from_utf8_lossy(&built.stderr);
        let tail: Vec<&str> = err.lines().rev().take(20).collect();
        for line in tail.into_iter().rev() {
            eprintln!("  {line}");
        }
        println!(
            "FAIL  build: {} exited with {}",
            dir.join(BUILD).display(),
            built.status
        );
        return Ok(ExitCode::from(1));
    }
    let size = std::fs::metadata(&wasm)
        .with_context(|| format!("the build made no {}", wasm.display()))?
        .len();
    println!(
        "ok    build: {} ({:.2} MB) in {:.1} s",
        wasm.display(),
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    // 2. Check it against the plugin world.
    let checked = crate::check::check(ctx, &wasm)?;
    if checked != ExitCode::SUCCESS {
        println!(
            "FAIL  check: {} does not fit the plugin world",
            wasm.display()
        );
        return Ok(checked);
    }

    // 3. Its conformance cases.
    let cases_file = dir.join(CASES);
    let suite = approval_host::conformance::Suite::load(&cases_file)
        .map_err(|e| UsageError(e.to_string()))?;
    // The deployment's entry gives the plugin its grants (hosts, secrets, wait) for its cases.
    let base = crate::conform::base_spec(Some(&deployment_file), &name, &wasm)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let conformed = runtime.block_on(crate::conform::conform(
        ctx,
        &wasm,
        &suite,
        &name,
        &cases_file,
        base,
    ))?;
    if conformed != ExitCode::SUCCESS {
        println!("FAIL  conformance: see the cases above");
        return Ok(conformed);
    }
    println!(
        "test: {name} builds, fits, and passes its cases; try it with approval-host ask --config {}",
        deployment_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The first plugin's name and component path (relative to the deployment file) in `file`.
fn plugin_of(file: &Path) -> Result<(String, PathBuf)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
    let first = doc
        .get("plugin")
        .and_then(toml::Value::as_array)
        .and_then(|p| p.first())
        .and_then(toml::Value::as_table)
        .ok_or_else(|| UsageError(format!("{}: names no [[plugin]]", file.display())))?;
    let field = |key: &str| {
        first
            .get(key)
            .and_then(toml::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| UsageError(format!("{}: [[plugin]] #1 has no {key}", file.display())))
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    Ok((field("name")?, dir.join(field("path")?)))
}

/// The arguments of `test`.
#[derive(clap::Args, Debug)]
pub(crate) struct TestArgs {
    /// The plugin's directory.
    #[arg(default_value = ".")]
    pub(crate) dir: PathBuf,
}

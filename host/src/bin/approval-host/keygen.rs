//! `approval-host keygen`: the Ed25519 key that signs audit checkpoints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::UsageError;

/// The arguments of `keygen`.
#[derive(clap::Args, Debug)]
pub(crate) struct KeygenArgs {
    /// Where to write the signing key.
    pub(crate) file: PathBuf,
    /// (No state directory: this command neither reads nor writes one.)
    #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
    pub(crate) no_state_dir: Option<PathBuf>,
    /// (No store: this command opens no log.)
    #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
    pub(crate) no_store: Option<String>,
}

/// Runs `keygen`.
pub(crate) fn run(args: KeygenArgs) -> Result<ExitCode> {
    let KeygenArgs { file, .. } = args;
    let public =
        approval_host::audit::checkpoint::keygen(&file).map_err(|e| UsageError(e.to_string()))?;
    println!(
        "signing key: {} (keep it secret, outside the state directory)",
        file.display()
    );
    println!(
        "public key:  {} (give it to whoever runs `verify`)",
        public.display()
    );
    Ok(ExitCode::SUCCESS)
}

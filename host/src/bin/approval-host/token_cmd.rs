//! `approval-host token new`: a token for `serve` clients, printed once, its hashed entry appended
//! to the deployment.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::Deployment;
use clap::Subcommand;

use crate::UsageError;

#[derive(Subcommand, Debug)]
pub(crate) enum TokenCommand {
    /// Make a token: print it once, and its `[[token]]` entry (only its SHA-256 is kept).
    ///
    /// With --config the entry is appended to that deployment file (a running `serve` picks it
    /// up on reload). The client presents the token in `initialize` (`"token": "aht_…"`; the
    /// Claude Code hook reads APPROVAL_HOST_TOKEN).
    ///
    /// Example: `approval-host token new --name ci --role agent --sessions ci- --config deploy.toml`
    New {
        /// Its name in logs and in the deployment file.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// What it may do (repeatable): agent, answerer, admin, metrics.
        #[arg(long = "role", value_name = "ROLE", required = true)]
        roles: Vec<String>,
        /// Limit it to sessions whose id starts with PREFIX (repeatable). A prefix ends with
        /// `-`, `_` or `.`, so it grants whole segments: `ci-` grants ci-7, never cider-prod.
        #[arg(long = "sessions", value_name = "PREFIX")]
        sessions: Vec<String>,
        /// Limit it to exactly the session ID (repeatable).
        #[arg(long = "session", value_name = "ID")]
        session: Vec<String>,
        /// Append the entry to this deployment file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// (No state directory: this command neither reads nor writes one.)
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
        no_state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
}

/// Runs a `token` command.
pub(crate) fn run(command: TokenCommand) -> Result<ExitCode> {
    let TokenCommand::New {
        name,
        roles,
        sessions,
        session,
        config,
        ..
    } = command;
    for prefix in &sessions {
        if !approval_host::config::token::is_prefix(prefix) {
            return Err(UsageError(format!(
                "--sessions {prefix:?}: a prefix must end with \"-\", \"_\" or \".\" so that it grants \
                 whole segments only ({prefix:?} would grant {:?} too); write --sessions {:?}, or \
                 --session {prefix:?} for exactly that session",
                format!("{prefix}x"),
                format!("{prefix}-")
            ))
            .into());
        }
    }
    for id in &session {
        if approval_host::config::token::is_prefix(id) {
            return Err(UsageError(format!(
                "--session {id:?}: a session id does not end with \"-\", \"_\" or \".\" (that is a \
                 prefix: --sessions {id:?})"
            ))
            .into());
        }
    }
    let all: Vec<String> = sessions.into_iter().chain(session).collect();
    token_new(&name, &roles, &all, config.as_deref())
}

/// `token new`: a fresh token, printed once, and its `[[token]]` entry.
fn token_new(
    name: &str,
    roles: &[String],
    sessions: &[String],
    config: Option<&Path>,
) -> Result<ExitCode> {
    use approval_host::config::token::TokenRole;
    use approval_host::serve::auth;
    for role in roles {
        if TokenRole::parse(role).is_none() {
            return Err(UsageError(format!(
                "--role {role:?}: must be agent, answerer, admin or metrics"
            ))
            .into());
        }
    }
    let token = auth::new_token().context("reading random bytes")?;
    let quoted = |list: &[String]| {
        list.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut entry = format!(
        "\n[[token]]\nname = {name:?}\nsha256 = \"{}\"\nroles = [{}]\n",
        auth::token_hash(&token),
        quoted(roles)
    );
    if !sessions.is_empty() {
        entry.push_str(&format!("sessions = [{}]\n", quoted(sessions)));
    }
    if let Some(path) = config {
        // The file must still load with the entry (a duplicate name, a bad prefix): check a copy
        // first, then append; the original is never left half-written.
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let probe = tempfile::Builder::new()
            .suffix(".toml")
            .tempfile_in(dir)
            .with_context(|| format!("writing beside {}", path.display()))?;
        std::fs::write(probe.path(), format!("{text}{entry}"))?;
        std::fs::set_permissions(probe.path(), std::fs::metadata(path)?.permissions())?;
        Deployment::load(probe.path()).map_err(|e| {
            UsageError(e.to_string().replace(
                &probe.path().display().to_string(),
                &path.display().to_string(),
            ))
        })?;
        probe
            .persist(path)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("token {name:?} added to {}", path.display());
    } else {
        print!("add to the deployment file:\n{entry}");
    }
    println!("\ntoken (shown once; the deployment keeps only its SHA-256):\n{token}");
    Ok(ExitCode::SUCCESS)
}

//! Where a project's state lives when it must not live in the project: the user's state
//! directory (`$XDG_STATE_HOME`, else `~/.local/state`), under `approval-host/projects/`, in a
//! directory named after the project and keyed by its real path (`myapp-1f0c…`), so two clones
//! never share logs and the agent working in the project cannot write them through the project.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::UsageError;

/// The user's state directory for approval-host.
pub fn user_state_home() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty() && Path::new(p).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|p| !p.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("state"))
        })
        .ok_or_else(|| {
            UsageError("a project's state directory needs $XDG_STATE_HOME or $HOME".to_owned())
        })?;
    Ok(base.join("approval-host"))
}

/// The state directory of the project at `project`.
pub fn for_project(project: &Path) -> Result<PathBuf> {
    let real = std::fs::canonicalize(project)
        .with_context(|| format!("--project-state {}", project.display()))?;
    let name: String = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".to_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let digest = Sha256::digest(real.as_os_str().as_encoded_bytes());
    let key: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(user_state_home()?
        .join("projects")
        .join(format!("{name}-{key}")))
}

/// The deployment files `init` writes in a project's (or the user's) `.approval-host/`, by CLI.
const SETUP_FILES: [&str; 4] = [
    "claude-code.toml",
    "codex.toml",
    "gemini.toml",
    "copilot.toml",
];

/// A project (or the user's home) that `init` set up: where its hooks keep state and the
/// deployments they read.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The directory holding `.approval-host/`.
    pub root: PathBuf,
    /// The state directory its hooks use: the user's state directory for a project, or
    /// `~/.approval-host` for `init --user`.
    pub state: PathBuf,
    /// The deployment files found, one per CLI set up there.
    pub deployments: Vec<PathBuf>,
}

impl Setup {
    /// The one deployment the hooks read, or an error naming the choices.
    ///
    /// # Errors
    /// Several CLIs were set up here: the person names one with `--config`.
    pub fn deployment(&self) -> Result<&Path> {
        match self.deployments.as_slice() {
            [one] => Ok(one),
            several => Err(UsageError(format!(
                "{} is set up for several agent CLIs; say which deployment with --config: {}",
                self.root.display(),
                several
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into()),
        }
    }
}

/// The set-up `init` made at `start` or the nearest directory above it, else the user's own, if
/// any. A project's state is the user's state directory for it (as its hooks keep it); the home
/// directory's (`init --user`) keeps its state in `~/.approval-host`.
pub fn find_setup(start: &Path) -> Result<Option<Setup>> {
    let start = std::fs::canonicalize(start).with_context(|| start.display().to_string())?;
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok());
    // The nearest project above the working directory, else the user's own set-up (`init
    // --user`), whose hooks answer in every project. A deployment counts only when the CLI's
    // hook settings beside it (protected from every agent) run it: a `.toml` the agent planted
    // in the project is no set-up.
    for dir in start.ancestors().chain(home.as_deref()) {
        let config = dir.join(".approval-host");
        let deployments: Vec<PathBuf> = SETUP_FILES
            .iter()
            .map(|f| config.join(f))
            .filter(|p| p.is_file() && hooked(dir, p))
            .collect();
        if deployments.is_empty() {
            continue;
        }
        let state = if home.as_deref() == Some(dir) {
            config
        } else {
            for_project(dir)?
        };
        return Ok(Some(Setup {
            root: dir.to_owned(),
            state,
            deployments,
        }));
    }
    Ok(None)
}

/// Whether a hook in the settings of the CLI a deployment `init` wrote under `dir` is for, runs
/// that deployment (names it after `--config`).
fn hooked(dir: &Path, deployment: &Path) -> bool {
    let Some(harness) = crate::harness::Harness::ALL
        .into_iter()
        .find(|h| deployment.file_name() == Some(std::ffi::OsStr::new(&h.deployment_file())))
    else {
        return false;
    };
    // The project's hook file, and the user's (where `init --user` writes it).
    let settings = [false, true].map(|user| harness.settings(dir, user).ok());
    // As the hook command spells the deployment: absolute, or under `$CLAUDE_PROJECT_DIR`.
    let spelled = [
        deployment.display().to_string(),
        format!(
            "$CLAUDE_PROJECT_DIR/.approval-host/{}",
            harness.deployment_file()
        ),
    ];
    // Not an MCP configuration that runs the gateway with it: without the hooks nothing keeps
    // the agent from writing that file, so it could plant a set-up a person's `rules add` reads.
    settings.iter().flatten().any(|file| {
        crate::doctor::hook_commands(file).iter().any(|command| {
            crate::doctor::ours(harness, command)
                && shlex::split(command)
                    .unwrap_or_default()
                    .windows(2)
                    .any(|w| w[0] == "--config" && spelled.contains(&w[1]))
        })
    })
}

/// Whether the hooks `init` installs for `harness` under `dir` (or the user's) run
/// `deployment`.
pub(crate) fn hooks_run(dir: &Path, deployment: &Path) -> bool {
    hooked(dir, deployment)
}

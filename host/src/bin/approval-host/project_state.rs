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

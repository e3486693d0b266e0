//! Sandbox modes for commands, enforced on the child process with Landlock.
//!
//! `read-only` reads everywhere and writes nowhere (but `/dev/null`); `workspace-write` also
//! writes under the workspace and the sandbox's temp directory; `danger-full-access` is not
//! confined. The ruleset is built in the parent and applied in the child between `fork` and
//! `exec`, with Landlock a hard requirement: where the kernel lacks it, a confining mode refuses
//! to run rather than run unconfined.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, make_bitflags, path_beneath_rules,
};

/// How far a command may reach, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SandboxMode {
    /// Reads anywhere, writes nowhere.
    ReadOnly,
    /// Also writes under the workspace and the temp directory.
    WorkspaceWrite,
    /// Not confined.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// `read-only`, `workspace-write` or `danger-full-access`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Whether the mode confines the child.
    pub const fn confines(self) -> bool {
        !matches!(self, SandboxMode::DangerFullAccess)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "sandbox mode must be one of \"read-only\", \"workspace-write\" or \"danger-full-access\", not {s:?}"
                )
            })
    }
}

/// A confining mode that cannot be enforced here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sandbox mode \"{mode}\" needs Landlock, which is not available here ({why}); refusing to run unconfined"
)]
pub struct Unavailable {
    /// The mode.
    pub mode: SandboxMode,
    /// Why.
    pub why: String,
}

/// The ABI whose rights the rulesets handle (Linux 6.10+; the kernel may offer more).
const ABI_USED: ABI = ABI::V5;

/// Builds the ruleset for `mode`, or `None` when the mode does not confine.
pub fn ruleset(
    mode: SandboxMode,
    workspace: &Path,
    temp: &Path,
) -> Result<Option<RulesetCreated>, Unavailable> {
    if !mode.confines() {
        return Ok(None);
    }
    let fail = |e: &dyn fmt::Display| Unavailable {
        mode,
        why: e.to_string(),
    };
    let file_rights = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate});
    let mut ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI_USED))
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(ABI_USED)))
        .map_err(|e| fail(&e))?
        .add_rules(path_beneath_rules(["/dev/null"], file_rights))
        .map_err(|e| fail(&e))?;
    if mode == SandboxMode::WorkspaceWrite {
        ruleset = ruleset
            .add_rules(path_beneath_rules(
                [workspace, temp],
                AccessFs::from_all(ABI_USED),
            ))
            .map_err(|e| fail(&e))?;
    }
    Ok(Some(ruleset))
}

/// Confines `command`'s child to `mode` when it starts.
pub fn confine(
    command: &mut tokio::process::Command,
    mode: SandboxMode,
    workspace: &Path,
    temp: &Path,
) -> Result<(), Unavailable> {
    let Some(ruleset) = ruleset(mode, workspace, temp)? else {
        return Ok(());
    };
    let cell = Mutex::new(Some(ruleset));
    // SAFETY: the closure runs in the child between fork and exec. It only takes the ruleset
    // built in the parent (an uncontended lock: no other thread exists in the child) and makes
    // the prctl and landlock_restrict_self system calls; it allocates only to report a failure,
    // after which the child does not exec.
    unsafe {
        command.pre_exec(move || {
            let taken = cell.lock().ok().and_then(|mut r| r.take());
            if let Some(ruleset) = taken {
                match ruleset.restrict_self() {
                    Ok(status) if status.ruleset == RulesetStatus::FullyEnforced => {}
                    Ok(_) => return Err(std::io::Error::other("Landlock was not fully enforced")),
                    Err(e) => return Err(std::io::Error::other(e.to_string())),
                }
            }
            Ok(())
        });
    }
    Ok(())
}

/// Where a sandboxed command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The working directory, writable under `workspace-write`.
    pub root: PathBuf,
    /// The temp directory (`TMPDIR`), writable under `workspace-write`.
    pub temp: PathBuf,
}

impl From<crate::audit::event::SandboxModeName> for SandboxMode {
    fn from(m: crate::audit::event::SandboxModeName) -> Self {
        use crate::audit::event::SandboxModeName as N;
        match m {
            N::ReadOnly => SandboxMode::ReadOnly,
            N::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            N::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }
}

impl From<SandboxMode> for crate::audit::event::SandboxModeName {
    fn from(m: SandboxMode) -> Self {
        use crate::audit::event::SandboxModeName as N;
        match m {
            SandboxMode::ReadOnly => N::ReadOnly,
            SandboxMode::WorkspaceWrite => N::WorkspaceWrite,
            SandboxMode::DangerFullAccess => N::DangerFullAccess,
        }
    }
}

/// The agent's session mode: its last logged `sandbox/mode`, else `default`.
pub fn session_mode(agent: &crate::agent::Agent, default: SandboxMode) -> SandboxMode {
    agent
        .session()
        .log
        .with_fold(|f| f.sandbox_mode())
        .map_or(default, SandboxMode::from)
}

/// Logs a switch of the agent's session to `mode`.
pub async fn set_session_mode(
    agent: &crate::agent::Agent,
    mode: SandboxMode,
    source: Option<&str>,
) -> Result<(), crate::audit::error::LogError> {
    agent
        .session()
        .log
        .append(crate::audit::event::Event::Sandbox(
            crate::audit::event::SandboxSwitch {
                mode: mode.into(),
                source: source.map(str::to_owned),
            },
        ))
        .await
        .map(|_| ())
}

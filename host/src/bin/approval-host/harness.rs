//! The agent CLIs the host sets up and checks (`init`, `doctor`): their names, and where each
//! reads its hooks.

use std::path::{Path, PathBuf};

use anyhow::Result;
use approval_host::cli_hooks::Cli;

/// The agent CLIs `init` sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    /// Claude Code: `.claude/settings.json`, a `PreToolUse` hook.
    ClaudeCode,
    /// Another CLI ([`approval_host::cli_hooks`]).
    Other(Cli),
}

impl Harness {
    /// Every agent CLI `init` sets up.
    pub(crate) const ALL: [Harness; 4] = [
        Harness::ClaudeCode,
        Harness::Other(Cli::Codex),
        Harness::Other(Cli::Gemini),
        Harness::Other(Cli::Copilot),
    ];

    /// The name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code",
            Harness::Other(cli) => cli.name(),
        }
    }

    /// The CLI as people name it.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "Claude Code",
            Harness::Other(cli) => cli.title(),
        }
    }

    /// The deployment file's name in the approval-host directory.
    pub(crate) fn deployment_file(self) -> String {
        format!("{}.toml", self.name())
    }

    /// The CLI's hook file, for a project directory or the user's home.
    pub(crate) fn settings(self, base: &Path, user: bool) -> Result<PathBuf> {
        Ok(match self {
            Harness::ClaudeCode => base.join(".claude").join("settings.json"),
            Harness::Other(Cli::Codex) => base.join(".codex").join("hooks.json"),
            Harness::Other(Cli::Gemini) => base.join(".gemini").join("settings.json"),
            // Copilot CLI runs the user's hook files even in a folder nobody trusted.
            Harness::Other(Cli::Copilot) if user => base
                .join(".copilot")
                .join("hooks")
                .join("approval-host.json"),
            Harness::Other(Cli::Copilot) => base
                .join(".github")
                .join("hooks")
                .join("approval-host.json"),
        })
    }
}

//! Built-in reject rules: the files that hold the host's own policy, which no agent may change.
//!
//! The agent a host guards can write files, so the files that decide what it may do are the
//! first thing it would change: the state directory (logs, rules logs, the compiled cache), the
//! deployment file and the plugin files it names, the audit signing key, every agent CLI's
//! settings and hook files ([`AGENT_SETTINGS`]: where the hook itself is declared) and the host's
//! own binary. A
//! [`Guard`] runs ahead of everything in the waterfall, ahead of standing rules and plugins, and
//! rejects a call that would write one of them: a path argument of a tool that is not a plain
//! reader, a shell redirection, or an operand of a known writer (`tee`, `cp`, `mv`, `sed -i`,
//! `truncate`, …) through any wrapper or `bash -c`. A secret (the signing key) may not even be
//! read. A command that cannot be read is rejected when its text names a protected path. These
//! rules are listed by `rules list` as built-in and cannot be revoked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::call::PATH_FIELDS;
use super::command::{self, Command};
use super::paths;
use crate::answer::{Answer, RuleRef, RuleScope};
use crate::outcome::Decision;
use crate::waterfall::{ImmediateAnswer, Listener, ListenerFuture, Question};

/// The waterfall name of the guard.
pub const GATE_NAME: &str = "protected";

/// Who made a built-in rule.
pub const CREATOR: &str = "built-in";

/// The prefix of every built-in rule's id.
pub const ID_PREFIX: &str = "builtin-";

/// Tools that only read the files their paths name.
const READERS: &[&str] = &[
    "Read",
    "read",
    "Grep",
    "grep",
    "Glob",
    "glob",
    "LS",
    "ls",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
];

/// Arguments besides [`PATH_FIELDS`] that tools use for the files they write or move.
const MORE_PATH_FIELDS: &[&str] = &[
    "source",
    "destination",
    "target",
    "dest",
    "from",
    "to",
    "directory",
    "dir",
    "filename",
    "file",
    "new_path",
    "old_path",
];

/// The argument listing every file of a call on several.
const LIST_FIELD: &str = "paths";

/// Where an agent CLI declares its hooks, in any directory (a project's or the user's home): a
/// file named one of `files` (`*.json`: any JSON file) directly inside the directories `dir`.
#[derive(Debug, PartialEq, Eq)]
pub struct Settings {
    /// The rule's id without the prefix.
    pub id: &'static str,
    /// What it is, as the reason names it.
    pub what: &'static str,
    /// The directory names, outermost first (`[".github", "hooks"]`).
    pub dir: &'static [&'static str],
    /// The file names.
    pub files: &'static [&'static str],
}

/// Every agent CLI's settings and hook files this host answers for.
pub const AGENT_SETTINGS: &[Settings] = &[
    Settings {
        id: "claude-settings",
        what: "Claude Code's settings (where the hook is declared)",
        dir: &[".claude"],
        files: &["settings.json", "settings.local.json"],
    },
    Settings {
        id: "codex-config",
        what: "Codex's config and hooks (where the hook is declared)",
        dir: &[".codex"],
        files: &["config.toml", "hooks.json", "requirements.toml"],
    },
    Settings {
        id: "gemini-settings",
        what: "Gemini CLI's settings (where the hook is declared)",
        dir: &[".gemini"],
        files: &["settings.json"],
    },
    Settings {
        id: "copilot-hooks",
        what: "Copilot CLI's hook files (where the hook is declared)",
        dir: &[".github", "hooks"],
        files: &["*.json"],
    },
    Settings {
        id: "copilot-user-hooks",
        what: "Copilot CLI's user hook files (where the hook is declared)",
        dir: &[".copilot", "hooks"],
        files: &["*.json"],
    },
    // Where a person records that they trust a folder, and so its hooks: an agent that edits one
    // could make its CLI load, or skip, a project's hooks.
    Settings {
        id: "gemini-trust",
        what: "Gemini CLI's trusted folders (where a person trusts a project's hooks)",
        dir: &[".gemini"],
        files: &["trustedFolders.json"],
    },
    Settings {
        id: "copilot-config",
        what: "Copilot CLI's config (its trusted folders, and where hooks are declared)",
        dir: &[".copilot"],
        files: &["config.json", "mcp-config.json"],
    },
    // Where agents are told which MCP servers to start: an agent that rewrites one can drop
    // the `approval-host mcp` in front of a server and call it directly.
    Settings {
        id: "mcp-config",
        what: "an agent's MCP server configuration (where the MCP gateway is put in front of a server)",
        dir: &[],
        files: &[".mcp.json", ".claude.json"],
    },
    Settings {
        id: "vscode-mcp",
        what: "VS Code's MCP server configuration (where the MCP gateway is put in front of a server)",
        dir: &[".vscode"],
        files: &["mcp.json"],
    },
    Settings {
        id: "cursor-mcp",
        what: "Cursor's MCP server configuration (where the MCP gateway is put in front of a server)",
        dir: &[".cursor"],
        files: &["mcp.json"],
    },
];

impl Settings {
    /// The glob lists show.
    fn text(&self) -> String {
        let dir: String = self.dir.iter().map(|d| format!("{d}/")).collect();
        match self.files {
            [one] => format!("**/{dir}{one}"),
            many => format!("**/{dir}{{{}}}", many.join(",")),
        }
    }

    fn holds(&self, path: &Path) -> bool {
        let mut back = path.components().rev();
        let Some(file) = back.next().and_then(|c| c.as_os_str().to_str()) else {
            return false;
        };
        let named = self.files.iter().any(|f| match f.strip_prefix('*') {
            Some(suffix) => file.len() > suffix.len() && file.ends_with(suffix),
            None => *f == file,
        });
        named
            && self
                .dir
                .iter()
                .rev()
                .all(|d| back.next().and_then(|c| c.as_os_str().to_str()) == Some(*d))
    }
}

/// What a built-in rule protects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A directory and everything in it.
    Tree(PathBuf),
    /// One file.
    File(PathBuf),
    /// An agent CLI's settings or hook files, in any directory.
    Settings(&'static Settings),
}

/// One protected place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Area {
    /// The rule's id (`builtin-state-dir`, …).
    pub id: String,
    /// What it is, as the reason names it (`the state directory`).
    pub what: String,
    /// Where.
    pub place: Place,
    /// Nothing may read it either.
    pub secret: bool,
}

impl Area {
    /// A directory nothing may write.
    pub fn tree(id: &str, what: impl Into<String>, path: &Path) -> Area {
        Area {
            id: format!("{ID_PREFIX}{id}"),
            what: what.into(),
            place: Place::Tree(paths::real_dir(&absolute(path))),
            secret: false,
        }
    }

    /// A file nothing may write.
    pub fn file(id: &str, what: impl Into<String>, path: &Path) -> Area {
        Area {
            id: format!("{ID_PREFIX}{id}"),
            what: what.into(),
            place: Place::File(paths::real_dir(&absolute(path))),
            secret: false,
        }
    }

    /// A file nothing may read or write.
    pub fn secret(id: &str, what: impl Into<String>, path: &Path) -> Area {
        Area {
            secret: true,
            ..Area::file(id, what, path)
        }
    }

    /// An agent CLI's settings files.
    pub fn settings(settings: &'static Settings) -> Area {
        Area {
            id: format!("{ID_PREFIX}{}", settings.id),
            what: settings.what.to_owned(),
            place: Place::Settings(settings),
            secret: false,
        }
    }

    /// The rule's text as lists show it.
    pub fn text(&self) -> String {
        let verb = if self.secret {
            "read or write"
        } else {
            "write"
        };
        match &self.place {
            Place::Tree(p) => format!("{verb} //{}/**", trim_root(p)),
            Place::File(p) => format!("{verb} //{}", trim_root(p)),
            Place::Settings(s) => format!("{verb} {}", s.text()),
        }
    }

    /// The reason a rejection gives the model.
    pub fn reason(&self) -> String {
        let access = if self.secret {
            "read or change"
        } else {
            "change"
        };
        match &self.place {
            Place::Tree(p) | Place::File(p) => format!(
                "{} ({}) is protected: no agent may {access} it",
                self.what,
                p.display()
            ),
            Place::Settings(_) => {
                format!("{} is protected: no agent may {access} it", self.what)
            }
        }
    }

    /// The reason when a command this host cannot read names the area: it might change it.
    pub fn named_reason(&self) -> String {
        let access = if self.secret {
            "read or change"
        } else {
            "change"
        };
        match &self.place {
            Place::Tree(p) | Place::File(p) => format!(
                "{} ({}) is protected, and this command names it in a way this host cannot read: no agent may {access} it",
                self.what,
                p.display()
            ),
            Place::Settings(_) => format!(
                "{} is protected, and this command names it in a way this host cannot read: no agent may {access} it",
                self.what
            ),
        }
    }

    /// Whether the real path `path` is in this area, or holds it (removing or moving a parent
    /// directory takes the area with it) when `parents` says so.
    fn holds(&self, path: &Path, parents: bool) -> bool {
        match &self.place {
            Place::Tree(p) => path.starts_with(p) || (parents && p.starts_with(path)),
            Place::File(p) => path == p || (parents && p.starts_with(path)),
            Place::Settings(s) => s.holds(path),
        }
    }

    /// Texts that name this area inside a command this host cannot read.
    fn hints(&self, cwd: Option<&Path>) -> Vec<String> {
        let path = match &self.place {
            Place::Tree(p) | Place::File(p) => p,
            Place::Settings(s) => {
                let dir = s.dir.join("/");
                return s
                    .files
                    .iter()
                    .map(|f| match f.strip_prefix('*') {
                        Some(_) => format!("{dir}/"),
                        None => format!("{dir}/{f}"),
                    })
                    .collect();
            }
        };
        let mut hints = vec![path.display().to_string()];
        for base in [cwd.map(Path::to_owned), paths::home()]
            .into_iter()
            .flatten()
        {
            let base = paths::real_dir(&base);
            if let Ok(rel) = path.strip_prefix(&base)
                && !rel.as_os_str().is_empty()
            {
                hints.push(rel.display().to_string());
            }
        }
        if !matches!(self.place, Place::Tree(_))
            && let Some(name) = path.file_name()
        {
            hints.push(name.to_string_lossy().into_owned());
        }
        hints
    }
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        paths::normalise(path)
    } else {
        std::env::current_dir()
            .map(|d| paths::normalise(&d.join(path)))
            .unwrap_or_else(|_| path.to_owned())
    }
}

fn trim_root(path: &Path) -> String {
    path.display()
        .to_string()
        .trim_start_matches('/')
        .to_owned()
}

/// The protected places of one host.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    areas: Vec<Area>,
}

/// Why a call is rejected: the area it touches, and whether only its text names it.
#[derive(Debug, Clone, Copy)]
pub struct Finding<'a> {
    /// The protected place.
    pub area: &'a Area,
    /// The call could not be read; its text names the place.
    pub by_name: bool,
}

impl Finding<'_> {
    /// The reason the model reads.
    pub fn reason(&self) -> String {
        if self.by_name {
            self.area.named_reason()
        } else {
            self.area.reason()
        }
    }
}

impl Protected {
    /// Protects `areas` and every agent CLI's settings files.
    pub fn new(areas: impl IntoIterator<Item = Area>) -> Protected {
        let mut all: Vec<Area> = Vec::new();
        for area in areas
            .into_iter()
            .chain(AGENT_SETTINGS.iter().map(Area::settings))
        {
            if !all.iter().any(|a| a.place == area.place) {
                all.push(area);
            }
        }
        Protected { areas: all }
    }

    /// The areas, in order.
    pub fn areas(&self) -> &[Area] {
        &self.areas
    }

    /// The built-in rules as lists show them.
    pub fn views(&self) -> Vec<super::view::RuleView> {
        self.areas
            .iter()
            .map(|area| super::view::RuleView {
                id: area.id.clone(),
                rule: area.text(),
                effect: crate::answer::Effect::Reject,
                scope: RuleScope::Project,
                session: None,
                expires_at: None,
                creator: CREATOR.to_owned(),
                reason: Some(area.reason()),
                uses: 0,
                last_use: None,
                built_in: true,
            })
            .collect()
    }

    /// The area a call would touch, if any.
    pub fn check(
        &self,
        tool: &str,
        arguments: Option<&Value>,
        cwd: Option<&str>,
    ) -> Option<Finding<'_>> {
        let cwd = cwd.map(Path::new).filter(|c| c.is_absolute());
        let arguments = arguments?;
        if let Some(text) = arguments.get("command").and_then(Value::as_str)
            && let Some(area) = self.check_command(text, cwd)
        {
            return Some(area);
        }
        let reader = READERS.contains(&tool);
        let single = PATH_FIELDS
            .iter()
            .chain(MORE_PATH_FIELDS)
            .filter_map(|field| arguments.get(*field).and_then(Value::as_str));
        // A call on several files (a patch of many) lists them all in `paths`.
        let listed = arguments
            .get(LIST_FIELD)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        for path in single.chain(listed) {
            if let Some(area) = self.touched(path, cwd, !reader, false) {
                return Some(Finding {
                    area,
                    by_name: false,
                });
            }
        }
        None
    }

    /// The area `path` touches: a secret one whatever the access, any one for a write.
    fn touched(&self, path: &str, cwd: Option<&Path>, write: bool, parents: bool) -> Option<&Area> {
        let mut real = paths::resolve(path, cwd);
        if let Some(absolute) = paths::absolute(path, cwd) {
            // The text as written counts too: a path that fails to resolve may still name one.
            real.push(paths::normalise(&absolute));
        }
        self.areas.iter().find(|area| {
            (write || area.secret) && real.iter().any(|r| area.holds(r, parents && write))
        })
    }

    fn named_in(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        self.areas
            .iter()
            .find(|area| area.hints(cwd).iter().any(|h| text.contains(h.as_str())))
            .map(|area| Finding {
                area,
                by_name: true,
            })
    }

    fn check_command(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        let found = |area| Finding {
            area,
            by_name: false,
        };
        let parts = match command::read(text) {
            Command::Read(parts) => parts,
            Command::Opaque { .. } => return self.named_in(text, cwd),
        };
        // `cd` moves what follows; once it cannot be followed, only the text can tell.
        let mut here: Option<PathBuf> = cwd.map(paths::real_dir);
        // Without a working directory, relative paths can only be told by their text.
        let mut lost = here.is_none();
        for part in parts.iter() {
            let at = here.as_deref();
            for path in &part.reading.writes {
                if let Some(area) = self.touched(path, at, true, part.reading.reaches_below) {
                    return Some(found(area));
                }
            }
            for path in &part.reading.operands {
                if let Some(area) = self.touched(path, at, false, false) {
                    return Some(found(area));
                }
            }
            match &part.reading.chdir {
                Some(Some(dir)) => {
                    here = paths::resolve(dir, at).into_iter().next();
                    lost |= here.is_none();
                }
                Some(None) => lost = true,
                None => {}
            }
        }
        let hidden = parts.iter().any(|p| p.reading.hidden);
        if hidden || lost {
            return self.named_in(text, cwd);
        }
        None
    }
}

/// The guard in the waterfall: ahead of every rule and plugin.
pub struct Guard(pub Arc<Protected>);

impl Guard {
    fn answer_for(&self, question: &Question) -> Answer {
        let arguments = question.arguments();
        match self
            .0
            .check(question.tool_name(), arguments.as_ref(), question.cwd())
        {
            None => Answer::from(Decision::Next),
            Some(finding) => Answer {
                decision: Decision::Reject,
                reason: crate::answer::clean_reason(&finding.reason()),
                proposal: None,
                rule: Some(RuleRef {
                    id: finding.area.id.clone(),
                    rule: finding.area.text(),
                    scope: RuleScope::Project,
                    creator: CREATOR.to_owned(),
                }),
                by: None,
                authority: None,
            },
        }
    }
}

impl Listener for Guard {
    fn decide(&self, question: Question) -> ListenerFuture {
        let decision = self.answer_for(&question).decision;
        Box::pin(async move { Ok(decision) })
    }

    fn decide_now(&self, question: &Question) -> Option<ImmediateAnswer> {
        Some((None, Ok(self.answer_for(question))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn setup() -> (tempfile::TempDir, PathBuf, Protected) {
        let dir = tempfile::tempdir().unwrap();
        let root = paths::real_dir(dir.path());
        let project = root.join("proj");
        std::fs::create_dir_all(project.join(".approval-host")).unwrap();
        std::fs::create_dir_all(root.join("state/sessions")).unwrap();
        std::fs::write(project.join(".approval-host/claude-code.toml"), "").unwrap();
        std::fs::write(root.join("audit.key"), "k").unwrap();
        let protected = Protected::new([
            Area::tree("state-dir", "the state directory", &root.join("state")),
            Area::file(
                "deployment",
                "the deployment file",
                &project.join(".approval-host/claude-code.toml"),
            ),
            Area::secret(
                "signing-key",
                "the audit signing key",
                &root.join("audit.key"),
            ),
        ]);
        (dir, project, protected)
    }

    fn hit(p: &Protected, tool: &str, args: Value, cwd: &Path) -> Option<String> {
        p.check(tool, Some(&args), cwd.to_str())
            .map(|f| f.area.id.clone())
    }

    #[test]
    fn writes_to_protected_places_are_found_however_they_are_written() {
        let (dir, project, p) = setup();
        let root = paths::real_dir(dir.path());
        let state = root.join("state");
        std::os::unix::fs::symlink(&state, project.join("link")).unwrap();
        let s = |t: &str| t.replace("STATE", state.to_str().unwrap());
        for (tool, args) in [
            (
                "Write",
                json!({"file_path": s("STATE/sessions/rules.user.jsonl")}),
            ),
            ("Edit", json!({"file_path": "link/sessions/x.jsonl"})),
            (
                "Edit",
                json!({"file_path": ".approval-host/claude-code.toml"}),
            ),
            ("Write", json!({"file_path": ".claude/settings.json"})),
            (
                "Write",
                json!({"file_path": "/elsewhere/.claude/settings.local.json"}),
            ),
            (
                "Bash",
                json!({"command": s("echo x >> STATE/sessions/rules.user.jsonl")}),
            ),
            (
                "Bash",
                json!({"command": "tee -a link/sessions/rules.user.jsonl"}),
            ),
            (
                "Bash",
                json!({"command": "cp evil .approval-host/claude-code.toml"}),
            ),
            (
                "Bash",
                json!({"command": "timeout 5 sed -i s/a/b/ .approval-host/claude-code.toml"}),
            ),
            (
                "Bash",
                json!({"command": "bash -c 'truncate -s0 .approval-host/claude-code.toml'"}),
            ),
            (
                "Bash",
                json!({"command": "cd .approval-host && cp x claude-code.toml"}),
            ),
            ("Bash", json!({"command": s("rm -rf STATE/..")})),
            ("Bash", json!({"command": "echo x > .claude/settings.json"})),
            (
                "Bash",
                json!({"command": "eval 'echo x > .approval-host/claude-code.toml'"}),
            ),
            ("Bash", json!({"command": s("cat STATE/../audit.key")})),
            ("Read", json!({"file_path": s("STATE/../audit.key")})),
            (
                "mcp__fs__move",
                json!({"source": "a", "destination": ".approval-host/claude-code.toml"}),
            ),
        ] {
            assert!(
                hit(&p, tool, args.clone(), &project).is_some(),
                "{tool} {args}"
            );
        }
    }

    #[test]
    fn ordinary_work_is_left_alone() {
        let (_dir, project, p) = setup();
        for (tool, args) in [
            (
                "Read",
                json!({"file_path": ".approval-host/claude-code.toml"}),
            ),
            ("Write", json!({"file_path": "src/main.rs"})),
            ("Bash", json!({"command": "cargo test 2>&1 | tee out.log"})),
            ("Bash", json!({"command": "cp a b && mv c d"})),
            ("Bash", json!({"command": "cp build/app ..  && touch .."})),
            (
                "Bash",
                json!({"command": "cat .approval-host/claude-code.toml"}),
            ),
            ("Bash", json!({"command": "echo $HOME > x"})),
            ("Write", json!({"file_path": ".vscode/settings.json"})),
        ] {
            assert_eq!(hit(&p, tool, args.clone(), &project), None, "{tool} {args}");
        }
    }
}

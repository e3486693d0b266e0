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

/// The argument a consumer sets when it cannot tell which files a call touches (a patch it
/// cannot read as its agent CLI does): the guard refuses the call.
pub const UNREADABLE_FILES: &str = "unreadable_files";

/// Tools whose arguments are known: their paths are in the fields above. Any other tool (an
/// MCP server's, a CLI's new one) may take a path under any name, at any depth, so every
/// string in its arguments is read as a path it may write.
const KNOWN_TOOLS: &[&str] = &[
    "Bash",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Grep",
    "Glob",
    "LS",
    "WebFetch",
    "WebSearch",
    "Task",
    "TodoWrite",
    "ExitPlanMode",
    "apply_patch",
    "PermissionRequest",
    "read",
    "edit",
    "grep",
    "glob",
    "ls",
];

/// The longest string read as a path (`PATH_MAX`); longer ones, and ones holding a newline,
/// are text.
const LONGEST_PATH: usize = 4096;

/// Every string in `value`, at any depth.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

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
        id: "copilot-mcp",
        what: "Copilot CLI's project MCP server configuration (where the MCP gateway is put in front of a server)",
        dir: &[".github"],
        files: &["mcp.json"],
    },
    Settings {
        id: "cursor-mcp",
        what: "Cursor's MCP server configuration (where the MCP gateway is put in front of a server)",
        dir: &[".cursor"],
        files: &["mcp.json"],
    },
];

/// The rule a call is refused by when it writes where its text cannot show: not a place of its
/// own, so it is never matched, only named.
static UNKNOWN_PLACE: Settings = Settings {
    id: "unreadable-place",
    what: "a place the call's text does not show",
    dir: &[],
    files: &[],
};

impl Settings {
    /// Whether replacing or removing the directory `dir` (a real path) could take one of these
    /// files along: `dir` is the settings directory or one above it (`.claude`, `.github`),
    /// a directory the agent CLIs read settings from (the working directory, its parents, the
    /// home, its parents), or one holding such a settings directory.
    fn lies_below(&self, dir: &Path, cwd: Option<&Path>) -> bool {
        let names: Vec<&str> = dir
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect();
        let is_settings_dir = (1..=self.dir.len()).any(|n| names.ends_with(&self.dir[..n]));
        let read_from = cwd
            .map(Path::to_owned)
            .into_iter()
            .chain(paths::real_home())
            .any(|place| place.starts_with(dir));
        if is_settings_dir || read_from {
            return true;
        }
        // Only a directory holds one (one look at the file system, per check, for the common
        // word that is not).
        is_dir(dir)
            && if self.dir.is_empty() {
                self.files.iter().any(|f| dir.join(f).exists())
            } else {
                dir.join(self.dir.join("/")).is_dir()
            }
    }

    /// The glob lists show.
    fn text(&self) -> String {
        let dir: String = self.dir.iter().map(|d| format!("{d}/")).collect();
        match self.files {
            [] => self.what.to_owned(),
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
    fn holds(&self, path: &Path, parents: bool, cwd: Option<&Path>) -> bool {
        match &self.place {
            Place::Tree(p) => path.starts_with(p) || (parents && p.starts_with(path)),
            Place::File(p) => path == p || (parents && p.starts_with(path)),
            Place::Settings(s) => s.holds(path) || (parents && s.lies_below(path, cwd)),
        }
    }

    /// Whether putting files into the directory `dir` (a real path) could put one here: `dir`
    /// is inside a protected tree, holds a protected file (not a secret), or is an agent CLI's settings
    /// directory (files named alone, `.mcp.json` in any directory, are judged by name).
    fn receives(&self, dir: &Path) -> bool {
        match &self.place {
            Place::Tree(p) => dir.starts_with(p),
            // Files beside a secret change nothing; beside the deployment file they may be
            // the deployment a hook names but that does not exist yet.
            Place::File(p) => !self.secret && p.parent() == Some(dir),
            Place::Settings(s) => {
                let names: Vec<&str> = dir
                    .components()
                    .filter_map(|c| c.as_os_str().to_str())
                    .collect();
                !s.dir.is_empty() && names.ends_with(s.dir)
            }
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
        for base in [cwd.map(paths::real_dir), paths::real_home()]
            .into_iter()
            .flatten()
        {
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
#[derive(Debug, Clone)]
pub struct Protected {
    /// Which protections these are, for the per-thread memo of their hints.
    id: u64,
    areas: Vec<Area>,
    /// What a refusal names when the call writes where its text cannot show.
    unknown: Area,
}

/// Why a call is rejected: the area it touches, and how that is known.
#[derive(Debug, Clone, Copy)]
pub struct Finding<'a> {
    /// The protected place.
    pub area: &'a Area,
    /// How the call reaches it.
    pub how: How,
}

/// How a call reaches a protected place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// It writes (or, for a secret, reads) a path in it.
    Path,
    /// The call could not be read; its text names the place.
    ByName,
    /// It writes somewhere its text cannot show (a directory it moved to and this host cannot
    /// follow, a tilde form for another user, files given on standard input, a variable): any
    /// protected place could be the one.
    Unknowable(&'static str),
}

impl Finding<'_> {
    /// The reason the model reads.
    pub fn reason(&self) -> String {
        match self.how {
            How::Path => self.area.reason(),
            How::ByName => self.area.named_reason(),
            How::Unknowable(why) => format!(
                "this call writes {why}: that could be a protected place (the host's state, its deployment, an agent CLI's settings), which no agent may change"
            ),
        }
    }
}

impl Default for Protected {
    /// Every agent CLI's settings files, and nothing of a host's own.
    fn default() -> Protected {
        Protected::new([])
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
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Protected {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            areas: all,
            unknown: Area::settings(&UNKNOWN_PLACE),
        }
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
        RESOLVED.with(|memo| memo.borrow_mut().clear());
        IS_DIR.with(|memo| memo.borrow_mut().clear());
        if let Some(text) = arguments.get("command").and_then(Value::as_str)
            && let Some(area) = self.check_command(text, cwd)
        {
            return Some(area);
        }
        if arguments
            .get(UNREADABLE_FILES)
            .is_some_and(Value::is_string)
        {
            return self.unknowable("to files this host cannot read from the call");
        }
        let reader = READERS.contains(&tool);
        if !KNOWN_TOOLS.contains(&tool) {
            let mut all = Vec::new();
            strings(arguments, &mut all);
            for text in all
                .iter()
                .filter(|s| s.len() <= LONGEST_PATH && !s.contains('\n'))
            {
                let path = paths::file_url(text).unwrap_or_else(|| text.clone());
                if let Some(area) = self.touched(&path, cwd, !reader, false) {
                    return Some(Finding {
                        area,
                        how: How::Path,
                    });
                }
            }
        }
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
                    how: How::Path,
                });
            }
        }
        None
    }

    /// The paths `path` may be from `cwd`: as the kernel and a path library resolve it, and as
    /// written. Remembered for the rest of one check (a word is often both an operand and a
    /// write), never longer: the file system may change between calls.
    fn real_paths(path: &str, cwd: Option<&Path>) -> std::rc::Rc<Vec<PathBuf>> {
        RESOLVED.with(|memo| {
            let key = (path.to_owned(), cwd.map(Path::to_owned));
            if let Some(real) = memo.borrow().get(&key) {
                return real.clone();
            }
            let mut real = paths::resolve(path, cwd);
            if let Some(absolute) = paths::absolute(path, cwd) {
                // The text as written counts too: a path that fails to resolve may still name
                // one.
                real.push(paths::normalise(&absolute));
            } else if !path.starts_with('~') {
                // No working directory to read it from: an agent CLI's settings are still told
                // by their names (`.codex/hooks.json` anywhere).
                real.push(PathBuf::from(path));
            }
            let real = std::rc::Rc::new(real);
            memo.borrow_mut().insert(key, real.clone());
            real
        })
    }

    /// The area `path` touches: a secret one whatever the access, any one for a write.
    fn touched(&self, path: &str, cwd: Option<&Path>, write: bool, parents: bool) -> Option<&Area> {
        let real = Self::real_paths(path, cwd);
        self.areas.iter().find(|area| {
            (write || area.secret) && real.iter().any(|r| area.holds(r, parents && write, cwd))
        })
    }

    /// Each area's hints from `cwd`, remembered per thread for the last protections and
    /// working directory asked about (they cost file-system lookups).
    fn hints(&self, cwd: Option<&Path>) -> std::rc::Rc<Vec<Vec<String>>> {
        use std::cell::RefCell;
        use std::rc::Rc;
        type Memo = Option<(u64, Option<PathBuf>, Option<PathBuf>, Rc<Vec<Vec<String>>>)>;
        thread_local! {
            static LAST: RefCell<Memo> = const { RefCell::new(None) };
        }
        let home = paths::real_home();
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((id, c, h, hints)) = last.as_ref()
                && *id == self.id
                && c.as_deref() == cwd
                && *h == home
            {
                return hints.clone();
            }
            let hints = Rc::new(self.areas.iter().map(|a| a.hints(cwd)).collect::<Vec<_>>());
            *last = Some((self.id, cwd.map(Path::to_owned), home, hints.clone()));
            hints
        })
    }

    fn named_in(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        let hints = self.hints(cwd);
        let plain = spelled_plainly(text);
        let text = plain.as_str();
        self.areas
            .iter()
            .zip(hints.iter())
            .find(|(_, hints)| hints.iter().any(|h| text.contains(h.as_str())))
            .map(|(area, _)| Finding {
                area,
                how: How::ByName,
            })
    }

    fn check_command(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        let parts = match command::read(text) {
            Command::Read(parts) => parts,
            Command::Opaque { .. } => return self.in_unreadable(text, cwd),
        };
        // `cd` moves what follows. A `cd` may fail, or run in a pipeline's subshell, so every
        // directory the command may be in is kept; once one cannot be followed, only the text
        // can tell.
        let mut heres: Vec<Option<PathBuf>> = vec![cwd.map(paths::real_dir)];
        // Without a working directory, relative paths can only be told by their text.
        let lost = cwd.is_none();
        // A `cd` this host cannot follow: a relative write after it could land anywhere.
        let mut moved = false;
        for part in parts.iter() {
            let unknown_dir = moved || part.reading.elsewhere;
            for here in &heres {
                if let Some(finding) = self.check_part(part, here.as_deref(), unknown_dir, cwd) {
                    return Some(finding);
                }
            }
            match &part.reading.chdir {
                Some(Some(dir)) => {
                    let mut next = Vec::new();
                    for here in &heres {
                        match tilde(dir, here.as_deref()) {
                            Some(dir) => next.extend(
                                paths::resolve(&dir, here.as_deref())
                                    .into_iter()
                                    .filter(|d| is_dir(d))
                                    .map(Some),
                            ),
                            None => moved = true,
                        }
                    }
                    moved |= next.is_empty();
                    for d in next {
                        if !heres.contains(&d) {
                            heres.push(d);
                        }
                    }
                    // More places than a person would follow: any of them could be the one.
                    moved |= heres.len() > MAX_PLACES;
                }
                Some(None) => moved = true,
                None => {}
            }
        }
        let hidden = parts.iter().any(|p| p.reading.hidden);
        if hidden || lost || moved {
            return self.in_unreadable(text, cwd);
        }
        None
    }

    /// What one simple command of a command writes or reads, from the directory `at` (the
    /// working directory as `cd` left it; `unknown_dir` when that cannot be known).
    fn check_part(
        &self,
        part: &command::Part,
        at: Option<&Path>,
        unknown_dir: bool,
        cwd: Option<&Path>,
    ) -> Option<Finding<'_>> {
        let found = |area| Finding {
            area,
            how: How::Path,
        };
        let writes = part
            .reading
            .writes
            .iter()
            .map(|w| (w, false))
            .chain(part.reading.writes_below.iter().map(|w| (w, true)));
        for (path, below) in writes {
            let Some(path) = tilde(path, at) else {
                return self.unknowable(UNEXPANDED_TILDE);
            };
            if unknown_dir && !path.starts_with(['/', '~']) {
                return self.unknowable("relative to a directory it moved to");
            }
            if let Some(area) = self.touched(&path, at, true, below) {
                return Some(found(area));
            }
        }
        for path in &part.reading.writes_near {
            let Some(path) = tilde(path, at) else {
                return self.unknowable(UNEXPANDED_TILDE);
            };
            if unknown_dir && !path.starts_with(['/', '~']) {
                return self.unknowable("relative to a directory it moved to");
            }
            if let Some(area) = self.touched_near(&path, at) {
                return Some(found(area));
            }
        }
        for dir in &part.reading.writes_into {
            let Some(dir) = tilde(dir, at) else {
                return self.unknowable(UNEXPANDED_TILDE);
            };
            let mut real = paths::resolve(&dir, at);
            real.extend(paths::absolute(&dir, at).map(|a| paths::normalise(&a)));
            if let Some(area) = self
                .areas
                .iter()
                .find(|area| real.iter().any(|r| area.receives(r)))
            {
                return Some(found(area));
            }
        }
        if part.reading.writes_unknown {
            return self.unknowable("files named on its standard input");
        }
        // A program that may read what lies below a directory it is given reads a secret
        // below it (`grep -r '' ~/.config`, `tar -c`, `cp -r`); one that lists names does not.
        let reads_below = part.reading.runs.iter().any(|run| {
            let name = run.first().map_or("", |p| super::programs::base_name(p));
            let recursive = run[1..].iter().any(|a| {
                a.starts_with("--r")
                    || a.starts_with("--a")
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R', 'a']))
            });
            !LISTS_NAMES.contains(&name)
                && (!matches!(name, "cp" | "mv" | "ln" | "install" | "scp") || recursive)
        });
        // An option alone is not a path (one holding a secret's path is found by its text).
        for path in part.reading.operands.iter().filter(|o| !o.starts_with('-')) {
            let path = paths::file_url(path).unwrap_or_else(|| path.clone());
            if let Some(path) = tilde(&path, at) {
                if let Some(area) = self.touched(&path, at, false, false) {
                    return Some(found(area));
                }
                if reads_below && let Some(area) = self.secret_below(&path, at) {
                    return Some(found(area));
                }
            }
        }
        // A word that spells a protected place inside it (`-o.claude/settings.json`, a
        // script's `w` command, `open('…')`) is not exempt because it is not a path alone.
        let writes_any = !part.reading.writes.is_empty()
            || !part.reading.writes_below.is_empty()
            || !part.reading.writes_near.is_empty()
            || part.reading.uncovered.is_some();
        if writes_any
            || part
                .reading
                .operands
                .iter()
                .any(|o| self.names_secret(o, cwd))
        {
            let words = part
                .simple
                .all_words()
                .cloned()
                .collect::<Vec<_>>()
                .join(" ");
            if let Some(finding) = self.named_in(&words, cwd)
                && (writes_any || finding.area.secret)
            {
                return Some(finding);
            }
        }
        None
    }

    /// The area a word given to a program not known to only read could change: the place
    /// itself or a directory holding it, unless the word is the working directory, the home
    /// or a directory above them (every program is given `.`; one that writes all it is given
    /// is a known writer, judged by its own rule).
    fn touched_near(&self, path: &str, cwd: Option<&Path>) -> Option<&Area> {
        let real = Self::real_paths(path, cwd);
        let home = paths::real_home();
        let everywhere = |r: &Path| {
            cwd.is_some_and(|c| c.starts_with(r)) || home.as_ref().is_some_and(|h| h.starts_with(r))
        };
        self.areas.iter().find(|area| {
            real.iter().any(|r| {
                area.holds(r, false, cwd)
                    || (!everywhere(r)
                        && match &area.place {
                            Place::Tree(p) | Place::File(p) => p.starts_with(r),
                            Place::Settings(s) => s.lies_below(r, None),
                        })
            })
        })
    }

    /// A secret area below the directory `path` names.
    fn secret_below(&self, path: &str, cwd: Option<&Path>) -> Option<&Area> {
        let real = Self::real_paths(path, cwd);
        self.areas
            .iter()
            .filter(|a| a.secret)
            .find(|area| match &area.place {
                Place::File(p) | Place::Tree(p) => real.iter().any(|r| p.starts_with(r) && r != p),
                Place::Settings(_) => false,
            })
    }

    /// Whether a word names a secret area (its path as written from here or the home).
    fn names_secret(&self, word: &str, cwd: Option<&Path>) -> bool {
        let hints = self.hints(cwd);
        self.areas
            .iter()
            .zip(hints.iter())
            .filter(|(a, _)| a.secret)
            .any(|(_, hints)| hints.iter().any(|h| word.contains(h.as_str())))
    }

    /// A command this host cannot read: rejected when its text names a protected place, or a
    /// word in it is a glob that could match one.
    fn in_unreadable(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        if let Some(finding) = self.named_in(text, cwd) {
            return Some(finding);
        }
        // A command this host cannot read that names an agent CLI's settings directory at all
        // (`(rm -rf .claude)`, `bash <<< 'mv .codex x'`) may change what is in it.
        let plain = spelled_plainly(text);
        if let Some(area) = self.areas.iter().find(|area| match &area.place {
            Place::Settings(s) if !s.dir.is_empty() => {
                let dir = s.dir.join("/");
                plain
                    .split(|c: char| c.is_whitespace() || "'\"`;&|<>(){}=".contains(c))
                    .any(|w| {
                        let w = w.trim_end_matches('/');
                        w == dir
                            || w.ends_with(&format!("/{dir}"))
                            || w.starts_with(&format!("{dir}/"))
                    })
            }
            _ => false,
        }) {
            return Some(Finding {
                area,
                how: How::ByName,
            });
        }
        if let Some(why) = variable_write(text) {
            return self.unknowable(why);
        }
        self.glob_names(text, cwd)
    }

    /// A glob in a command this host cannot read that matches a protected place as bash would
    /// expand it (`*` and `?` within one name, never a leading `.`), or a directory above one
    /// when the glob's program may write (`rm -rf .cl*`). A read-only program's glob matters
    /// only for a secret.
    fn glob_names(&self, text: &str, cwd: Option<&Path>) -> Option<Finding<'_>> {
        let hints = self.hints(cwd);
        for segment in text.split(['\n', ';', '|', '&', '(', ')']) {
            let words: Vec<&str> = segment
                .split(|c: char| c.is_whitespace() || "'\"`<>{}".contains(c))
                .filter(|w| !w.is_empty())
                .collect();
            let Some(program) = words.first() else {
                continue;
            };
            let name = super::programs::base_name(program);
            let args: Vec<String> = words[1..].iter().map(|w| (*w).to_owned()).collect();
            let reads = super::writes::reads_only(name, &args) && !segment.contains('>');
            for word in words
                .iter()
                .filter(|w| w.contains(['*', '?', '[']) && !w.contains('$'))
            {
                let hit = self.areas.iter().zip(hints.iter()).find(|(area, hints)| {
                    (area.secret || !reads)
                        && hints.iter().filter(|h| h.contains('/')).any(|hint| {
                            let hint = Path::new(hint.trim_end_matches('/'));
                            glob_spells(word, hint)
                                || (!reads && hint.ancestors().any(|a| glob_spells(word, a)))
                        })
                });
                if let Some((area, _)) = hit {
                    return Some(Finding {
                        area,
                        how: How::ByName,
                    });
                }
            }
        }
        None
    }

    /// A write to a place no text can show.
    fn unknowable(&self, why: &'static str) -> Option<Finding<'_>> {
        Some(Finding {
            area: &self.unknown,
            how: How::Unknowable(why),
        })
    }
}

/// Whether a bash glob `word` spells `path` (relative or absolute, compared name by name): `*`
/// and `?` within one name, `[…]` a class, and never a name's leading `.` (bash's `dotglob` is
/// off).
fn glob_spells(word: &str, path: &Path) -> bool {
    let word = word.trim_start_matches("./");
    let globs: Vec<&str> = word.split('/').filter(|c| !c.is_empty()).collect();
    let names: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    if globs.len() != names.len() || globs.is_empty() || word.starts_with('/') != path.is_absolute()
    {
        return false;
    }
    globs.iter().zip(&names).all(|(glob, name)| {
        if name.starts_with('.') && !glob.starts_with('.') {
            return false;
        }
        globset::Glob::new(glob).is_ok_and(|g| g.compile_matcher().is_match(name))
    })
}

/// `text` with `/./` and repeated slashes folded, as a path library reads them
/// (`.claude/./settings.json`, `.claude//settings.json`).
fn spelled_plainly(text: &str) -> String {
    let mut out = text.replace("/./", "/");
    while out.contains("//") {
        out = out.replace("//", "/");
    }
    while out.contains("/./") {
        out = out.replace("/./", "/");
    }
    out
}

/// Programs whose arguments a variable could turn into a write to a protected place: the known
/// writers (not `mkdir` or `touch`, which change no file's content).
const VARIABLE_WRITERS: &[&str] = &[
    "cp", "mv", "rm", "rmdir", "ln", "install", "rsync", "scp", "tee", "dd", "truncate", "shred",
    "unlink", "chmod", "chown", "chgrp", "tar", "unzip", "patch", "sed", "perl",
];

/// Whether a command this host cannot read writes to a path held in a variable or made by a
/// command substitution: after a redirection, or as an argument of a known writer. Such a path
/// could spell any protected place. (A substitution that makes a commit message, `git commit
/// -m "$(cat <<'EOF' …)"`, is not a path.)
fn variable_write(text: &str) -> Option<&'static str> {
    const KEYWORDS: &[&str] = &[
        "do", "then", "else", "elif", "if", "while", "until", "for", "in", "time", "!", "{", "}",
        "coproc", "exec",
    ];
    let expands = |w: &str| w.contains(['$', '`']);
    for segment in text.split(['\n', ';', '|', '&', '(', ')']) {
        let mut words = segment
            .split_whitespace()
            .skip_while(|w| KEYWORDS.contains(w));
        let Some(program) = words.next() else {
            continue;
        };
        let rest: Vec<&str> = words.collect();
        let after_redirect = segment
            .split('>')
            .skip(1)
            .any(|after| after.split_whitespace().next().is_some_and(expands));
        if after_redirect {
            return Some("to a path held in a variable");
        }
        let name = super::programs::base_name(program);
        let args: Vec<String> = rest
            .iter()
            .take_while(|w| !w.starts_with(['>', '<']))
            .map(|w| w.trim_matches(['"', '\'']).to_owned())
            .collect();
        if args.iter().any(|a| expands(a))
            && VARIABLE_WRITERS.contains(&name)
            && !super::writes::reads_only(name, &args)
        {
            return Some("to a path held in a variable");
        }
    }
    None
}

/// Where a write goes through a tilde form this host cannot expand.
const UNEXPANDED_TILDE: &str = "to another user's home or the previous directory (~user, ~-)";

/// The most directories a command's `cd`s are followed to.
const MAX_PLACES: usize = 8;

/// Programs that list or move through directories without reading the files in them.
const LISTS_NAMES: &[&str] = &[
    "ls", "cd", "pushd", "du", "df", "stat", "find", "fd", "fdfind", "tree", "file", "realpath",
    "readlink", "dirname", "basename", "test", "[", "echo", "printf", "mkdir", "touch", "wc",
];

/// A shell word with bash's tilde expansion done where it can be (`~+` is the working
/// directory; `~` and `~/…` stay for [`paths::absolute`], which knows the home; `~name` is that
/// user's home from the password file). `None` when it cannot be: `~-` (the previous
/// directory) or a user this host cannot find.
fn tilde(word: &str, cwd: Option<&Path>) -> Option<String> {
    let Some(rest) = word.strip_prefix('~') else {
        return Some(word.to_owned());
    };
    let (user, tail) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, ""),
    };
    match user {
        "" => Some(word.to_owned()),
        "+" => cwd.map(|c| format!("{}{tail}", c.display())),
        "-" => None,
        name => home_of(name).map(|h| format!("{}{tail}", h.display())),
    }
}

/// A user's home directory from `/etc/passwd`.
fn home_of(user: &str) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == user).then(|| PathBuf::from(fields[5]))
    })
}

/// Whether `path` is a directory, remembered for the rest of one check.
fn is_dir(path: &Path) -> bool {
    IS_DIR.with(|memo| {
        if let Some(known) = memo.borrow().get(path) {
            return *known;
        }
        let dir = path.is_dir();
        memo.borrow_mut().insert(path.to_owned(), dir);
        dir
    })
}

/// Key of a path resolved within one check: the path as written, and where from.
type ResolvedKey = (String, Option<PathBuf>);

thread_local! {
    /// Paths resolved within the check running on this thread.
    static RESOLVED: std::cell::RefCell<std::collections::HashMap<ResolvedKey, std::rc::Rc<Vec<PathBuf>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// Which paths are directories, within the check running on this thread.
    static IS_DIR: std::cell::RefCell<std::collections::HashMap<PathBuf, bool>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
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

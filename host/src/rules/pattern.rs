//! A rule's `Tool(pattern)` syntax, as Claude Code users write it, parsed once and matched against
//! a call.
//!
//! - `Tool` alone: every call of the tool. The tool is an exact name or a glob (`mcp__github__*`).
//! - A command (the call's `command` argument): `Bash(npm run test:*)` matches `npm run test` and
//!   `npm run test --watch` (a prefix at a word boundary), not `npm run testing`;
//!   `Bash(git status)` matches exactly that command. The command is read by a bash parser
//!   ([`super::command`]): an allow rule must cover every simple command of it, none of which
//!   may write a file or run a program the rule does not name; a reject rule matches when any
//!   program the command runs (through wrappers, paths and `bash -c`) matches it.
//! - A path (the call's `file_path`, `path` or `notebook_path`): gitignore-style globs, `*` within
//!   one directory, `**` across them. `./src/**` (or `src/**`) is relative to the asker's working
//!   directory, `//abs/path/**` is the absolute `/abs/path/**`, `~/notes/**` is under the host
//!   user's home. Both sides are resolved through symlinks ([`super::paths`]); the directories
//!   the host puts in front of the rule's own text (the working directory, the home) are matched
//!   literally, never as globs.
//! - A domain (the call's `url`): `WebFetch(domain:example.com)` matches `http` and `https` URLs
//!   whose host, as a WHATWG URL parser reads it (the way browsers and fetch libraries do), is
//!   exactly `example.com`, not its subdomains. `domain:SCHEME://host` names another scheme.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde_json::Value;

pub use super::call::Call;
use super::call::{UNREADABLE, subject_forms, subject_tool, url_host};
use super::command::{Command, Part};
use super::glob::{path_glob, path_matcher};
use super::programs::base_name;
use super::{paths, shell};

/// The tools whose pattern is a path even when it does not look like one (`src/**`).
const PATH_TOOLS: [&str; 10] = [
    "Read",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
    "read",
    "edit",
];

/// The tool name an agent CLI's permission request is asked under (Codex's `PermissionRequest`:
/// it is about to ask its user, perhaps to run a command outside its sandbox). Its arguments are
/// the call's own plus `tool`, the call's tool. Only a rule that names it exactly
/// (`PermissionRequest(git fetch:*)`) covers it: a tool glob such as `*` never does, and an
/// ordinary rule for the call's own tool never grants it (its reject rules still refuse it).
pub const PERMISSION_REQUEST: &str = "PermissionRequest";

/// The argument of a [`PERMISSION_REQUEST`] call naming the tool it asks for.
pub const PERMISSION_REQUEST_TOOL: &str = "tool";

/// The schemes `domain:` matches when the rule names none.
const WEB_SCHEMES: [&str; 2] = ["http", "https"];

/// A parsed `Tool(pattern)`.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The text it was parsed from, normalised (`Tool` or `Tool(pattern)`).
    pub text: String,
    /// The tool part.
    pub tool: ToolMatch,
    /// The argument part.
    pub arguments: ArgumentMatch,
}

/// How a rule names its tool.
#[derive(Debug, Clone)]
pub enum ToolMatch {
    /// Exactly this name (the index key).
    Exact(String),
    /// A glob over tool names.
    Glob(GlobMatcher),
}

/// What a rule requires of a call's arguments.
#[derive(Debug, Clone)]
pub enum ArgumentMatch {
    /// Nothing: every call of the tool.
    Any,
    /// The `command` argument: these words as a prefix (`:*`), or exactly.
    Command {
        /// The words.
        words: Vec<String>,
        /// Whether more words may follow.
        prefix: bool,
    },
    /// A path argument under this glob.
    Path {
        /// The glob as written (relative, `//`-absolute or `~/`).
        glob: String,
        /// Whether it is relative to the asker's working directory.
        relative: bool,
    },
    /// An MCP resource's URI or prompt's name (`mcp__notes__resources/read(notes://docs/*)`):
    /// a glob, `*` within one `/`-separated part, `**` across them.
    Subject {
        /// The glob as written.
        glob: String,
        /// It compiled.
        matcher: GlobMatcher,
    },
    /// The `url` argument's host.
    Domain {
        /// The host as a URL parser normalises it (lowercase, IDNA to ASCII).
        host: String,
        /// The schemes it applies to.
        schemes: Vec<String>,
    },
}

/// A rule text that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule {text:?}: {reason}")]
pub struct SpecError {
    /// The text.
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

fn tool_glob(tool: &str) -> Result<GlobMatcher, String> {
    Glob::new(tool)
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("tool glob: {e}"))
}

/// Parses `Tool` or `Tool(pattern)`.
///
/// # Errors
/// [`SpecError`] saying what is wrong with the text.
pub fn parse(text: &str) -> Result<Spec, SpecError> {
    let err = |reason: String| SpecError {
        text: text.to_owned(),
        reason,
    };
    let text = text.trim();
    let (tool, pattern) = match text.find('(') {
        None => (text, None),
        Some(open) => {
            let Some(inner) = text[open + 1..].strip_suffix(')') else {
                return Err(err(
                    "expected `Tool` or `Tool(pattern)`, ending with ')'".into()
                ));
            };
            (text[..open].trim(), Some(inner.trim()))
        }
    };
    if tool.is_empty() {
        return Err(err("no tool name".into()));
    }
    if tool.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err("a tool name has no spaces".into()));
    }
    let tool_match = if tool.contains(['*', '?', '[']) {
        ToolMatch::Glob(tool_glob(tool).map_err(err)?)
    } else {
        ToolMatch::Exact(tool.to_owned())
    };
    let arguments = match pattern {
        None => ArgumentMatch::Any,
        Some("") | Some("*") => ArgumentMatch::Any,
        Some(p) => argument_match(tool, p).map_err(err)?,
    };
    let text = match pattern {
        None | Some("") => tool.to_owned(),
        Some(p) => format!("{tool}({p})"),
    };
    Ok(Spec {
        text,
        tool: tool_match,
        arguments,
    })
}

fn argument_match(tool: &str, pattern: &str) -> Result<ArgumentMatch, String> {
    if subject_tool(tool) {
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("glob: {e}"))?
            .compile_matcher();
        return Ok(ArgumentMatch::Subject {
            glob: pattern.to_owned(),
            matcher,
        });
    }
    if let Some(domain) = pattern.strip_prefix("domain:") {
        return domain_match(domain.trim());
    }
    let looks_like_path = ["./", "../", "//", "~/"]
        .iter()
        .any(|p| pattern.starts_with(p))
        || PATH_TOOLS.contains(&tool);
    if looks_like_path || pattern.starts_with('/') {
        if pattern.starts_with('/') && !pattern.starts_with("//") {
            return Err(
                "a path starting with a single '/' is ambiguous: write //abs/path for an absolute path, ./path for one relative to the working directory".into(),
            );
        }
        let relative = !pattern.starts_with("//") && !pattern.starts_with("~/");
        // Checked now, so a bad glob is a load error, not a decision failure.
        path_glob(pattern, Path::new("/")).map_err(|e| format!("path glob: {e}"))?;
        return Ok(ArgumentMatch::Path {
            glob: pattern.to_owned(),
            relative,
        });
    }
    let (command, prefix) = match pattern.strip_suffix(":*") {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    if command.contains('*') {
        return Err("a command pattern may only end with :* (a prefix); no other wildcards".into());
    }
    Ok(ArgumentMatch::Command {
        words: shell::pattern_words(command)?,
        prefix,
    })
}

fn domain_match(domain: &str) -> Result<ArgumentMatch, String> {
    const USAGE: &str = "domain: takes a host name, e.g. domain:example.com (or scheme://host)";
    let (schemes, host) = match domain.split_once("://") {
        Some((scheme, host)) => (vec![scheme.to_ascii_lowercase()], host),
        None => (
            WEB_SCHEMES.iter().map(|s| (*s).to_owned()).collect(),
            domain,
        ),
    };
    if host.is_empty()
        || host.contains(['/', '@', ':', '\\', '?', '#', '*', '%'])
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(USAGE.into());
    }
    // The rule's host is normalised by the same parser as the calls' URLs.
    let parsed =
        url::Url::parse(&format!("http://{host}/")).map_err(|e| format!("{USAGE}: {e}"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| USAGE.to_owned())?
        .trim_end_matches('.')
        .to_owned();
    if host.is_empty() {
        return Err(USAGE.into());
    }
    Ok(ArgumentMatch::Domain { host, schemes })
}

/// Whether `words` matches a rule's words, as a prefix or exactly.
fn words_match<'w>(
    want: &[String],
    prefix: bool,
    words: impl IntoIterator<Item = &'w String>,
) -> bool {
    let mut words = words.into_iter();
    for w in want {
        if words.next() != Some(w) {
            return false;
        }
    }
    prefix || words.next().is_none()
}

impl Spec {
    /// Whether this rule, written for [`PERMISSION_REQUEST`], may cover a permission request for
    /// a call of `inner` (the request's `tool`): a command pattern only `Bash`'s, a path pattern
    /// only a path tool's, a domain only `WebFetch`'s; `PermissionRequest` alone, every tool's.
    /// A pattern never reads an argument of a tool it was not written for (an MCP tool's
    /// `command` or `path` is whatever the model put there).
    pub fn covers_permission_for(&self, inner: &str) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { .. } => inner == "Bash",
            ArgumentMatch::Path { .. } => PATH_TOOLS.contains(&inner),
            ArgumentMatch::Domain { .. } => inner == "WebFetch",
            ArgumentMatch::Subject { .. } => false,
        }
    }

    /// As an allow rule, whether its tool part may grant `tool`: a tool glob grants an MCP
    /// resource, prompt or completion question only when it names the method
    /// (`mcp__*__resources/read`), so a glob written for tools (`mcp__notes__*read*`) never
    /// allows reading resources.
    pub fn allows_tool(&self, tool: &str) -> bool {
        match &self.tool {
            ToolMatch::Exact(t) => t == tool,
            ToolMatch::Glob(_) => {
                let method = tool
                    .strip_prefix(super::call::MCP_PREFIX)
                    .and_then(|rest| rest.split_once("__"))
                    .map(|(_, method)| method);
                let named = self.text.split('(').next().unwrap_or_default();
                self.matches_tool(tool)
                    && (!subject_tool(tool) || method.is_some_and(|m| named.contains(m)))
            }
        }
    }

    /// Whether the tool part matches `tool`.
    pub fn matches_tool(&self, tool: &str) -> bool {
        match &self.tool {
            ToolMatch::Exact(t) => t == tool,
            // A permission request is granted only by a rule written for it.
            ToolMatch::Glob(g) => tool != PERMISSION_REQUEST && g.is_match(tool),
        }
    }

    /// Whether this rule's words match `words` (a prefix rule: at a word boundary).
    pub fn matches_words(&self, words: &[String]) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command {
                words: want,
                prefix,
            } => words_match(want, *prefix, words),
            _ => false,
        }
    }

    /// As an allow rule: whether it covers one simple command, which then writes no file and
    /// runs no program the rule does not name.
    pub fn covers_part(&self, part: &Part) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { words, prefix } => {
                part.reading.uncovered.is_none()
                    && words.len() >= part.words_a_rule_must_name()
                    && words_match(words, *prefix, part.simple.all_words())
            }
            _ => false,
        }
    }

    /// As a reject rule: whether it matches a program `part` runs (wrappers, paths and
    /// assignments seen through), or its words as written.
    pub fn rejects_part(&self, part: &Part) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { words, prefix } => {
                part.reading
                    .runs
                    .iter()
                    .any(|run| words_match(words, *prefix, run))
                    || words_match(words, *prefix, &part.simple.words)
                    || words_match(words, *prefix, part.simple.all_words())
            }
            _ => false,
        }
    }

    /// For a reject rule and a command that cannot be read (or hides what it runs): whether the
    /// rule's words appear, in order and adjacent, anywhere in the command's text, with quotes
    /// and backslashes taken out or left in, and programs named by any path.
    pub fn appears_in(&self, command: &str) -> bool {
        let words = match &self.arguments {
            ArgumentMatch::Any => return true,
            ArgumentMatch::Command { words, .. } => words,
            _ => return false,
        };
        let dequoted: String = command
            .chars()
            .filter(|c| !matches!(c, '\'' | '"' | '\\'))
            .collect();
        [command, dequoted.as_str()].iter().any(|text| {
            let loose: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || "'\"`$();&|<>{}\\=".contains(c))
                .filter(|w| !w.is_empty())
                .collect();
            loose.windows(words.len().max(1)).any(|window| {
                window
                    .iter()
                    .zip(words)
                    .enumerate()
                    .all(|(i, (a, b))| *a == b || (i == 0 && base_name(a) == b))
            })
        })
    }

    /// Whether the rule alone would allow `call`: the tool matches and, for a command, every
    /// part of it is covered (a command that cannot be read only under a rule for the whole
    /// tool).
    pub fn covers(&self, call: &Call<'_>) -> bool {
        if !self.allows_tool(call.tool) {
            return false;
        }
        match (&self.arguments, call.command()) {
            (ArgumentMatch::Any, _) => true,
            (ArgumentMatch::Command { .. }, Some(text)) => match super::command::read(text) {
                Command::Read(parts) => {
                    !parts.is_empty() && parts.iter().all(|p| self.covers_part(p))
                }
                Command::Opaque { .. } => false,
            },
            _ => self.matches_other(call, true),
        }
    }

    /// Whether a reject rule matches `call` (any part of its command, any of its paths).
    pub fn rejects(&self, call: &Call<'_>) -> bool {
        if !self.matches_tool(call.tool) {
            return false;
        }
        match (&self.arguments, call.command()) {
            (ArgumentMatch::Any, _) => true,
            (ArgumentMatch::Command { .. }, Some(text)) => {
                let command = super::command::read(text);
                let by_parts = match &command {
                    Command::Read(parts) => parts.iter().any(|p| self.rejects_part(p)),
                    Command::Opaque { .. } => false,
                };
                by_parts || (command.hides_programs() && self.appears_in(text))
            }
            _ => self.matches_other(call, false),
        }
    }

    /// Whether the rule matches a call's non-command arguments (path, domain, or any). As an
    /// allow rule (`allow`) every path the call names must be covered; as a reject rule any one
    /// matching is enough.
    pub fn matches_other(&self, call: &Call<'_>, allow: bool) -> bool {
        // An argument the server's schema does not declare is one no argument pattern can know
        // the meaning of: no allow rule that reads arguments covers the call.
        if allow && !call.undeclared.is_empty() && !matches!(self.arguments, ArgumentMatch::Any) {
            return false;
        }
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { .. } => false,
            ArgumentMatch::Subject { matcher, .. } => {
                if !subject_tool(call.tool) {
                    return false;
                }
                let Some(subject) = call.subject() else {
                    return false;
                };
                match subject_forms(subject) {
                    // As written, with nothing a server could decode into something else.
                    None => matcher.is_match(subject),
                    // An allow rule covers only a plain subject; a reject rule matches either
                    // form.
                    Some(decoded) => {
                        !allow && (matcher.is_match(subject) || matcher.is_match(&decoded))
                    }
                }
            }
            ArgumentMatch::Domain { host, schemes } => call
                .url()
                .and_then(url_host)
                .is_some_and(|(scheme, h)| schemes.contains(&scheme) && h == *host),
            ArgumentMatch::Path { glob, relative } => {
                let found = call.paths();
                if found.is_empty() {
                    return false;
                }
                // A path that cannot be read as a place here is inside no allow rule and inside
                // every reject rule.
                if found.iter().any(|p| p == UNREADABLE) {
                    return !allow;
                }
                if allow && call.tool == "Glob" && glob_pattern_escapes(call) {
                    return false;
                }
                let cwd = call.cwd.map(Path::new).filter(|c| c.is_absolute());
                if *relative && cwd.is_none() {
                    // A relative rule needs a working directory to mean anything.
                    return false;
                }
                let base = cwd.map_or_else(|| PathBuf::from("/"), paths::real_dir);
                let Ok(matcher) = path_matcher(glob, &base) else {
                    return false;
                };
                let mut each = found.iter().map(|p| {
                    let real = paths::resolve(p, cwd);
                    !real.is_empty() && real.iter().all(|r| matcher.is_match(r))
                });
                if allow {
                    each.all(|covered| covered)
                } else {
                    // Any reading of any path inside the rule's area is enough to reject.
                    found.iter().any(|p| {
                        let absolute = paths::absolute(p, cwd);
                        paths::resolve(p, cwd).iter().any(|r| matcher.is_match(r))
                            || absolute.is_some_and(|a| matcher.is_match(&paths::normalise(&a)))
                    })
                }
            }
        }
    }
}

/// Whether a `Glob` call's own pattern reaches outside its `path` (absolute, `~`, or `..`).
fn glob_pattern_escapes(call: &Call<'_>) -> bool {
    call.arguments
        .and_then(|a| a.get("pattern"))
        .and_then(Value::as_str)
        .is_some_and(|p| {
            p.starts_with('/') || p.starts_with('~') || p.split('/').any(|c| c == "..")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(command: &str) -> Vec<String> {
        shell::parse(command).unwrap().remove(0).words
    }

    #[test]
    fn a_prefix_matches_at_a_word_boundary() {
        let spec = parse("Bash(npm run test:*)").unwrap();
        assert!(spec.matches_tool("Bash"));
        assert!(!spec.matches_tool("bash"));
        assert!(spec.matches_words(&words("npm run test")));
        assert!(spec.matches_words(&words("npm run test --watch")));
        assert!(spec.matches_words(&words("npm  run   'test'")));
        assert!(!spec.matches_words(&words("npm run testing")));
        assert!(!spec.matches_words(&words("npm run")));
        let exact = parse("Bash(git status)").unwrap();
        assert!(exact.matches_words(&words("git status")));
        assert!(!exact.matches_words(&words("git status --short")));
    }

    #[test]
    fn bad_rules_say_why() {
        for (text, why) in [
            ("", "no tool name"),
            ("Bash(npm", "ending with ')'"),
            ("Bash(npm *)", "only end with :*"),
            ("Bash(a; b:*)", "one simple command"),
            ("Bash($(x):*)", "cannot hold"),
            ("Bash(npm test > x)", "redirection"),
            ("Read(/etc/**)", "ambiguous"),
            ("WebFetch(domain:)", "host name"),
            ("WebFetch(domain:a@b)", "host name"),
            ("Two words", "no spaces"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.reason.contains(why), "{text}: {e}");
        }
    }

    fn allows(rule: &str, tool: &str, args: &Value, cwd: Option<&str>) -> bool {
        let spec = parse(rule).unwrap();
        spec.covers(&Call {
            tool,
            arguments: Some(args),
            cwd,
            undeclared: &[],
        })
    }

    fn rejects(rule: &str, tool: &str, args: &Value, cwd: Option<&str>) -> bool {
        parse(rule).unwrap().rejects(&Call {
            tool,
            arguments: Some(args),
            cwd,
            undeclared: &[],
        })
    }

    #[test]
    fn an_argument_the_schema_does_not_declare_leaves_the_call_to_no_allow_path_rule() {
        let undeclared = ["mode".to_owned()];
        let arguments = json!({"path": "./docs/a"});
        let call = |undeclared| Call {
            tool: "mcp__fs__read",
            arguments: Some(&arguments),
            cwd: Some("/w"),
            undeclared,
        };
        let allow = parse("mcp__fs__read(./docs/**)").unwrap();
        assert!(allow.covers(&call(&[])));
        assert!(!allow.covers(&call(&undeclared)));
        // A rule for the whole tool reads no argument; a reject path rule still matches.
        assert!(parse("mcp__fs__read").unwrap().covers(&call(&undeclared)));
        assert!(
            parse("mcp__fs__read(./docs/**)")
                .unwrap()
                .rejects(&call(&undeclared))
        );
    }

    #[test]
    fn an_mcp_call_is_judged_by_every_path_it_carries_whatever_else_it_adds() {
        let tool = "mcp__fs__read";
        let allow = "mcp__fs__read(./docs/**)";
        let reject = "mcp__fs__read(//etc/**)";
        let cwd = Some("/w");
        // A `command` argument does not turn the call into a shell command.
        let with_command = json!({"path": "/etc/passwd", "command": "ls"});
        assert!(rejects(reject, tool, &with_command, cwd));
        assert!(!allows(allow, tool, &with_command, cwd));
        // file: URLs are their paths; other schemes are unreadable (never allowed, always
        // matched by a reject path rule); keys shaped like paths count; depth is bounded.
        let mut deep = json!("./docs/a");
        for _ in 0..40 {
            deep = json!({ "x": deep });
        }
        for (args, allowed, rejected) in [
            (json!({"uri": "file:///etc/passwd"}), false, true),
            (json!({"uri": "file:///w/docs/a"}), true, false),
            (json!({"path": "./docs/a", "src": "notes://x"}), false, true),
            (
                json!({"path": "./docs/a", "files": {"/etc/shadow": "1"}}),
                false,
                true,
            ),
            (
                json!({"path": "./docs/a", "note": "plain words"}),
                true,
                false,
            ),
            (deep, false, true),
        ] {
            assert_eq!(allows(allow, tool, &args, cwd), allowed, "{args}");
            assert_eq!(rejects(reject, tool, &args, cwd), rejected, "{args}");
        }
    }

    #[test]
    fn a_tool_glob_never_allows_a_resource_or_prompt_it_does_not_name() {
        let read = |uri: &str| json!({ "uri": uri });
        let resource = "mcp__notes__resources/read";
        for rule in [
            "mcp__notes__*read*",
            "mcp__notes__*",
            "mcp__notes__*(./**)",
            "mcp__*",
        ] {
            assert!(
                !allows(rule, resource, &read("notes://private"), Some("/w")),
                "{rule}"
            );
        }
        assert!(allows(
            "mcp__*__resources/read",
            resource,
            &read("notes://x"),
            None
        ));
        // Reject globs still reach them.
        assert!(rejects("mcp__notes__*", resource, &read("notes://x"), None));
    }

    #[test]
    fn a_resource_rule_reads_the_uri_as_a_server_would_decode_it() {
        let tool = "mcp__notes__resources/read";
        let read = |uri: &str| json!({ "uri": uri });
        let allow = "mcp__notes__resources/read(notes://notes/*)";
        let reject = "mcp__notes__resources/read(notes://notes/secret)";
        assert!(allows(allow, tool, &read("notes://notes/a"), None));
        assert!(!allows(allow, tool, &read("notes://notes/a/b"), None));
        for hidden in [
            "notes://notes/%73ecret",
            "NOTES://notes/secret",
            "notes://notes/x/../secret",
            "notes://notes/./secret",
        ] {
            assert!(rejects(reject, tool, &read(hidden), None), "{hidden}");
            assert!(!allows(allow, tool, &read(hidden), None), "{hidden}");
        }
        assert!(!allows(allow, tool, &read("notes://notes/a%2Fb"), None));
    }

    #[test]
    fn paths_are_globs_resolved_against_the_working_directory() {
        let call = |path: &str| json!({"file_path": path});
        for (rule, path, cwd, want) in [
            ("Read(./src/**)", "src/a/b.rs", Some("/w"), true),
            ("Read(./src/**)", "/w/src/a.rs", Some("/w"), true),
            (
                "Read(./src/**)",
                "./src/../../etc/passwd",
                Some("/w"),
                false,
            ),
            ("Read(./src/**)", "src/a.rs", None, false),
            ("Read(src/*.rs)", "src/a/b.rs", Some("/w"), false),
            ("Read(src/*.rs)", "src/b.rs", Some("/w"), true),
            ("Edit(//etc/hosts)", "/etc/hosts", None, true),
            ("Edit(//etc/**)", "/etc/../root/x", Some("/"), false),
        ] {
            let tool = rule.split('(').next().unwrap();
            assert_eq!(
                allows(rule, tool, &call(path), cwd),
                want,
                "{rule} {path} {cwd:?}"
            );
        }
    }

    #[test]
    fn the_working_directory_is_never_a_glob() {
        let call = json!({"file_path": "/proj1/secret"});
        assert!(!allows("Read(./**)", "Read", &call, Some("/proj[12]")));
        assert!(!allows("Read(./**)", "Read", &call, Some("/p*")));
        assert!(allows(
            "Read(./**)",
            "Read",
            &json!({"file_path": "x"}),
            Some("/proj[12]")
        ));
    }

    #[test]
    fn domains_match_the_url_host_as_browsers_read_it() {
        for (url, want) in [
            ("https://example.com/a", true),
            ("https://EXAMPLE.com:443/a", true),
            ("https://user@example.com/", true),
            ("http://example.com./", true),
            ("https://docs.example.com/", false),
            ("https://example.com.evil.net/", false),
            ("https://evil.net/?u=https://example.com", false),
            ("https://evil.com\\@example.com/", false),
            ("https://evil.com\\\\@example.com/", false),
            ("https://example.com@evil.com/", false),
            ("https://example.com%2eevil.com/", false),
            ("ftp://example.com/", false),
            ("file://example.com/etc/passwd", false),
            ("not a url", false),
        ] {
            assert_eq!(
                allows(
                    "WebFetch(domain:example.com)",
                    "WebFetch",
                    &json!({"url": url}),
                    None
                ),
                want,
                "{url}"
            );
        }
        assert!(allows(
            "WebFetch(domain:bücher.de)",
            "WebFetch",
            &json!({"url": "https://xn--bcher-kva.de/"}),
            None
        ));
        assert!(allows(
            "WebFetch(domain:ftp://example.com)",
            "WebFetch",
            &json!({"url": "ftp://example.com/x"}),
            None
        ));
    }

    #[test]
    fn tool_globs_and_whole_tools() {
        let spec = parse("mcp__github__*").unwrap();
        assert!(spec.matches_tool("mcp__github__create_issue"));
        assert!(!spec.matches_tool("mcp__gitlab__x"));
        assert!(matches!(spec.arguments, ArgumentMatch::Any));
        assert_eq!(
            parse(" Bash( npm test:* ) ").unwrap().text,
            "Bash(npm test:*)"
        );
    }
}

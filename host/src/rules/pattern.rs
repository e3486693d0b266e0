//! A rule's `Tool(pattern)` syntax, as Claude Code users write it, parsed once and matched against
//! a call.
//!
//! - `Tool` alone: every call of the tool. The tool is an exact name or a glob (`mcp__github__*`).
//! - A command (the call's `command` argument): `Bash(npm run test:*)` matches `npm run test` and
//!   `npm run test --watch` (a prefix at a word boundary), not `npm run testing`;
//!   `Bash(git status)` matches exactly that command. Compound commands are split (see
//!   [`super::shell`]): an allow rule must match every part, and no allow rule matches what cannot
//!   be split safely.
//! - A path (the call's `file_path`, `path` or `notebook_path`): gitignore-style globs, `*` within
//!   one directory, `**` across them. `./src/**` (or `src/**`) is relative to the asker's working
//!   directory, `//abs/path/**` is the absolute `/abs/path/**`, `~/notes/**` is under the host
//!   user's home. The call's path is resolved against the working directory and `.`/`..` are
//!   folded first, so `./src/../../etc/passwd` is not under `./src/**`.
//! - A domain (the call's `url`): `WebFetch(domain:example.com)` matches URLs whose host is
//!   exactly `example.com` (any case), not its subdomains.

use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde_json::Value;

use super::shell;

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

/// The call arguments a path pattern reads, in order.
pub(crate) const PATH_FIELDS: [&str; 3] = ["file_path", "path", "notebook_path"];

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
    /// The `url` argument's host.
    Domain(String),
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
    if let Some(domain) = pattern.strip_prefix("domain:") {
        let domain = domain.trim().to_ascii_lowercase();
        if domain.is_empty() || domain.contains(['/', ' ', '*']) {
            return Err("domain: takes a host name, e.g. domain:example.com".into());
        }
        return Ok(ArgumentMatch::Domain(domain));
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

/// The glob `pattern` means for a call whose working directory is `cwd`.
fn path_glob(pattern: &str, cwd: &Path) -> Result<GlobMatcher, globset::Error> {
    let absolute: PathBuf = if let Some(abs) = pattern.strip_prefix("//") {
        PathBuf::from("/").join(abs)
    } else if let Some(home) = pattern.strip_prefix("~/") {
        std::env::var_os("HOME")
            .map_or_else(|| PathBuf::from("/nonexistent-home"), PathBuf::from)
            .join(home)
    } else {
        cwd.join(pattern.strip_prefix("./").unwrap_or(pattern))
    };
    let text = normalise(&absolute);
    GlobBuilder::new(&text.to_string_lossy())
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
}

/// Folds `.` and `..` without touching the filesystem (`/a/b/../c` is `/a/c`; `..` at the root
/// stays at the root).
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// How the call's arguments look to a matcher.
pub struct Call<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The recorded arguments, if any.
    pub arguments: Option<&'a Value>,
    /// The asker's working directory, if given.
    pub cwd: Option<&'a str>,
}

impl Spec {
    /// Whether the tool part matches `tool`.
    pub fn matches_tool(&self, tool: &str) -> bool {
        match &self.tool {
            ToolMatch::Exact(t) => t == tool,
            ToolMatch::Glob(g) => g.is_match(tool),
        }
    }

    /// Whether this rule matches one simple command's `words` (the command part of a call).
    pub fn matches_words(&self, words: &[String]) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command {
                words: want,
                prefix,
            } => {
                if *prefix {
                    words.len() >= want.len() && words[..want.len()] == want[..]
                } else {
                    words == &want[..]
                }
            }
            _ => false,
        }
    }

    /// For a reject rule and a command that cannot be split: whether the rule's words appear, in
    /// order and adjacent, anywhere in the command's text.
    pub fn appears_in(&self, command: &str) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { words, .. } => {
                let loose: Vec<&str> = command
                    .split(|c: char| c.is_whitespace() || "'\"`$();&|<>{}".contains(c))
                    .filter(|w| !w.is_empty())
                    .collect();
                loose
                    .windows(words.len().max(1))
                    .any(|w| w.iter().zip(words).all(|(a, b)| a == b))
            }
            _ => false,
        }
    }

    /// Whether the rule alone would allow `call`: the tool matches and, for a command, every part
    /// of it does (a command that cannot be split only under a rule for the whole tool).
    pub fn covers(&self, call: &Call<'_>) -> bool {
        if !self.matches_tool(call.tool) {
            return false;
        }
        match (
            &self.arguments,
            call.arguments
                .and_then(|a| a.get("command"))
                .and_then(Value::as_str),
        ) {
            (ArgumentMatch::Any, _) => true,
            (ArgumentMatch::Command { .. }, Some(command)) => {
                shell::split(command).is_ok_and(|parts| {
                    !parts.is_empty() && parts.iter().all(|w| self.matches_words(w))
                })
            }
            _ => self.matches_other(call),
        }
    }

    /// Whether the rule matches a call's non-command arguments (path, domain, or any).
    pub fn matches_other(&self, call: &Call<'_>) -> bool {
        match &self.arguments {
            ArgumentMatch::Any => true,
            ArgumentMatch::Command { .. } => false,
            ArgumentMatch::Domain(domain) => call
                .arguments
                .and_then(|a| a.get("url"))
                .and_then(Value::as_str)
                .and_then(host_of)
                .is_some_and(|h| h.eq_ignore_ascii_case(domain)),
            ArgumentMatch::Path { glob, relative } => {
                let Some(path) = call
                    .arguments
                    .and_then(|a| PATH_FIELDS.iter().find_map(|f| a.get(*f)))
                    .and_then(Value::as_str)
                else {
                    return false;
                };
                let cwd = match (call.cwd, *relative || !path.starts_with('/')) {
                    (Some(cwd), _) => Path::new(cwd),
                    // A relative pattern or path needs a working directory to mean anything.
                    (None, true) => return false,
                    (None, false) => Path::new("/"),
                };
                let Ok(matcher) = path_glob(glob, cwd) else {
                    return false;
                };
                matcher.is_match(normalise(&cwd.join(path)))
            }
        }
    }
}

/// The host of an `http(s)://` URL, without port or credentials.
pub(crate) fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    (!host.is_empty()).then_some(host.trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(command: &str) -> Vec<String> {
        shell::split(command).unwrap().remove(0)
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
            ("Bash($(x):*)", "command substitution"),
            ("Read(/etc/**)", "ambiguous"),
            ("WebFetch(domain:)", "host name"),
            ("Two words", "no spaces"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.reason.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn paths_are_globs_resolved_against_the_working_directory() {
        let call = |tool: &'static str, path: &str, cwd: Option<&'static str>| {
            (tool, json!({"file_path": path}), cwd)
        };
        let cases = [
            (
                "Read(./src/**)",
                call("Read", "src/a/b.rs", Some("/w")),
                true,
            ),
            (
                "Read(./src/**)",
                call("Read", "/w/src/a.rs", Some("/w")),
                true,
            ),
            (
                "Read(./src/**)",
                call("Read", "./src/../../etc/passwd", Some("/w")),
                false,
            ),
            ("Read(./src/**)", call("Read", "src/a.rs", None), false),
            (
                "Read(src/*.rs)",
                call("Read", "src/a/b.rs", Some("/w")),
                false,
            ),
            ("Read(src/*.rs)", call("Read", "src/b.rs", Some("/w")), true),
            ("Edit(//etc/hosts)", call("Edit", "/etc/hosts", None), true),
            (
                "Edit(//etc/**)",
                call("Edit", "/etc/../root/x", Some("/")),
                false,
            ),
        ];
        for (rule, (tool, args, cwd), want) in cases {
            let spec = parse(rule).unwrap();
            let got = spec.matches_tool(tool)
                && spec.matches_other(&Call {
                    tool,
                    arguments: Some(&args),
                    cwd,
                });
            assert_eq!(got, want, "{rule} {args} {cwd:?}");
        }
    }

    #[test]
    fn domains_match_the_url_host_exactly() {
        let spec = parse("WebFetch(domain:example.com)").unwrap();
        for (url, want) in [
            ("https://example.com/a", true),
            ("https://EXAMPLE.com:443/a", true),
            ("https://user@example.com/", true),
            ("https://docs.example.com/", false),
            ("https://example.com.evil.net/", false),
            ("https://evil.net/?u=https://example.com", false),
            ("not a url", false),
        ] {
            let args = json!({"url": url});
            let call = Call {
                tool: "WebFetch",
                arguments: Some(&args),
                cwd: None,
            };
            assert_eq!(spec.matches_other(&call), want, "{url}");
        }
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

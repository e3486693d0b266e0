//! The standing rule a person is offered for a call ("Always allow `npm run test:*` in this
//! project"): the narrowest rule in the [`super::pattern`] syntax that would also cover the next
//! call of the same kind, or nothing when no such rule is safe to offer.
//!
//! - A command: its leading words, up to the first that looks like an argument (an option, a
//!   path, a value), at most three: `npm run test --watch` gives `Bash(npm run test:*)`,
//!   `cargo test -p x` gives `Bash(cargo test:*)`. A compound or opaque command, or one starting
//!   with an environment assignment, gets no offer: a prefix rule for it would say less than the
//!   person saw.
//! - A path: every file under the file's directory, `Edit(//abs/dir/**)`.
//! - A URL: its domain, `WebFetch(domain:example.com)`.
//! - Anything else: the tool itself.

use std::path::Path;

use serde_json::Value;

use super::pattern::{self, PATH_FIELDS};
use super::shell;

/// The most leading words a suggested command prefix keeps.
const MAX_PREFIX_WORDS: usize = 3;

/// Whether a word reads as the command's subject (a program or subcommand) rather than an
/// argument to it.
fn is_command_word(word: &str) -> bool {
    !word.is_empty()
        && !word.starts_with('-')
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '+' | '@'))
}

/// The rule to offer for a call of `tool` with `arguments` from `cwd`, checked to parse and to
/// match the call itself.
pub fn suggest(tool: &str, arguments: Option<&Value>, cwd: Option<&str>) -> Option<String> {
    let rule = match arguments {
        Some(args) => match args.get("command").and_then(Value::as_str) {
            Some(command) => command_rule(tool, command)?,
            None => match (
                PATH_FIELDS
                    .iter()
                    .find_map(|f| args.get(*f))
                    .and_then(Value::as_str),
                args.get("url").and_then(Value::as_str),
            ) {
                (Some(path), _) => path_rule(tool, path, cwd)?,
                (None, Some(url)) => format!("{tool}(domain:{})", pattern::host_of(url)?),
                (None, None) => tool.to_owned(),
            },
        },
        None => tool.to_owned(),
    };
    let spec = pattern::parse(&rule).ok()?;
    // The offer must cover the call it is offered for.
    let call = pattern::Call {
        tool,
        arguments,
        cwd,
    };
    spec.covers(&call).then_some(spec.text)
}

fn command_rule(tool: &str, command: &str) -> Option<String> {
    let mut parts = shell::split(command).ok()?;
    if parts.len() != 1 {
        return None;
    }
    let words = parts.remove(0);
    if words.first().is_none_or(|w| w.contains('=')) {
        return None;
    }
    let prefix: Vec<&str> = words
        .iter()
        .take(MAX_PREFIX_WORDS)
        .take_while(|w| is_command_word(w))
        .map(String::as_str)
        .collect();
    if prefix.is_empty() {
        return None;
    }
    Some(format!("{tool}({}:*)", prefix.join(" ")))
}

fn path_rule(tool: &str, path: &str, cwd: Option<&str>) -> Option<String> {
    let absolute = if path.starts_with('/') {
        Path::new(path).to_owned()
    } else {
        Path::new(cwd?).join(path)
    };
    let absolute = pattern::normalise(&absolute);
    let dir = absolute.parent()?.to_str()?;
    if dir
        .chars()
        .any(|c| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '(' | ')'))
    {
        return None;
    }
    let dir = dir.trim_end_matches('/');
    Some(format!("{tool}(/{dir}/**)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bash(command: &str) -> Option<String> {
        suggest("Bash", Some(&json!({ "command": command })), Some("/w"))
    }

    #[test]
    fn a_command_offers_its_leading_words() {
        assert_eq!(
            bash("npm run test --watch").as_deref(),
            Some("Bash(npm run test:*)")
        );
        assert_eq!(
            bash("cargo test -p host").as_deref(),
            Some("Bash(cargo test:*)")
        );
        assert_eq!(bash("ls -la src").as_deref(), Some("Bash(ls:*)"));
        assert_eq!(
            bash("git log --oneline").as_deref(),
            Some("Bash(git log:*)")
        );
        assert_eq!(bash("  make  ").as_deref(), Some("Bash(make:*)"));
        assert_eq!(bash("./build.sh x").as_deref(), None);
    }

    #[test]
    fn compound_opaque_and_env_prefixed_commands_get_no_offer() {
        assert_eq!(bash("npm test && rm -rf ~"), None);
        assert_eq!(bash("npm test; curl x"), None);
        assert_eq!(bash("echo $(whoami)"), None);
        assert_eq!(bash("FOO=1 npm test"), None);
        assert_eq!(bash(""), None);
    }

    #[test]
    fn a_path_offers_its_directory_and_a_url_its_domain() {
        assert_eq!(
            suggest("Edit", Some(&json!({"file_path": "src/a.rs"})), Some("/w")).as_deref(),
            Some("Edit(//w/src/**)")
        );
        assert_eq!(
            suggest("Read", Some(&json!({"file_path": "/etc/hosts"})), None).as_deref(),
            Some("Read(//etc/**)")
        );
        assert_eq!(
            suggest("Read", Some(&json!({"file_path": "a.rs"})), None),
            None,
            "a relative path without a working directory says nothing"
        );
        assert_eq!(
            suggest("WebFetch", Some(&json!({"url": "https://Docs.rs/x"})), None).as_deref(),
            Some("WebFetch(domain:Docs.rs)")
        );
        assert_eq!(
            suggest("Task", Some(&json!({"prompt": "x"})), None).as_deref(),
            Some("Task")
        );
    }
}

//! The standing rule a person is offered for a call ("Always allow `npm run test:*` in this
//! project"): the narrowest rule in the [`super::pattern`] syntax that would also cover the next
//! call of the same kind, or nothing when no such rule is safe to offer.
//!
//! - A command: its leading words, up to the first that looks like an argument (an option, a
//!   path, a value), at most three: `npm run test --watch` gives `Bash(npm run test:*)`,
//!   `cargo test -p x` gives `Bash(cargo test:*)`. Never offered: a compound or opaque command,
//!   one with an assignment in front, one whose program is a shell, an interpreter or a wrapper
//!   (`bash`, `python`, `node`, `env`, `sudo`, `xargs`, `timeout`…: a prefix rule for it would
//!   allow anything), or a bare tool such as `git` or `npm` without its subcommand.
//! - A path: the files directly in the file's directory, `Edit(//abs/dir/*)`.
//! - A URL: its domain, `WebFetch(domain:example.com)`.
//! - Anything else (a call without arguments to narrow it by): nothing. A rule for a whole tool
//!   is never offered.

use std::path::Path;

use serde_json::Value;

use super::call::{PATH_FIELDS, url_host};
use super::command::{self, Command};
use super::paths;
use super::pattern;

/// The most leading words a suggested command prefix keeps.
const MAX_PREFIX_WORDS: usize = 3;

/// Programs a prefix rule must never be offered for: whatever follows them runs.
const NEVER_OFFERED: &[&str] = &[
    "bash",
    "sh",
    "zsh",
    "dash",
    "ksh",
    "mksh",
    "ash",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "env",
    "sudo",
    "doas",
    "su",
    "runuser",
    "xargs",
    "eval",
    "exec",
    "source",
    ".",
    "command",
    "builtin",
    "timeout",
    "nice",
    "nohup",
    "stdbuf",
    "time",
    "setsid",
    "ionice",
    "watch",
    "ssh",
    "python",
    "python2",
    "python3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "osascript",
    "pwsh",
    "powershell",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "tclsh",
    "expect",
    "find",
    "fd",
    "parallel",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "gdb",
    "script",
];

/// Programs whose first word alone says nothing: their subcommand must be part of the rule.
const NEEDS_SUBCOMMAND: &[&str] = &[
    "git",
    "npm",
    "pnpm",
    "yarn",
    "npx",
    "cargo",
    "go",
    "docker",
    "podman",
    "kubectl",
    "gh",
    "pip",
    "pip3",
    "uv",
    "poetry",
    "dotnet",
    "mvn",
    "gradle",
    "bundle",
    "terraform",
    "helm",
    "systemctl",
    "apt",
    "apt-get",
    "brew",
    "composer",
    "rustup",
    "conda",
];

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
/// cover the call itself.
pub fn suggest(tool: &str, arguments: Option<&Value>, cwd: Option<&str>) -> Option<String> {
    let args = arguments?;
    let rule = match args.get("command").and_then(Value::as_str) {
        Some(command) => command_rule(tool, command)?,
        None => match (
            PATH_FIELDS
                .iter()
                .find_map(|f| args.get(*f))
                .and_then(Value::as_str),
            args.get("url").and_then(Value::as_str),
        ) {
            (Some(path), _) => path_rule(tool, path, cwd)?,
            (None, Some(url)) => {
                let (scheme, host) = url_host(url)?;
                if scheme == "http" || scheme == "https" {
                    format!("{tool}(domain:{host})")
                } else {
                    format!("{tool}(domain:{scheme}://{host})")
                }
            }
            (None, None) => return None,
        },
    };
    let spec = pattern::parse(&rule).ok()?;
    if matches!(spec.arguments, pattern::ArgumentMatch::Any) {
        return None;
    }
    // The offer must cover the call it is offered for.
    let call = pattern::Call {
        tool,
        arguments,
        cwd,
        undeclared: &[],
    };
    spec.covers(&call).then_some(spec.text)
}

fn command_rule(tool: &str, command: &str) -> Option<String> {
    let Command::Read(parts) = command::read(command) else {
        return None;
    };
    let [part] = parts.as_slice() else {
        return None;
    };
    if !part.simple.assignments.is_empty() || part.reading.hidden {
        return None;
    }
    let words = &part.simple.words;
    let program = words.first()?;
    if NEVER_OFFERED.contains(&program.as_str()) || program.contains('/') {
        return None;
    }
    let prefix: Vec<&str> = words
        .iter()
        .take(MAX_PREFIX_WORDS)
        .take_while(|w| is_command_word(w))
        .map(String::as_str)
        .collect();
    if prefix.is_empty() || (prefix.len() == 1 && NEEDS_SUBCOMMAND.contains(&prefix[0])) {
        return None;
    }
    Some(format!("{tool}({}:*)", prefix.join(" ")))
}

fn path_rule(tool: &str, path: &str, cwd: Option<&str>) -> Option<String> {
    let cwd = cwd.map(Path::new);
    let real = paths::resolve(path, cwd);
    let [file] = real.as_slice() else {
        return None;
    };
    let dir = file.parent()?.to_str()?;
    if dir == "/" {
        return None;
    }
    let dir = globset::escape(dir.trim_end_matches('/'));
    Some(format!("{tool}(/{dir}/*)"))
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
    fn shells_interpreters_wrappers_and_bare_tools_get_no_offer() {
        for command in [
            "bash -c 'npm test'",
            "sh script.sh",
            "env FOO=1 npm test",
            "python -c 'print(1)'",
            "python3 script.py",
            "node -e 'x'",
            "xargs rm",
            "find . -exec rm {} ;",
            "find . -name x",
            "sudo ls",
            "timeout 5 npm test",
            "git -C x status",
            "npm --version",
            "/usr/bin/ls",
        ] {
            assert_eq!(bash(command), None, "{command}");
        }
        assert_eq!(suggest("Bash", Some(&json!({})), Some("/w")), None);
        assert_eq!(suggest("Bash", None, Some("/w")), None);
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
            Some("Edit(//w/src/*)")
        );
        assert_eq!(
            suggest("Read", Some(&json!({"file_path": "/etc/hosts"})), None).as_deref(),
            Some("Read(//etc/*)")
        );
        assert_eq!(
            suggest("Read", Some(&json!({"file_path": "/hosts"})), None),
            None,
            "never the whole filesystem"
        );
        assert_eq!(
            suggest("Edit", Some(&json!({"file_path": "a.rs"})), Some("/w[1]")).as_deref(),
            Some("Edit(//w[[]1[]]/*)")
        );
        assert_eq!(
            suggest("Read", Some(&json!({"file_path": "a.rs"})), None),
            None,
            "a relative path without a working directory says nothing"
        );
        assert_eq!(
            suggest("WebFetch", Some(&json!({"url": "https://Docs.rs/x"})), None).as_deref(),
            Some("WebFetch(domain:docs.rs)")
        );
        assert_eq!(suggest("Task", Some(&json!({"prompt": "x"})), None), None);
    }
}

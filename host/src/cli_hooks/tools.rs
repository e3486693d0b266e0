//! Each CLI's tool names and arguments as the rule syntax spells them, so that one rule means the
//! same call whichever CLI made it: `Bash` with a `command`, `Read`/`Edit`/`Write` with a
//! `file_path`, `WebFetch` with a `url`, `mcp__server__tool` unchanged.
//!
//! The canonical arguments are the CLI's own arguments with the canonical fields set from the
//! field the CLI's tool really reads; an argument the model added under a canonical name is
//! overwritten, so it can never stand in for the real one. A tool this host does not know keeps
//! its name and arguments: no rule written for another tool covers it, so it goes on to the next
//! answerer.

use serde_json::{Map, Value};

/// A CLI's tool: its name there, the rule syntax's name, and which of its arguments carry the
/// canonical fields (`(canonical, the CLI's own field names in order of preference)`).
pub(super) struct ToolMap {
    pub(super) name: &'static str,
    pub(super) canonical: &'static str,
    pub(super) fields: &'static [(&'static str, &'static [&'static str])],
}

/// Gemini CLI's built-in tools (docs/tools in google-gemini/gemini-cli).
pub(super) const GEMINI: &[ToolMap] = &[
    ToolMap {
        name: "run_shell_command",
        canonical: "Bash",
        fields: &[("command", &["command"])],
    },
    ToolMap {
        name: "read_file",
        canonical: "Read",
        fields: &[("file_path", &["file_path", "absolute_path"])],
    },
    ToolMap {
        name: "write_file",
        canonical: "Write",
        fields: &[("file_path", &["file_path"]), ("content", &["content"])],
    },
    ToolMap {
        name: "replace",
        canonical: "Edit",
        fields: &[
            ("file_path", &["file_path"]),
            ("old_string", &["old_string"]),
            ("new_string", &["new_string"]),
        ],
    },
    ToolMap {
        name: "glob",
        canonical: "Glob",
        fields: &[("pattern", &["pattern"]), ("path", &["dir_path", "path"])],
    },
    ToolMap {
        name: "search_file_content",
        canonical: "Grep",
        fields: &[("pattern", &["pattern"]), ("path", &["dir_path", "path"])],
    },
    ToolMap {
        name: "grep_search",
        canonical: "Grep",
        fields: &[("pattern", &["pattern"]), ("path", &["dir_path", "path"])],
    },
    ToolMap {
        name: "list_directory",
        canonical: "LS",
        fields: &[("path", &["dir_path", "path"])],
    },
    ToolMap {
        name: "web_fetch",
        canonical: "WebFetch",
        fields: &[("prompt", &["prompt"])],
    },
    ToolMap {
        name: "google_web_search",
        canonical: "WebSearch",
        fields: &[("query", &["query"])],
    },
];

/// Copilot CLI's tools (the "Tool names for hook matching" table of its hooks reference).
pub(super) const COPILOT: &[ToolMap] = &[
    ToolMap {
        name: "bash",
        canonical: "Bash",
        fields: &[("command", &["command"])],
    },
    ToolMap {
        name: "view",
        canonical: "Read",
        fields: &[("file_path", &["path"])],
    },
    ToolMap {
        name: "create",
        canonical: "Write",
        fields: &[("file_path", &["path"]), ("content", &["file_text"])],
    },
    ToolMap {
        name: "edit",
        canonical: "Edit",
        fields: &[
            ("file_path", &["path"]),
            ("old_string", &["old_str"]),
            ("new_string", &["new_str"]),
        ],
    },
    ToolMap {
        name: "glob",
        canonical: "Glob",
        fields: &[("pattern", &["pattern"]), ("path", &["path"])],
    },
    ToolMap {
        name: "grep",
        canonical: "Grep",
        fields: &[("pattern", &["pattern"]), ("path", &["path"])],
    },
    ToolMap {
        name: "web_fetch",
        canonical: "WebFetch",
        fields: &[("url", &["url"])],
    },
];

/// Codex's hook tool names: `Bash` is already the rule syntax's; `apply_patch` is mapped from
/// its patch ([`apply_patch`]).
pub(super) const CODEX: &[ToolMap] = &[ToolMap {
    name: "Bash",
    canonical: "Bash",
    fields: &[("command", &["command"])],
}];

/// The directory a shell call runs in: the first of `fields` the call names (relative to `cwd`
/// unless absolute), else `cwd`. A rule or protection reading a relative path then reads it
/// where the command will.
pub(super) fn run_dir(cwd: Option<String>, args: &Value, fields: &[&str]) -> Option<String> {
    let Some(dir) = fields
        .iter()
        .find_map(|f| args.get(*f).and_then(Value::as_str))
        .filter(|d| !d.is_empty())
    else {
        return cwd;
    };
    Some(match &cwd {
        Some(base) if !dir.starts_with('/') => format!("{}/{dir}", base.trim_end_matches('/')),
        _ => dir.to_owned(),
    })
}

/// `tool` and its arguments as the rules read them.
pub(super) fn canonical(table: &[ToolMap], tool: &str, args: &Value) -> (String, Value) {
    let Some(map) = table.iter().find(|m| m.name == tool) else {
        return (tool.to_owned(), args.clone());
    };
    let original = args.as_object().cloned().unwrap_or_default();
    let mut out = original.clone();
    for (canonical, sources) in map.fields {
        let value = sources.iter().find_map(|s| original.get(*s)).cloned();
        match value {
            Some(v) => {
                out.insert((*canonical).to_owned(), v);
            }
            // The CLI's tool does not read a canonical field the model may have added: drop it.
            None => {
                out.remove(*canonical);
            }
        }
    }
    if map.canonical == "WebFetch" && !out.contains_key("url") {
        // Gemini's web_fetch takes a prompt with the URLs in it: one URL is the call's URL;
        // several (or none) leave it without one, so no `WebFetch(domain:…)` rule covers it.
        let urls = out.get("prompt").and_then(Value::as_str).map(urls_in);
        if let Some([url]) = urls.as_deref() {
            out.insert("url".to_owned(), Value::String(url.clone()));
        }
    }
    (map.canonical.to_owned(), Value::Object(out))
}

/// The `http(s)://…` words of a text, as Gemini's web_fetch finds them.
fn urls_in(text: &str) -> Vec<String> {
    text.split_whitespace()
        .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
        .map(|w| {
            w.trim_end_matches(['.', ',', ';', ')', '"', '\''])
                .to_owned()
        })
        .collect()
}

/// The files an `apply_patch` body adds, updates, deletes or moves to, in order, once each.
pub(super) fn patch_paths(patch: &str) -> Vec<String> {
    const HEADERS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    let mut paths: Vec<String> = Vec::new();
    for line in patch.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(path) = HEADERS.iter().find_map(|h| line.strip_prefix(h)) {
            let path = path.trim().to_owned();
            if !path.is_empty() && !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// Codex's `apply_patch` as the rules read it: a patch of one file is an `Edit` (or a `Write`
/// when it adds the file) of that `file_path`; a patch of several files stays `apply_patch`,
/// with every file in `paths` (which the built-in protections read), so that no single-path
/// rule covers it.
pub(super) fn apply_patch(args: &Value) -> (String, Value) {
    let patch = args.get("command").and_then(Value::as_str).unwrap_or("");
    let paths = patch_paths(patch);
    let mut out = Map::new();
    // Under `patch`, not `command`: the body is not a shell command.
    out.insert("patch".to_owned(), Value::String(patch.to_owned()));
    match paths.as_slice() {
        [one] => {
            let adds = patch
                .lines()
                .any(|l| l.strip_prefix("*** Add File: ").is_some());
            out.insert("file_path".to_owned(), Value::String(one.clone()));
            (
                if adds { "Write" } else { "Edit" }.to_owned(),
                Value::Object(out),
            )
        }
        _ => {
            out.insert(
                "paths".to_owned(),
                Value::Array(paths.into_iter().map(Value::String).collect()),
            );
            ("apply_patch".to_owned(), Value::Object(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_canonical_field_the_model_added_never_stands_in_for_the_real_one() {
        let (tool, args) = canonical(
            COPILOT,
            "edit",
            &json!({"path": "/etc/passwd", "file_path": "/w/ok.txt", "old_str": "a", "new_str": "b"}),
        );
        assert_eq!(tool, "Edit");
        assert_eq!(args["file_path"], "/etc/passwd");
        let (_, args) = canonical(
            COPILOT,
            "bash",
            &json!({"cmd": "rm -rf /", "command": null}),
        );
        assert_eq!(args.get("command"), Some(&Value::Null));
        let (_, args) = canonical(GEMINI, "read_file", &json!({"path": "/w/a", "x": 1}));
        assert!(args.get("file_path").is_none());
    }

    #[test]
    fn a_web_fetch_prompt_gives_its_url_only_when_it_names_one() {
        let (_, one) = canonical(
            GEMINI,
            "web_fetch",
            &json!({"prompt": "summarise https://example.com/a."}),
        );
        assert_eq!(one["url"], "https://example.com/a");
        let (_, two) = canonical(
            GEMINI,
            "web_fetch",
            &json!({"prompt": "compare https://example.com and http://evil.test"}),
        );
        assert!(two.get("url").is_none());
    }

    #[test]
    fn a_patch_names_each_file_once() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Update File: src/a.rs\n*** Delete File: b.txt\n*** Update File: c\n*** Move to: .codex/hooks.json\n*** End Patch\n";
        assert_eq!(
            patch_paths(patch),
            ["src/a.rs", "b.txt", "c", ".codex/hooks.json"]
        );
        let (tool, args) = apply_patch(&json!({"command": patch}));
        assert_eq!(tool, "apply_patch");
        assert_eq!(args["paths"].as_array().unwrap().len(), 4);
        let (tool, args) = apply_patch(
            &json!({"command": "*** Begin Patch\n*** Add File: n.txt\n+hi\n*** End Patch"}),
        );
        assert_eq!(
            (tool.as_str(), &args["file_path"]),
            ("Write", &json!("n.txt"))
        );
        let (tool, _) = apply_patch(&json!({"command": "not a patch"}));
        assert_eq!(tool, "apply_patch");
    }
}

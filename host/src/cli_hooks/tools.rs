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
    if map.canonical == "WebFetch" && out.contains_key("prompt") {
        // Gemini's web_fetch fetches the URLs in its prompt (and, in its direct mode, a `url`
        // the model adds): one URL in all is the call's URL; several (or none) leave it
        // without one, so no `WebFetch(domain:…)` rule covers it.
        let mut urls = out
            .get("prompt")
            .and_then(Value::as_str)
            .map(urls_in)
            .unwrap_or_default();
        if let Some(extra) = out.get("url") {
            match extra.as_str().and_then(|u| url::Url::parse(u).ok()) {
                Some(u) if !urls.contains(&u.to_string()) => urls.push(u.to_string()),
                Some(_) => {}
                None => urls.push(String::new()),
            }
        }
        out.remove("url");
        if let [url] = urls.as_slice() {
            out.insert("url".to_owned(), Value::String(url.clone()));
        }
    }
    (map.canonical.to_owned(), Value::Object(out))
}

/// JavaScript's `\s`: what Gemini's `prompt.split(/\s+/)` splits at (Unicode's white space,
/// without U+0085, with U+FEFF).
fn js_space(c: char) -> bool {
    matches!(c,
        '\u{9}'..='\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{2028}'
        | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}' | '\u{feff}')
}

/// Gemini fetches a GitHub file page from `raw.githubusercontent.com` (its
/// `convertGithubUrlToRaw`): the host the rules judge is that one.
fn github_raw(url: &mut url::Url) {
    if url.host_str() != Some("github.com") || !url.path().contains("/blob/") {
        return;
    }
    let path = url.path().to_owned();
    let mut parts = path.splitn(4, '/');
    let (_, owner, repo, rest) = (parts.next(), parts.next(), parts.next(), parts.next());
    let new_path = match (owner, repo, rest.and_then(|r| r.strip_prefix("blob/"))) {
        (Some(owner), Some(repo), Some(rest)) => format!("/{owner}/{repo}/{rest}"),
        _ => path,
    };
    if url.set_host(Some("raw.githubusercontent.com")).is_ok() {
        url.set_path(&new_path);
    }
}

/// The URLs of a prompt, as Gemini CLI's web_fetch finds them: the words (split at JavaScript
/// white space) holding `://`, each parsed by a WHATWG URL parser (so `HTTPS://` is `https:`),
/// once each. A word that is not an `http(s)` URL makes Gemini refuse the call; here it makes
/// the call name no single URL.
fn urls_in(text: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for word in text.split(js_space).filter(|w| w.contains("://")) {
        match url::Url::parse(word) {
            Ok(mut url) if matches!(url.scheme(), "http" | "https") => {
                github_raw(&mut url);
                let href = url.to_string();
                if !urls.contains(&href) {
                    urls.push(href);
                }
            }
            // Not one Gemini would fetch: the call names no single URL.
            _ => urls.push(String::new()),
        }
    }
    urls
}

/// Codex's `apply_patch` as the rules read it ([`super::patch`]): a patch of one file is an
/// `Edit` (or a `Write` when it adds the file) of that `file_path`; a patch of several files stays
/// `apply_patch`, with every file in `paths` (which the built-in protections read), so that no
/// single-path rule covers it. A body the host cannot read as Codex reads it names no file and
/// says why, and the protections refuse it.
pub(super) fn apply_patch(args: &Value) -> (String, Value) {
    let body = args.get("command").and_then(Value::as_str).unwrap_or("");
    let mut out = Map::new();
    // Under `patch`, not `command`: the body is not a shell command.
    out.insert("patch".to_owned(), Value::String(body.to_owned()));
    match super::patch::read(body) {
        Ok(patch) if patch.paths.len() == 1 => {
            out.insert(
                "file_path".to_owned(),
                Value::String(patch.paths[0].clone()),
            );
            (
                if patch.adds { "Write" } else { "Edit" }.to_owned(),
                Value::Object(out),
            )
        }
        Ok(patch) => {
            out.insert(
                "paths".to_owned(),
                Value::Array(patch.paths.into_iter().map(Value::String).collect()),
            );
            ("apply_patch".to_owned(), Value::Object(out))
        }
        Err(why) => {
            out.insert("paths".to_owned(), Value::Array(Vec::new()));
            out.insert(
                crate::rules::protect::UNREADABLE_FILES.to_owned(),
                Value::String(why.to_owned()),
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
        assert_eq!(one["url"], "https://example.com/a.");
        // Gemini splits at JavaScript white space (U+FEFF too) and reads schemes in any case.
        for prompt in [
            "see HTTPS://evil.example/x",
            "https://example.com/\u{feff}https://evil.example/",
            "https://example.com/\u{2028}https://evil.example/",
        ] {
            let (_, args) = canonical(GEMINI, "web_fetch", &json!({ "prompt": prompt }));
            assert_ne!(
                args.get("url"),
                Some(&json!("https://example.com/")),
                "{prompt:?}"
            );
        }
        let (_, raw) = canonical(
            GEMINI,
            "web_fetch",
            &json!({"prompt": "read https://github.com/o/r/blob/main/x.md"}),
        );
        assert_eq!(
            raw["url"],
            "https://raw.githubusercontent.com/o/r/main/x.md"
        );
        let (_, upper) = canonical(
            GEMINI,
            "web_fetch",
            &json!({"prompt": "HTTPS://Evil.Example/x"}),
        );
        assert_eq!(upper["url"], "https://evil.example/x");
        // A `url` the model adds beside the prompt is a second URL, never the one judged alone.
        let (_, spoof) = canonical(
            GEMINI,
            "web_fetch",
            &json!({"prompt": "get https://evil.example/", "url": "https://example.com/"}),
        );
        assert!(spoof.get("url").is_none());
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
        let (tool, args) = apply_patch(&json!({"command": patch}));
        assert_eq!(tool, "apply_patch");
        assert_eq!(
            args["paths"],
            json!(["src/a.rs", "b.txt", "c", ".codex/hooks.json"])
        );
        let (tool, args) = apply_patch(
            &json!({"command": "*** Begin Patch\n*** Add File: n.txt\n+hi\n*** End Patch"}),
        );
        assert_eq!(
            (tool.as_str(), &args["file_path"]),
            ("Write", &json!("n.txt"))
        );
        let (tool, args) = apply_patch(&json!({"command": "not a patch"}));
        assert_eq!(tool, "apply_patch");
        assert_eq!(args["paths"], json!([]));
        assert!(args[crate::rules::protect::UNREADABLE_FILES].is_string());
    }
}

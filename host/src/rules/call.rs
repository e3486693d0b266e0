//! A call as a rule reads it: its tool, its working directory, and the arguments rules look at
//! (the shell command, the paths, the URL and the host a browser would reach).

use std::borrow::Cow;

use serde_json::Value;

use super::paths;

/// The call arguments a path pattern reads.
pub(crate) const PATH_FIELDS: [&str; 3] = ["file_path", "path", "notebook_path"];

/// The prefix of an MCP tool's name in rules (`mcp__<server>__<tool>`).
pub(crate) const MCP_PREFIX: &str = "mcp__";

/// Words in an MCP argument's name that say it names a place (`source`, `destDir`,
/// `file_paths`): its strings are paths whatever they look like.
const PLACE_WORDS: [&str; 12] = [
    "path",
    "file",
    "dir",
    "folder",
    "source",
    "src",
    "dest",
    "target",
    "root",
    "cwd",
    "location",
    "directory",
];

/// How deep into an MCP call's arguments paths are looked for; deeper calls are read as
/// holding a path no rule covers.
const MAX_DEPTH: usize = 32;

/// The MCP questions whose rule pattern is a glob over one argument (the resource's URI, the
/// prompt's name), by the tool part after `mcp__<server>__`.
pub(crate) const SUBJECT_TOOLS: [&str; 4] = [
    "resources/read",
    "resources/subscribe",
    "prompts/get",
    "completion/complete",
];

/// What an MCP call's path reads as when it cannot be read as a place on this host (too deep,
/// a URI of another scheme): no allow rule covers it, every reject path rule matches it.
pub(crate) const UNREADABLE: &str = "\0unreadable";

/// Whether a string in an MCP tool's arguments reads as a path by its shape.
fn looks_like_path(s: &str) -> bool {
    s.starts_with(['/', '~', '.'])
        || s.contains(['/', '\\'])
        || (s.len() >= 2 && s.as_bytes()[1] == b':' && s.as_bytes()[0].is_ascii_alphabetic())
        || uri_scheme(s).is_some()
}

/// The scheme of a string that starts as a URI does (`notes:`, `s3:`, `file:`), not a Windows
/// drive letter.
fn uri_scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once(':')?;
    let fits = scheme.len() >= 2
        && scheme.as_bytes()[0].is_ascii_alphabetic()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    fits.then_some(scheme)
}

/// Whether an argument's name says it names a place.
fn names_a_place(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    PLACE_WORDS.iter().any(|w| key.contains(w))
}

/// A path-like string as a place: a `file:` URL's path, a URI of any other scheme
/// [`UNREADABLE`] (its server decides what it names), anything else as written.
fn as_place(s: &str) -> Cow<'_, str> {
    match uri_scheme(s) {
        Some(scheme) if scheme.eq_ignore_ascii_case("file") => {
            paths::file_url(s).map_or(Cow::Borrowed(UNREADABLE), Cow::Owned)
        }
        Some(_) => Cow::Borrowed(UNREADABLE),
        None => Cow::Borrowed(s),
    }
}

/// Every path-like string of an MCP call's arguments, at any depth: strings under a name that
/// says it is a place, strings shaped like a path under any name, and object keys shaped like
/// a path.
fn mcp_paths<'a>(value: &'a Value, key: Option<&str>, depth: usize, out: &mut Vec<Cow<'a, str>>) {
    if depth > MAX_DEPTH {
        out.push(Cow::Borrowed(UNREADABLE));
        return;
    }
    match value {
        Value::String(s) if key.is_some_and(names_a_place) || looks_like_path(s) => {
            out.push(as_place(s));
        }
        Value::Array(items) => {
            for item in items {
                mcp_paths(item, key, depth + 1, out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                if looks_like_path(k) {
                    out.push(as_place(k));
                }
                mcp_paths(v, Some(k), depth + 1, out);
            }
        }
        _ => {}
    }
}

/// How the call's arguments look to a matcher.
pub struct Call<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The recorded arguments, if any.
    pub arguments: Option<&'a Value>,
    /// The asker's working directory, if given.
    pub cwd: Option<&'a str>,
    /// Arguments the tool's input schema does not declare: a path rule never allows the call.
    pub undeclared: &'a [String],
}

impl Call<'_> {
    /// The `command` argument, for a shell tool. An MCP tool has none: its `command` argument is
    /// whatever its server makes of it, never a shell command the rules could read (and a call
    /// that carried one would otherwise be judged as a command, not by its paths).
    pub fn command(&self) -> Option<&str> {
        if self.tool.starts_with(MCP_PREFIX) {
            return None;
        }
        self.arguments
            .and_then(|a| a.get("command"))
            .and_then(Value::as_str)
    }

    /// Every path argument the call carries. For an MCP tool, whose arguments are whatever its
    /// server declared, every path-like string at any depth (so an allow rule covers the call
    /// only when all of them are inside it, and an added argument the server ignores cannot
    /// stand in for the one it reads).
    pub fn paths(&self) -> Vec<Cow<'_, str>> {
        if self.tool.starts_with(MCP_PREFIX) {
            let mut out = Vec::new();
            if let Some(arguments) = self.arguments {
                mcp_paths(arguments, None, 0, &mut out);
            }
            return out;
        }
        PATH_FIELDS
            .iter()
            .filter_map(|f| {
                self.arguments
                    .and_then(|a| a.get(*f))
                    .and_then(Value::as_str)
                    .map(Cow::Borrowed)
            })
            .collect()
    }

    /// What a rule for an MCP resource, prompt or completion question matches: the resource's
    /// `uri`, the prompt's `name`, or the completion's reference (its `uri` or `name`).
    pub fn subject(&self) -> Option<&str> {
        let arguments = self.arguments?;
        fn text(v: Option<&Value>) -> Option<&str> {
            v.and_then(Value::as_str)
        }
        text(arguments.get("uri"))
            .or_else(|| text(arguments.get("name")))
            .or_else(|| {
                let reference = arguments.get("ref")?;
                text(reference.get("uri")).or_else(|| text(reference.get("name")))
            })
    }

    /// The `url` argument.
    pub fn url(&self) -> Option<&str> {
        self.arguments
            .and_then(|a| a.get("url"))
            .and_then(Value::as_str)
    }
}

/// A subject a server could read as something else than written: decoded (`%xx`), its scheme
/// lowercased, its dot segments folded; `None` when it reads the same.
pub(crate) fn subject_forms(subject: &str) -> Option<String> {
    let decoded: String = percent_encoding::percent_decode_str(subject)
        .decode_utf8_lossy()
        .into_owned();
    let (scheme, rest) = match decoded.split_once("://") {
        Some((scheme, rest)) => (
            format!("{}://", scheme.to_ascii_lowercase()),
            rest.to_owned(),
        ),
        None => (String::new(), decoded.clone()),
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    let folded = format!("{scheme}{}", parts.join("/"));
    (folded != subject).then_some(folded)
}

/// Whether `tool` is an MCP question whose rule pattern is a glob over its subject
/// ([`Call::subject`]).
pub(crate) fn subject_tool(tool: &str) -> bool {
    tool.strip_prefix(MCP_PREFIX)
        .and_then(|rest| rest.split_once("__"))
        .is_some_and(|(_, method)| SUBJECT_TOOLS.contains(&method))
}

/// The host of a URL as a WHATWG parser reads it (lowercase, IDNA to ASCII, no trailing dot),
/// with its scheme; `None` when it does not parse or has no host.
pub(crate) fn url_host(url: &str) -> Option<(String, String)> {
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = parsed.host_str()?.trim_end_matches('.');
    (!host.is_empty()).then(|| (parsed.scheme().to_owned(), host.to_owned()))
}

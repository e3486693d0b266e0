//! A call as a rule reads it: its tool, its working directory, and the arguments rules look at
//! (the shell command, the paths, the URL and the host a browser would reach).

use serde_json::Value;

/// The call arguments a path pattern reads.
pub(crate) const PATH_FIELDS: [&str; 3] = ["file_path", "path", "notebook_path"];

/// How the call's arguments look to a matcher.
pub struct Call<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The recorded arguments, if any.
    pub arguments: Option<&'a Value>,
    /// The asker's working directory, if given.
    pub cwd: Option<&'a str>,
}

impl Call<'_> {
    /// The `command` argument, for a shell tool.
    pub fn command(&self) -> Option<&str> {
        self.arguments
            .and_then(|a| a.get("command"))
            .and_then(Value::as_str)
    }

    /// Every path argument the call carries.
    pub fn paths(&self) -> Vec<&str> {
        PATH_FIELDS
            .iter()
            .filter_map(|f| {
                self.arguments
                    .and_then(|a| a.get(*f))
                    .and_then(Value::as_str)
            })
            .collect()
    }

    /// The `url` argument.
    pub fn url(&self) -> Option<&str> {
        self.arguments
            .and_then(|a| a.get("url"))
            .and_then(Value::as_str)
    }
}

/// The host of a URL as a WHATWG parser reads it (lowercase, IDNA to ASCII, no trailing dot),
/// with its scheme; `None` when it does not parse or has no host.
pub(crate) fn url_host(url: &str) -> Option<(String, String)> {
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = parsed.host_str()?.trim_end_matches('.');
    (!host.is_empty()).then(|| (parsed.scheme().to_owned(), host.to_owned()))
}

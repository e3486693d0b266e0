//! Many servers behind one endpoint (`[[mcp.server]]`): the names the agent sees
//! (`<server>__<tool>`, `<server>__<prompt>`) and which server a name or a resource's URI belongs
//! to. A name or URI that belongs to no server, or to more than one, is refused: the gateway
//! never guesses which server a request was meant for, since the question is asked under that
//! server's name.

use std::collections::HashMap;

/// What stands between a server's name and its tool's or prompt's in the names the agent sees.
/// Server names never hold it ([`super::check_server_name`]), so the first one ends the server's.
pub const SEPARATOR: &str = "__";

/// The name the agent sees for `name` (a tool or a prompt) of `server`.
pub fn outward(server: &str, name: &str) -> String {
    format!("{server}{SEPARATOR}{name}")
}

/// The server and the server's own name in a name the agent used, split at the first
/// [`SEPARATOR`]; `None` when it has none.
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.split_once(SEPARATOR)
        .filter(|(server, own)| !server.is_empty() && !own.is_empty())
}

/// The text a request naming no server behind the gateway gets.
pub fn no_such_server(name: &str) -> String {
    format!(
        "{name:?} names no MCP server behind this gateway: names here are <server>{SEPARATOR}<name>, as tools/list and prompts/list give them"
    )
}

/// The text a request for a server that could not be started gets.
pub fn server_failed(server: &str, why: &str) -> String {
    format!("the MCP server \"{server}\" could not be started: {why}")
}

/// The text a resource request gets when no server listed its URI.
pub fn no_server_for_uri(uri: &str) -> String {
    format!(
        "no MCP server behind this gateway lists the resource {uri:?} (or a template it fits): see resources/list and resources/templates/list"
    )
}

/// The text a resource request gets when two servers claim its URI.
pub fn two_servers_for_uri(uri: &str, first: &str, second: &str) -> String {
    format!(
        "the resource {uri:?} is claimed by two MCP servers behind this gateway (\"{first}\" and \"{second}\" each list it or a template it fits): the gateway cannot tell which one to ask, so it asks neither"
    )
}

/// Which server each resource the servers listed belongs to: by exact URI, and by the literal
/// start of each resource template (`notes://note/` of `notes://note/{name}`); a URI two
/// servers claim belongs to neither.
#[derive(Debug, Default)]
pub(crate) struct Resources {
    /// A listed URI (or a template's own text) to the servers that listed it.
    exact: HashMap<String, Vec<usize>>,
    /// A template's literal start and the server that listed it.
    templates: Vec<(String, usize)>,
    /// Whether every server's resources have been listed on this connection.
    pub(crate) learned: bool,
}

impl Resources {
    /// Forgets what `server` listed, before it is learnt again.
    pub(crate) fn forget(&mut self, server: usize) {
        self.exact.retain(|_, owners| {
            owners.retain(|o| *o != server);
            !owners.is_empty()
        });
        self.templates.retain(|(_, o)| *o != server);
    }

    /// Remembers that `server` listed the resource at `uri`.
    pub(crate) fn listed(&mut self, server: usize, uri: &str) {
        let owners = self.exact.entry(uri.to_owned()).or_default();
        if !owners.contains(&server) {
            owners.push(server);
        }
    }

    /// Remembers that `server` listed the resource template `template`.
    pub(crate) fn template(&mut self, server: usize, template: &str) {
        self.listed(server, template);
        let start = template.split('{').next().unwrap_or_default();
        // A template that starts with a variable fits every URI: it claims none.
        if !start.is_empty() {
            self.templates.push((start.to_owned(), server));
        }
    }

    /// The server `uri` belongs to: the one server that claims it, by listing it or by a
    /// template whose literal start it begins with. Two servers that claim it (one listing it
    /// inside another's template included) are refused, not ranked: a server could otherwise
    /// take another's URIs with a longer template, or by listing them, and answer reads the
    /// agent meant for the other. `names` gives each server's name for the refusal.
    pub(crate) fn route(
        &self,
        uri: &str,
        names: &dyn Fn(usize) -> String,
    ) -> Result<usize, String> {
        let mut owners: Vec<usize> = self
            .exact
            .get(uri)
            .into_iter()
            .flatten()
            .copied()
            .chain(
                self.templates
                    .iter()
                    .filter(|(start, _)| uri.starts_with(start.as_str()))
                    .map(|(_, o)| *o),
            )
            .collect();
        owners.sort_unstable();
        owners.dedup();
        match owners.as_slice() {
            [one] => Ok(*one),
            [first, second, ..] => Err(two_servers_for_uri(uri, &names(*first), &names(*second))),
            [] => Err(no_server_for_uri(uri)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_the_first_separator_and_nothing_else() {
        assert_eq!(split("notes__read_note"), Some(("notes", "read_note")));
        assert_eq!(split("notes__a__b"), Some(("notes", "a__b")));
        assert_eq!(split("a-b___x"), Some(("a-b", "_x")));
        for bad in ["read_note", "__x", "notes__", "", "_", "____"] {
            assert_eq!(split(bad), None, "{bad:?}");
        }
        assert_eq!(outward("fs", "move_file"), "fs__move_file");
        assert_eq!(
            split(&outward("fs", "move_file")),
            Some(("fs", "move_file"))
        );
    }

    #[test]
    fn a_uri_goes_to_the_one_server_that_claims_it_or_to_none() {
        let names = |i: usize| ["notes", "docs", "evil"][i].to_owned();
        let mut r = Resources::default();
        r.listed(0, "notes://welcome");
        r.listed(1, "docs://welcome");
        r.template(1, "docs://page/{name}");
        r.template(0, "notes://note/{name}");
        r.listed(0, "notes://note/own");
        r.template(0, "{anything}");
        assert_eq!(r.route("notes://welcome", &names), Ok(0));
        assert_eq!(r.route("docs://page/x", &names), Ok(1));
        assert_eq!(r.route("docs://page/{name}", &names), Ok(1));
        assert_eq!(r.route("notes://note/x", &names), Ok(0));
        // A server's own listing inside its own template is its.
        assert_eq!(r.route("notes://note/own", &names), Ok(0));
        assert_eq!(
            r.route("file:///etc/passwd", &names),
            Err(no_server_for_uri("file:///etc/passwd"))
        );
        // Another server cannot take a URI: not with a longer template, not by listing it, not
        // by listing what the first lists. The gateway asks neither.
        r.template(2, "notes://note/s{x}");
        assert_eq!(
            r.route("notes://note/secret", &names),
            Err(two_servers_for_uri("notes://note/secret", "notes", "evil"))
        );
        r.listed(2, "docs://page/x");
        assert_eq!(
            r.route("docs://page/x", &names),
            Err(two_servers_for_uri("docs://page/x", "docs", "evil"))
        );
        r.listed(2, "notes://welcome");
        assert_eq!(
            r.route("notes://welcome", &names),
            Err(two_servers_for_uri("notes://welcome", "notes", "evil"))
        );
        // Once it lists them no more, each is its owner's again.
        r.forget(2);
        assert_eq!(r.route("notes://welcome", &names), Ok(0));
        assert_eq!(r.route("notes://note/secret", &names), Ok(0));
        assert_eq!(r.route("docs://page/x", &names), Ok(1));
        r.forget(0);
        assert_eq!(
            r.route("notes://note/x", &names),
            Err(no_server_for_uri("notes://note/x"))
        );
    }
}

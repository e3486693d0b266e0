//! What a plugin's `allow-hosts` entry grants (a scheme, a host and a port) and where a request
//! goes, both read by the same URL parser so that they compare alike: the vocabulary the
//! deployment's entry and the host's send hook ([`super::net`]) share.

use http::uri::Scheme;

/// One `allow-hosts` entry: a scheme, a host and a port a plugin may reach.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostGrant {
    https: bool,
    host: String,
    port: u16,
}

impl HostGrant {
    /// Reads an entry: `host`, `host:port`, or `http://host[:port]` / `https://host[:port]`.
    /// Without a scheme the grant is for HTTPS; without a port, the scheme's own. Nothing else
    /// (a path, a query, credentials, a wildcard) is taken: a grant names one address.
    ///
    /// # Errors
    /// What is wrong with the entry, as a sentence.
    pub fn parse(entry: &str) -> Result<HostGrant, String> {
        if entry.is_empty() || entry.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("must be a host name, without blanks".to_owned());
        }
        if entry.contains('*') {
            return Err("wildcards are not taken: list each host".to_owned());
        }
        let full = if entry.contains("://") {
            entry.to_owned()
        } else {
            format!("https://{entry}")
        };
        let url = url::Url::parse(&full).map_err(|e| format!("not a host: {e}"))?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => return Err(format!("the scheme {other:?} is not http or https")),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials are not taken in a grant".to_owned());
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err("a grant names a host (and port), not a path".to_owned());
        }
        // `url` reads "https://host/" and "https://host" alike; a trailing `/` written in the
        // entry is a path all the same.
        if full.trim_end_matches('/') != full {
            return Err("a grant names a host (and port), not a path".to_owned());
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "no host".to_owned())?
            .to_owned();
        let port = url
            .port_or_known_default()
            .ok_or_else(|| "no port".to_owned())?;
        Ok(HostGrant { https, host, port })
    }

    /// Whether this grant is for exactly that scheme, host and port.
    pub(super) fn admits(&self, target: &Target) -> bool {
        self.https == target.https && self.host == target.host && self.port == target.port
    }
}

impl std::fmt::Display for HostGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// Where a request goes, read the way grants are, so that both compare alike (lowercase names,
/// IDNA, IPv6 in brackets, the scheme's port when none is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) https: bool,
    pub(super) host: String,
    pub(super) port: u16,
}

impl Target {
    pub(super) fn of(uri: &http::Uri) -> Result<Target, String> {
        let https = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            other => return Err(format!("the scheme {other:?} is not http or https")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| "the request names no host".to_owned())?;
        if authority.as_str().contains('@') {
            return Err("the request carries credentials in its address".to_owned());
        }
        let scheme = if https { "https" } else { "http" };
        let url = url::Url::parse(&format!("{scheme}://{authority}/"))
            .map_err(|e| format!("the request's host cannot be read: {e}"))?;
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "the request names no host".to_owned())?
            .to_owned();
        let port = url
            .port_or_known_default()
            .ok_or_else(|| "the request names no port".to_owned())?;
        Ok(Target { https, host, port })
    }

    /// The address to connect to: a bracketed IPv6 literal loses its brackets.
    pub(super) fn connect_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str) -> Target {
        Target::of(&uri.parse::<http::Uri>().unwrap()).unwrap()
    }

    #[test]
    fn grants_name_one_scheme_host_and_port() {
        let grant = |e: &str| HostGrant::parse(e).unwrap().to_string();
        assert_eq!(grant("hooks.slack.com"), "https://hooks.slack.com:443");
        assert_eq!(grant("llm.internal:8443"), "https://llm.internal:8443");
        assert_eq!(grant("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(grant("http://Example.COM"), "http://example.com:80");
        assert_eq!(grant("[::1]:9000"), "https://[::1]:9000");
        for bad in [
            "",
            "*.slack.com",
            "hooks.slack.com/api",
            "hooks.slack.com/",
            "https://hooks.slack.com/",
            "user:pw@hooks.slack.com",
            "ftp://hooks.slack.com",
            "hooks.slack.com?x=1",
            "hooks slack",
            "hooks.slack.com:99999",
            "https://",
        ] {
            assert!(HostGrant::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_request_is_admitted_only_by_its_exact_grant() {
        let grants: Vec<HostGrant> = ["hooks.slack.com", "http://127.0.0.1:8080", "[::1]:9000"]
            .iter()
            .map(|g| HostGrant::parse(g).unwrap())
            .collect();
        let admitted = |uri: &str| grants.iter().any(|g| g.admits(&target(uri)));
        for ok in [
            "https://hooks.slack.com/services/x",
            "https://HOOKS.slack.com:443/x",
            "http://127.0.0.1:8080/hook?a=1",
            "https://[::1]:9000/",
            // Read as the address they are, which is what is connected to.
            "http://2130706433:8080/",
            "http://0x7f.0.0.1:8080/",
        ] {
            assert!(admitted(ok), "{ok}");
        }
        for refused in [
            "http://hooks.slack.com/x",
            "https://hooks.slack.com:8443/x",
            "https://hooks.slack.com.evil.example/x",
            "https://evil.example/hooks.slack.com",
            "http://127.0.0.1:8081/",
            "https://127.0.0.1:8080/",
            "http://localhost:8080/",
            "https://[::1]:9001/",
            "http://[::ffff:127.0.0.1]:8080/",
        ] {
            let t = Target::of(&refused.parse::<http::Uri>().unwrap());
            assert!(
                t.map_or(true, |t| !grants.iter().any(|g| g.admits(&t))),
                "{refused}"
            );
        }
    }
}

//! Secrets a plugin may use but never holds (`[[plugin]] secrets = { token = "env:SLACK_TOKEN" }`):
//! the plugin knows a name; the host puts the value into a request header for a host the plugin
//! is granted (`{secret:token}` in the header's value, see [`super::net`]) and checks an HMAC by
//! name (`host.verify-signature`), so the value never enters the sandbox. Should it come back in
//! a response and the plugin try to pass it on, it is replaced by [`SCRUBBED`] in whatever the
//! plugin writes to the log or gives as a reason.

use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The environment variables `env:` secrets were read from: withheld from every process the
/// host starts (the agent's shell, hooks, MCP servers), since the agent this host guards could
/// otherwise read a secret with `env`.
static WITHHELD: std::sync::RwLock<std::collections::BTreeSet<String>> =
    std::sync::RwLock::new(std::collections::BTreeSet::new());

/// Removes every withheld variable from what `command` will inherit.
pub fn withhold_from(command: &mut tokio::process::Command) {
    let names = WITHHELD.read().unwrap_or_else(|p| p.into_inner());
    for name in names.iter() {
        command.env_remove(name);
    }
}

/// The most `verify-signature` checks one run of a plugin makes; past it every check fails.
pub const MAX_CHECKS: usize = 16;

/// What a secret's value becomes where the plugin writes it.
pub const SCRUBBED: &str = "[secret]";

/// Where a secret's value is read from: `env:NAME` or `file:PATH`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(SCRUBBED)
    }
}

impl Secret {
    /// Reads the value `source` names (`env:NAME`, or `file:PATH` with `PATH` resolved by
    /// `resolve`); a file's one trailing line break is not part of it.
    ///
    /// # Errors
    /// A sentence that names the source, never the value.
    pub fn load(
        source: &str,
        resolve: impl FnOnce(&str) -> std::path::PathBuf,
    ) -> Result<Secret, String> {
        let value = if let Some(var) = source.strip_prefix("env:") {
            let value = std::env::var(var).map_err(|_| format!("the environment has no {var}"))?;
            WITHHELD
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(var.to_owned());
            value
        } else if let Some(path) = source.strip_prefix("file:") {
            let path = resolve(path);
            let mut text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            text
        } else {
            // What was written may be the value itself: it is not repeated.
            return Err(
                "must be \"env:NAME\" or \"file:PATH\" (a value is never written in the deployment)"
                    .to_owned(),
            );
        };
        if value.len() < MIN_VALUE {
            // Scrubbing a value this short from every log line and reason would mangle them
            // (a one-letter value takes every such letter), and it guards nothing.
            return Err(format!(
                "{source}: the value is shorter than {MIN_VALUE} bytes, too short to be a secret"
            ));
        }
        if value.chars().any(|c| c.is_control()) {
            return Err(format!(
                "{source}: the value holds a control character, which no header can carry"
            ));
        }
        Ok(Secret(value.into()))
    }

    /// A secret with this value (for tests and embedders).
    pub fn from_value(value: &str) -> Secret {
        Secret(value.into())
    }

    pub(crate) fn value(&self) -> &str {
        &self.0
    }
}

/// The shortest value a secret may have, in bytes.
pub const MIN_VALUE: usize = 8;

/// Whether `name` can name a secret: ASCII letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `text` with every value of `secrets` replaced by [`SCRUBBED`], the longest first, so a value
/// that holds another is replaced whole.
pub(crate) fn scrub<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    text: &str,
) -> std::borrow::Cow<'_, str> {
    let mut secrets: Vec<&Secret> = secrets.into_iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.value().len()));
    let mut out = std::borrow::Cow::Borrowed(text);
    for secret in secrets {
        if out.contains(secret.value()) {
            out = std::borrow::Cow::Owned(out.replace(secret.value(), SCRUBBED));
        }
    }
    out
}

/// Whether `signature` is the HMAC-SHA256 of `message` under `secret`, compared in constant time.
pub(crate) fn verify(secret: &Secret, message: &[u8], signature: &[u8]) -> bool {
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(secret.value().as_bytes()) else {
        return false;
    };
    mac.update(message);
    mac.verify_slice(signature).is_ok()
}

/// A header value with each `{secret:NAME}` replaced by the value of `NAME` in `lookup`: `Err`
/// naming the first name it does not know.
pub(crate) fn fill<'a>(
    value: &str,
    lookup: impl Fn(&str) -> Option<&'a Secret>,
) -> Result<Option<String>, String> {
    const OPEN: &str = "{secret:";
    if !value.contains(OPEN) {
        return Ok(None);
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let end = after
            .find('}')
            .ok_or_else(|| "an unclosed {secret:".to_owned())?;
        let name = &after[..end];
        let secret = lookup(name).ok_or_else(|| format!("no secret named {name:?}"))?;
        out.push_str(secret.value());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn placeholders_are_filled_by_name_and_an_unknown_name_refuses() {
        let secrets: BTreeMap<String, Secret> =
            [("token".to_owned(), Secret::from_value("xoxb-1"))].into();
        let lookup = |n: &str| secrets.get(n);
        assert_eq!(fill("Bearer abc", lookup), Ok(None));
        assert_eq!(
            fill("Bearer {secret:token}", lookup),
            Ok(Some("Bearer xoxb-1".to_owned()))
        );
        assert_eq!(
            fill("{secret:token}:{secret:token}", lookup),
            Ok(Some("xoxb-1:xoxb-1".to_owned()))
        );
        assert_eq!(
            fill("Bearer {secret:other}", lookup),
            Err("no secret named \"other\"".to_owned())
        );
        assert_eq!(
            fill("Bearer {secret:token", lookup),
            Err("an unclosed {secret:".to_owned())
        );
    }

    #[test]
    fn values_are_scrubbed_and_never_shown_and_signatures_checked() {
        let secret = Secret::from_value("s3cr3t-value");
        assert_eq!(format!("{secret:?}"), SCRUBBED);
        assert_eq!(
            scrub([&secret], "echo: s3cr3t-value and s3cr3t-value"),
            "echo: [secret] and [secret]"
        );
        assert_eq!(scrub([&secret], "nothing here"), "nothing here");
        // A value inside another is not replaced first.
        let (short, long) = (
            Secret::from_value("abc123"),
            Secret::from_value("xoxb-abc123-zzz"),
        );
        assert_eq!(scrub([&short, &long], "t=xoxb-abc123-zzz"), "t=[secret]");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"s3cr3t-value").unwrap();
        mac.update(b"v0:1:body");
        let signature = mac.finalize().into_bytes();
        assert!(verify(&secret, b"v0:1:body", &signature));
        assert!(!verify(&secret, b"v0:1:bodx", &signature));
        assert!(!verify(&secret, b"v0:1:body", &signature[..31]));
        assert!(!verify(
            &Secret::from_value("other"),
            b"v0:1:body",
            &signature
        ));
    }

    #[test]
    fn a_variable_a_secret_is_read_from_is_withheld_from_what_the_host_starts() {
        // SAFETY: a name no other test reads, set before any thread of this test reads it.
        unsafe { std::env::set_var("APPROVAL_HOST_TEST_WITHHELD", "the-value") };
        let mut before = tokio::process::Command::new("true");
        withhold_from(&mut before);
        assert!(
            before
                .as_std()
                .get_envs()
                .all(|(k, _)| k != "APPROVAL_HOST_TEST_WITHHELD")
        );
        Secret::load("env:APPROVAL_HOST_TEST_WITHHELD", |p: &str| p.into()).unwrap();
        let mut after = tokio::process::Command::new("true");
        withhold_from(&mut after);
        assert!(
            after
                .as_std()
                .get_envs()
                .any(|(k, v)| k == "APPROVAL_HOST_TEST_WITHHELD" && v.is_none())
        );
    }

    #[test]
    fn a_source_names_where_the_value_is_and_never_is_the_value() {
        let none = |p: &str| std::path::PathBuf::from(p);
        let literal = Secret::load("xoxb-literal", none).unwrap_err();
        assert!(
            literal.contains("never written") && !literal.contains("xoxb"),
            "{literal}"
        );
        assert_eq!(
            Secret::load("env:APPROVAL_HOST_NO_SUCH_VAR_FOR_TEST", none).unwrap_err(),
            "the environment has no APPROVAL_HOST_NO_SUCH_VAR_FOR_TEST"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "from-a-file\n").unwrap();
        let loaded = Secret::load("file:key", |p| dir.path().join(p)).unwrap();
        assert_eq!(loaded.value(), "from-a-file");
        std::fs::write(dir.path().join("bad"), "a\u{7}b").unwrap();
        assert!(Secret::load("file:bad", |p| dir.path().join(p)).is_err());
        std::fs::write(dir.path().join("short"), "k\n").unwrap();
        assert_eq!(
            Secret::load("file:short", |p| dir.path().join(p)).unwrap_err(),
            "file:short: the value is shorter than 8 bytes, too short to be a secret"
        );
        assert!(valid_name("slack_token-2"));
        assert!(!valid_name("a b") && !valid_name("") && !valid_name("a:b"));
    }
}

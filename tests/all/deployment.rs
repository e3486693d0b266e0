//! The deployment file: every refusal names the file, the plugin and the field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use approval_host::config::{ConfigError, Deployment, Isolation, Role};
use approval_host::{Policy, bundled};

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("deploy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn refusal(text: &str) -> (PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.wasm"), bundled::REJECT_ALL).unwrap();
    let path = write(dir.path(), text);
    let err = Deployment::load(&path).unwrap_err();
    (path.clone(), err.to_string())
}

#[test]
fn a_full_entry_loads_with_paths_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    std::fs::write(dir.path().join("plugins/allow.wasm"), bundled::ALLOW_TOOLS).unwrap();
    let path = write(
        dir.path(),
        r#"
[approval]
policy = "never"

[[plugin]]
name = "allow-tools"
path = "plugins/allow.wasm"
role = "gate"
timeout_ms = 250
memory_mb = 32
isolation = "per-decision"
[plugin.config]
tools = "read,grep"
[plugin.files]
"/rules" = "rules"

[[plugin]]
name = "second"
path = "plugins/allow.wasm"
role = "answerer"
"#,
    );
    let d = Deployment::load(&path).unwrap();
    assert_eq!(d.default_policy, Policy::Never);
    assert_eq!(d.plugins.len(), 2);
    let p = &d.plugins[0];
    assert_eq!(p.name, "allow-tools");
    assert_eq!(p.path, dir.path().join("plugins/allow.wasm"));
    assert_eq!(p.role, Role::Gate);
    assert_eq!(p.timeout, Duration::from_millis(250));
    assert_eq!(p.memory_bytes, 32 << 20);
    assert_eq!(p.isolation, Isolation::PerDecision);
    assert_eq!(p.config.get("tools").map(String::as_str), Some("read,grep"));
    assert_eq!(p.files, [("/rules".to_owned(), dir.path().join("rules"))]);
    let q = &d.plugins[1];
    assert_eq!(q.timeout, Duration::from_millis(1000));
    assert_eq!(q.memory_bytes, 64 << 20);
    assert_eq!(q.isolation, Isolation::Reuse);
}

#[test]
fn omitted_policy_is_ask() {
    let dir = tempfile::tempdir().unwrap();
    let d = Deployment::load(&write(dir.path(), "")).unwrap();
    assert_eq!(d.default_policy, Policy::Ask);
    assert!(d.plugins.is_empty());
}

#[test]
fn refusals_name_the_file_the_plugin_and_the_field() {
    let entry = "[[plugin]]\nname = \"p\"\npath = \"p.wasm\"\nrole = \"gate\"\n";
    // (file text, where, what): every refusal names the file, the line and column of the key
    // (or table) it is about, the plugin, and the field.
    let cases = [
        (
            "[approval]\npolicy = \"sometimes\"\n".to_owned(),
            ":2:1",
            "[approval] policy = \"sometimes\": approval policy must be one of \"ask\" or \"never\"",
        ),
        (
            "[approval]\npolcy = \"ask\"\n".to_owned(),
            ":2:1",
            "[approval]: unknown key \"polcy\" (expected policy)",
        ),
        (
            "[mcp]\nhide-rejected-tools = \"yes\"\n".to_owned(),
            ":2:1",
            "[mcp]: hide-rejected-tools must be true or false, not string",
        ),
        (
            "[mcp]\nhide-tools = true\n".to_owned(),
            ":2:1",
            "[mcp]: unknown key \"hide-tools\" (expected hide-rejected-tools, server, pin, server-requests, allowed-origins, allowed-hosts or session-idle-s)",
        ),
        (
            "[mcp]\npin = \"first_use\"\n".to_owned(),
            ":2:1",
            "[mcp]: pin is one of \"first-use\", \"ask\", \"off\", not \"first_use\"",
        ),
        (
            "[approvals]\n".to_owned(),
            ":1:2",
            "top level: unknown key \"approvals\" (expected [approval], [sandbox], [audit], [store], [rules], [claude-code], [[plugin]], [[answerer]], [[rule]], [[hook]], [[token]], [limits], [telemetry] or [mcp])",
        ),
        (
            "[limits]\nconnections = 0\n".to_owned(),
            ":2:1",
            "[limits]: connections = 0: must be between 1 and 1048576",
        ),
        (
            "[limits]\nauthenticate_within_s = \"10\"\n".to_owned(),
            ":2:1",
            "[limits]: authenticate_within_s must be an integer, not string",
        ),
        (
            "[limits]\nconnection = 10\n".to_owned(),
            ":2:1",
            "[limits]: unknown key \"connection\" (expected connections, connections_per_address,",
        ),
        (
            format!("{entry}colour = \"red\"\n"),
            ":5:1",
            "plugin \"p\": unknown key \"colour\"",
        ),
        (
            entry.replace("p.wasm", "missing.wasm"),
            ":3:1",
            "plugin \"p\": path \"",
        ),
        (
            format!("{entry}{entry}"),
            ":6:1",
            "plugin #2: name = \"p\" is used by an earlier plugin; names must be unique",
        ),
        (
            entry.replace("\"gate\"", "\"boss\""),
            ":4:1",
            "plugin \"p\": role = \"boss\": must be \"gate\" or \"answerer\"",
        ),
        (
            format!("{entry}isolation = \"shared\"\n"),
            ":5:1",
            "plugin \"p\": isolation = \"shared\": must be \"reuse\" or \"per-decision\"",
        ),
        (
            format!("{entry}timeout_ms = 0\n"),
            ":5:1",
            "plugin \"p\": timeout_ms = 0: must be between 1 and 600000",
        ),
        (
            format!("{entry}memory_mb = \"lots\"\n"),
            ":5:1",
            "plugin \"p\": memory_mb must be an integer, not string",
        ),
        (
            format!("{entry}sha256 = \"abc\"\n"),
            ":5:1",
            "plugin \"p\": sha256 = \"abc\": must be 64 hexadecimal digits",
        ),
        (
            format!("{entry}[plugin.config]\nn = 3\n"),
            ":6:1",
            "plugin \"p\": config.n must be a string, not integer",
        ),
        (
            format!("{entry}[plugin.files]\n\"/r\" = \"nowhere\"\n"),
            ":6:1",
            "plugin \"p\": files.\"/r\" = \"",
        ),
        (
            format!("{entry}[plugin.files]\n\"r\" = \".\"\n"),
            ":6:1",
            "plugin \"p\": files.\"r\": the guest path must be absolute",
        ),
        (
            "[[plugin]]\npath = \"p.wasm\"\n".to_owned(),
            ":1:1",
            "plugin #1: name is missing",
        ),
        (
            "[[plugin]]\nname = \"p\"\npath = \"p.wasm\"\n".to_owned(),
            ":1:1",
            "plugin \"p\": role is missing (\"gate\" or \"answerer\")",
        ),
    ];
    for (text, at, expected) in cases {
        let (path, message) = refusal(&text);
        let prefix = format!("{}{at}: ", path.display());
        assert!(
            message.starts_with(&prefix),
            "{message} (expected {prefix:?})"
        );
        assert!(
            message[prefix.len()..].starts_with(expected),
            "expected {expected:?}, got {message:?}"
        );
    }
}

#[test]
fn invalid_toml_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "[approval\n");
    let err = Deployment::load(&path).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }));
    assert_eq!(
        err.to_string(),
        format!("{}:1:10: unclosed table, expected `]`", path.display())
    );
}

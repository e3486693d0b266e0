//! A widely used MCP server from npm behind the gateway (issue 39): the official filesystem
//! server (`@modelcontextprotocol/server-filesystem`, installed by `.ci/mcp-servers`), with path
//! rules on `read_multiple_files` (a list of paths) and `move_file` (a source and a
//! destination). A call is allowed only when every path it names is inside the rule, however
//! the paths are written (`..`, symlinks, an extra argument the server ignores); everything
//! else is refused before the server sees it, and the files show it.

use std::path::{Path, PathBuf};

use approval_host::tools::texts;
use serde_json::json;

use crate::mcp_gateway::{BIN, Client, Setup, ok, refused};

/// Where `.ci/mcp-servers` installed the server.
fn filesystem_server() -> PathBuf {
    let dir = std::env::var("APPROVAL_HOST_MCP_SERVERS").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-servers"),
        PathBuf::from,
    );
    let entry =
        dir.join("filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        entry.exists(),
        "{} is missing: run .ci/mcp-servers (it installs the MCP servers these tests put behind the gateway)",
        entry.display()
    );
    entry
}

const RULES: &str = r#"
[[rule]]
rule = "mcp__fs__read_multiple_files(./docs/**)"
effect = "allow"

[[rule]]
rule = "mcp__fs__move_file(./docs/**)"
effect = "allow"
"#;

#[test]
fn the_npm_filesystem_server_moves_and_reads_only_where_every_path_of_the_call_is_inside_the_rule()
{
    let setup = Setup::new(RULES);
    let project = tempfile::tempdir().unwrap();
    let root = project.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("docs/a.md"), "alpha").unwrap();
    std::fs::write(root.join("docs/b.md"), "beta").unwrap();
    std::fs::write(root.join("secret.txt"), "the secret").unwrap();
    // A link inside docs to a file outside it.
    std::os::unix::fs::symlink("../secret.txt", root.join("docs/link.md")).unwrap();

    let mut args = vec![
        "stdio".to_owned(),
        BIN.to_owned(),
        "--state-dir".to_owned(),
        setup.state().display().to_string(),
        "mcp".to_owned(),
        "--config".to_owned(),
        setup.path("deploy.toml").display().to_string(),
        "--name".to_owned(),
        "fs".to_owned(),
        "--session".to_owned(),
        "fs1".to_owned(),
        "--no-watch".to_owned(),
        "--".to_owned(),
        "node".to_owned(),
    ];
    args.push(filesystem_server().display().to_string());
    args.push(root.display().to_string());
    let mut client = Client::start_in(&args, &setup.path("events.jsonl"), &root, None);

    let listed = client.op(json!({"op": "list_tools"}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"read_multiple_files") && names.contains(&"move_file"),
        "{listed}"
    );

    let unavailable =
        |tool: &str| refused(&texts::approval_unavailable(&format!("mcp__fs__{tool}")));
    // Every path inside docs: read, as the server answers.
    let read = client.call(
        "read_multiple_files",
        json!({"paths": ["./docs/a.md", "docs/b.md"]}),
    );
    assert_eq!(read["is_error"], false, "{read}");
    let text = read["text"].as_str().unwrap();
    assert!(text.contains("alpha") && text.contains("beta"), "{read}");

    // One path outside, however it is written: refused, and nothing of the secret comes back.
    for paths in [
        json!(["./docs/a.md", "./secret.txt"]),
        json!(["./docs/../secret.txt"]),
        json!(["./docs/link.md"]),
        json!([format!("{}/secret.txt", root.display())]),
        json!(["./docs/a.md", "/etc/passwd"]),
        json!(["docs/a.md", "~/.ssh/id_rsa"]),
        json!([format!("file://{}/secret.txt", root.display())]),
    ] {
        assert_eq!(
            client.call("read_multiple_files", json!({"paths": paths})),
            unavailable("read_multiple_files"),
            "{paths}"
        );
    }
    // An argument the tool's schema does not declare leaves the call to a person.
    assert_eq!(
        client.call(
            "read_multiple_files",
            json!({"paths": ["./docs/a.md"], "followSymlinks": true})
        ),
        unavailable("read_multiple_files")
    );
    // An argument the server ignores does not stand in for the one it reads.
    assert_eq!(
        client.call(
            "read_multiple_files",
            json!({"paths": ["./secret.txt"], "path": "./docs/a.md"})
        ),
        unavailable("read_multiple_files")
    );

    // A move inside docs goes through.
    assert_eq!(
        client.call(
            "move_file",
            json!({"source": "./docs/a.md", "destination": "./docs/c.md"})
        ),
        ok("Successfully moved ./docs/a.md to ./docs/c.md")
    );
    // A move with either end outside is refused.
    for (source, destination) in [
        ("./docs/b.md", "./outside/b.md"),
        ("./secret.txt", "./docs/s.md"),
        ("./docs/b.md", "./docs/../b.md"),
        ("./docs/link.md", "./docs/l2.md"),
        ("./docs/b.md", "/tmp/b.md"),
    ] {
        assert_eq!(
            client.call(
                "move_file",
                json!({"source": source, "destination": destination})
            ),
            unavailable("move_file"),
            "{source} -> {destination}"
        );
    }
    assert_eq!(
        client.call(
            "move_file",
            json!({"source": "./secret.txt", "destination": "./docs/s.md", "path": "./docs/x.md"})
        ),
        unavailable("move_file")
    );
    client.quit();

    // The files show what ran: the one move, nothing else.
    assert!(!root.join("docs/a.md").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("docs/c.md")).unwrap(),
        "alpha"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("docs/b.md")).unwrap(),
        "beta"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("secret.txt")).unwrap(),
        "the secret"
    );
    assert!(!root.join("outside/b.md").exists() && !root.join("docs/s.md").exists());
    let decided = setup.decisions("fs1");
    let allowed: Vec<&str> = decided
        .iter()
        .filter(|(o, _)| o == "allowed-once")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(
        allowed,
        ["mcp__fs__read_multiple_files", "mcp__fs__move_file"]
    );
    assert_eq!(decided.len(), 2 + 9 + 6);
}

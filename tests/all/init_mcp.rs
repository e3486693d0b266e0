//! `approval-host init <cli> --mcp` (issue 39, point 7): each stdio MCP server an agent CLI's
//! configuration starts is put behind the gateway in one command, with a dry run that writes
//! nothing, a second run that changes nothing, HTTP servers and unusable names left and said
//! so, and `--undo` giving back every entry as it was. The rewritten entry is then started as
//! the CLI starts it, and its calls are asked.

use serde_json::{Value, json};

use crate::init::{in_project, ok as ok_out};
use crate::mcp_gateway::{Client, ok, script};

#[test]
fn claude_code_s_servers_go_behind_the_gateway_their_calls_are_asked_and_undo_gives_them_back() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let p = project.path();
    let events = p.join("events.jsonl");
    let original = json!({"mcpServers": {
        "notes": {"command": "python3", "args": [script("notes_server.py")],
                  "env": {"NOTES_EVENTS": events.display().to_string()}},
        "remote": {"type": "http", "url": "https://mcp.example/mcp"},
        "my.server": {"command": "srv"},
    }});
    let config = p.join(".mcp.json");
    let text = serde_json::to_string_pretty(&original).unwrap();
    std::fs::write(&config, &text).unwrap();

    // A dry run says what would happen and writes nothing.
    let out = ok_out(&in_project(
        p,
        home.path(),
        &[
            "init",
            "claude-code",
            "--project",
            ".",
            "--mcp",
            "--dry-run",
        ],
    ));
    assert!(
        out.contains("gateway    notes: its calls are asked as mcp__notes__<tool>\n"),
        "{out}"
    );
    assert!(out.contains(&format!("left       remote: {}\n", "reached over HTTP: put `approval-host mcp --listen … --upstream URL` in front of it and point the entry at that")), "{out}");
    assert!(
        out.contains("left       my.server: its name cannot stand in a rule"),
        "{out}"
    );
    assert!(out.contains("would be updated ./.mcp.json"), "{out}");
    assert!(out.ends_with("dry run: nothing was written\n"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
    assert!(!p.join(".approval-host").exists());

    let out = ok_out(&in_project(
        p,
        home.path(),
        &["init", "claude-code", "--project", ".", "--mcp"],
    ));
    assert!(out.contains("updated    ./.mcp.json"), "{out}");
    assert!(
        out.contains("created    ./.approval-host/claude-code.toml"),
        "{out}"
    );
    let rewritten: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let entry = &rewritten["mcpServers"]["notes"];
    let deployment = p
        .canonicalize()
        .unwrap()
        .join(".approval-host/claude-code.toml");
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).unwrap();
    assert_eq!(
        args[2..],
        [
            "mcp".to_owned(),
            "--config".to_owned(),
            std::path::absolute(p.join(".approval-host/claude-code.toml"))
                .unwrap()
                .display()
                .to_string(),
            "--name".to_owned(),
            "notes".to_owned(),
            "--".to_owned(),
            "python3".to_owned(),
            script("notes_server.py"),
        ]
    );
    assert_eq!(args[0], "--project-state");
    assert_eq!(entry["env"], original["mcpServers"]["notes"]["env"]);
    assert_eq!(
        rewritten["mcpServers"]["remote"],
        original["mcpServers"]["remote"]
    );
    // A second run changes nothing.
    let again = ok_out(&in_project(
        p,
        home.path(),
        &["init", "claude-code", "--project", ".", "--mcp"],
    ));
    assert!(
        again.contains("unchanged  notes: already behind the gateway"),
        "{again}"
    );
    assert!(again.contains("nothing to do"), "{again}");

    // Started as Claude Code starts it: its calls are asked under the deployment's rules.
    let mut rules = std::fs::read_to_string(&deployment).unwrap();
    rules.push_str("\n[[rule]]\nrule = \"mcp__notes__read_note\"\neffect = \"allow\"\n");
    std::fs::write(&deployment, rules).unwrap();
    let mut command = vec![
        "stdio".to_owned(),
        entry["command"].as_str().unwrap().to_owned(),
    ];
    command.extend(args);
    // HOME as the CLI's: the gateway's --project-state keeps the project's state under it.
    let mut client = Client::start_in(&command, &events, p, Some(home.path()));
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"}))["is_error"],
        true
    );
    client.quit();
    let reached: Vec<String> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reached, ["read_note"]);

    // Undone: every entry as it was.
    let out = ok_out(&in_project(
        p,
        home.path(),
        &["init", "claude-code", "--project", ".", "--mcp", "--undo"],
    ));
    assert!(out.contains("taken out  notes: started as before"), "{out}");
    let back: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(back, original);
}

#[test]
fn codex_gemini_and_copilot_configurations_are_rewritten_and_undone_the_same_way() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let p = project.path();
    // Codex: a TOML table per server, comments kept.
    let codex = p.join(".codex/config.toml");
    std::fs::create_dir_all(codex.parent().unwrap()).unwrap();
    let toml_text =
        "# servers\n[mcp_servers.notes]\ncommand = \"python3\"\nargs = [\"notes.py\"]\n";
    std::fs::write(&codex, toml_text).unwrap();
    ok_out(&in_project(
        p,
        home.path(),
        &["init", "codex", "--project", ".", "--mcp"],
    ));
    let rewritten = std::fs::read_to_string(&codex).unwrap();
    assert!(rewritten.starts_with("# servers\n"), "{rewritten}");
    let table: toml::Table = rewritten.parse().unwrap();
    assert_eq!(
        table["mcp_servers"]["notes"]["args"][2].as_str(),
        Some("mcp")
    );
    ok_out(&in_project(
        p,
        home.path(),
        &["init", "codex", "--project", ".", "--mcp", "--undo"],
    ));
    let back: toml::Table = std::fs::read_to_string(&codex).unwrap().parse().unwrap();
    assert_eq!(back, toml_text.parse::<toml::Table>().unwrap());

    // Gemini CLI (the project's settings) and Copilot CLI (the user's mcp-config.json).
    for (cli, file, target) in [
        (
            "gemini",
            p.join(".gemini/settings.json"),
            vec!["--project", "."],
        ),
        (
            "copilot",
            home.path().join(".copilot/mcp-config.json"),
            vec!["--user"],
        ),
    ] {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let original = json!({"theme": "x", "mcpServers": {"notes": {"command": "python3", "args": ["notes.py"], "tools": ["*"]}}});
        std::fs::write(&file, original.to_string()).unwrap();
        let mut args = vec!["init", cli];
        args.extend(&target);
        args.push("--mcp");
        ok_out(&in_project(p, home.path(), &args));
        let now: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(now["mcpServers"]["notes"]["args"][2], "mcp", "{cli}: {now}");
        assert_eq!(now["mcpServers"]["notes"]["tools"], json!(["*"]), "{cli}");
        assert_eq!(now["theme"], "x");
        args.push("--undo");
        ok_out(&in_project(p, home.path(), &args));
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(back, original, "{cli}");
    }
    // No configuration: said so, nothing written.
    let empty = tempfile::tempdir().unwrap();
    let out = ok_out(&in_project(
        empty.path(),
        home.path(),
        &["init", "gemini", "--project", ".", "--mcp"],
    ));
    assert!(out.starts_with("no MCP servers: "), "{out}");
    assert!(!empty.path().join(".gemini").exists());
}

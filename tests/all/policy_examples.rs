//! Rules and plugins carry their own examples (issue 29, part 4). A `[[rule]]` whose examples
//! do not hold refuses the deployment, naming the file, the line, the rule and the example;
//! `rules add --example/--not-example` refuses the rule and writes nothing. A `[[plugin]]` with
//! `cases = "…"` serves only a version that passes them: at start, and at a reload (which keeps
//! the old version otherwise).

use std::path::Path;
use std::process::Command;

use approval_host::Deployment;

fn load(dir: &Path, text: &str) -> Result<Deployment, String> {
    let path = dir.join("deploy.toml");
    std::fs::write(&path, text).unwrap();
    Deployment::load(&path).map_err(|e| e.to_string())
}

#[test]
fn a_deployment_rule_whose_examples_do_not_hold_is_refused_with_the_file_line_rule_and_example() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deploy.toml").display().to_string();
    // Examples that hold: a command prefix, a reject rule seeing through an assignment, a path
    // rule read from the deployment's directory, a domain rule against a URL trick.
    let good = load(
        dir.path(),
        "[[rule]]\nrule = \"Bash(npm run test:*)\"\n\
         examples.match = [\"npm run test\", \"npm run test -- --watch=false\"]\n\
         examples.not-match = [\"npm run test; rm -rf ~\", \"npm run test >&1out.txt\", \"npm run build\"]\n\n\
         [[rule]]\nrule = \"Bash(git push:*)\"\neffect = \"reject\"\n\
         examples.match = [\"CI=true git push origin main\", \"git -C . push\"]\n\
         examples.not-match = [\"git status\"]\n\n\
         [[rule]]\nrule = \"Read(./src/**)\"\n\
         examples.match = [\"src/main.rs\"]\n\
         examples.not-match = [\"../secrets\", \"/etc/passwd\"]\n\n\
         [[rule]]\nrule = \"WebFetch(domain:example.com)\"\n\
         examples.match = [\"https://example.com/docs\"]\n\
         examples.not-match = [\"https://evil.com\\\\@example.com/\"]\n",
    )
    .unwrap();
    assert_eq!(good.rules.rules.len(), 4);
    assert_eq!(good.rules.rules[0].examples.matching.len(), 2);

    let cases = [
        (
            "[[rule]]\nrule = \"Bash(npm run test:*)\"\nexamples.match = [\"npm test\"]\n",
            "deploy.toml:1:1: [[rule]] #1: \"Bash(npm run test:*)\" should allow \"npm test\" (examples.match) and does not",
        ),
        (
            "[[rule]]\nrule = \"Bash(ls:*)\"\nexamples.not-match = [\"ls -la\"]\n",
            "deploy.toml:1:1: [[rule]] #1: \"Bash(ls:*)\" should not allow \"ls -la\" (examples.not-match) and does",
        ),
        (
            "[[rule]]\nrule = \"Bash(git push:*)\"\neffect = \"reject\"\nexamples.match = [\"git status\"]\n",
            "deploy.toml:1:1: [[rule]] #1: \"Bash(git push:*)\" should reject \"git status\" (examples.match) and does not",
        ),
        (
            "[[rule]]\nrule = \"mcp__*\"\nexamples.match = [\"x\"]\n",
            "deploy.toml:3:1: [[rule]] #1: examples need a rule for one tool, not the tool glob of \"mcp__*\"",
        ),
        (
            "[[rule]]\nrule = \"Bash(ls)\"\nexamples.matches = [\"ls\"]\n",
            "deploy.toml:1:1: [[rule]] #1: unknown key \"examples.matches\" (expected match, not-match or cwd)",
        ),
        (
            "[[rule]]\nrule = \"Bash(ls)\"\nexamples.cwd = \"relative\"\n",
            "deploy.toml:3:10: [[rule]] #1: examples.cwd must be an absolute path",
        ),
    ];
    for (text, want) in cases {
        let err = load(dir.path(), text).unwrap_err();
        let at = err.rfind("deploy.toml").unwrap();
        assert!(
            err.starts_with(&path[..path.len() - "deploy.toml".len()]),
            "{err}"
        );
        assert_eq!(&err[at..], want);
    }
}

#[test]
fn rules_add_refuses_a_rule_whose_examples_do_not_hold_and_writes_nothing() {
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(state.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        "rules",
        "add",
        "Bash(git push:*)",
        "--effect",
        "reject",
        "--example",
        "git push --force",
        "--not-example",
        "sudo git push",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "approval-host: \"Bash(git push:*)\" should not reject \"sudo git push\" (examples.not-match) and does"
    );
    let sessions = state.path().join("sessions");
    assert!(
        !sessions.exists() || std::fs::read_dir(&sessions).unwrap().next().is_none(),
        "a refused rule wrote nothing"
    );
    let out = run(&[
        "rules",
        "add",
        "Bash(git push:*)",
        "--effect",
        "reject",
        "--example",
        "sudo git push",
        "--not-example",
        "git pull",
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// A deployment with one gate, `gate.wasm` (allow-tools granting `read`), and its cases.
fn gate_with_cases(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("gate.wasm"), approval_host::bundled::ALLOW_TOOLS).unwrap();
    std::fs::write(
        dir.join("cases.json"),
        r#"{"cases": [
            {"name": "reads are allowed", "tool": "read", "expect": "allow-once"},
            {"name": "bash goes on", "tool": "bash", "expect": "next"}
        ]}"#,
    )
    .unwrap();
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        "[[plugin]]\nname = \"gate\"\npath = \"gate.wasm\"\nrole = \"gate\"\ncases = \"cases.json\"\n\
         [plugin.config]\ntools = \"read\"\n",
    )
    .unwrap();
    config
}

fn options(dir: &Path, config: std::path::PathBuf) -> approval_host::serve::ServeOptions {
    approval_host::serve::ServeOptions {
        config,
        state_dir: dir.join("state"),
        quarantine: approval_host::plugin::QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_version_that_fails_its_cases_never_serves_and_a_reload_keeps_the_old_one() {
    use approval_host::{ApprovalRequest, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let config = gate_with_cases(dir.path());
    let server = approval_host::serve::Server::start(options(dir.path(), config.clone()))
        .await
        .unwrap();
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let read = || ApprovalRequest::new(&agent, "read");
    assert_eq!(
        service.ask(read()).await.unwrap().outcome,
        Outcome::AllowedOnce
    );

    // A new version of the entry that no longer grants reads: its cases fail, the old version
    // serves.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("tools = \"read\"", "tools = \"bash\""),
    )
    .unwrap();
    let report = server.reload().await.unwrap();
    let cases = dir.path().join("cases.json");
    assert_eq!(
        report.failed,
        [(
            "gate".to_owned(),
            format!(
                "plugin \"gate\": cases {}: 2 of 2 failed: \"reads are allowed\" expects allow-once, got next; \"bash goes on\" expects next, got allow-once",
                cases.display()
            )
        )]
    );
    assert!(report.swapped.is_empty());
    assert_eq!(
        service.ask(read()).await.unwrap().outcome,
        Outcome::AllowedOnce
    );
    service.end_turn("s1").await.unwrap();
    drop(server);

    // Started with the failing version: the server does not start, and says why.
    let err = approval_host::serve::Server::start(options(dir.path(), config))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with(&format!(
            "plugin \"gate\": cases {}: 2 of 2 failed: \"reads are allowed\" expects allow-once, got next; \"bash goes on\" expects next, got allow-once",
            cases.display()
        )),
        "{err}"
    );
}

//! `approval-host componentize`: a WASI preview1 core module with an embedded component type
//! becomes a plugin that loads and decides; what cannot become one is refused with the reason,
//! and no output file is left behind. `approval-host conform` runs an author's cases.

use std::process::Command;

use approval_host::plugin::componentize::componentize;
use approval_host::{ApprovalRequest, Outcome, PluginHost, PluginSpec, Position, Role, Scope};

use crate::fixtures;
use crate::support::Host;

#[tokio::test]
async fn a_core_module_becomes_a_plugin_that_decides() {
    let component = componentize(&fixtures::core_answerer(1)).unwrap();
    let plugin = PluginHost::new()
        .unwrap()
        .load_bytes(
            &PluginSpec::new("core", "core.wasm", Role::Gate),
            &component,
        )
        .unwrap();
    let host = Host::new();
    let _reg = host
        .service
        .register("core", Scope::Global, Position::Front, plugin.listener());
    let agent = host.service.agent("s", "a").await.unwrap();
    host.service.start_turn("s").await.unwrap();
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
}

fn run(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn the_command_writes_a_checked_component_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let core = fixtures::write(dir.path(), "gate.core.wasm", &fixtures::core_answerer(0));
    let out = dir.path().join("gate.wasm");
    let (code, stdout) = run(&[
        "componentize".as_ref(),
        core.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.starts_with(&format!(
            "{}: fits approval:plugin/answerer@0.1.0\n",
            out.display()
        )),
        "{stdout}"
    );

    // Already a component, or not WebAssembly: refused, nothing written.
    let cases = [
        (
            "component.wasm",
            fixtures::trap(),
            "is already a component (nothing to do)",
        ),
        (
            "junk.wasm",
            b"not wasm".to_vec(),
            "is not a WebAssembly module",
        ),
    ];
    for (name, bytes, why) in cases {
        let input = fixtures::write(dir.path(), name, &bytes);
        let out = dir.path().join(format!("{name}.out"));
        let (code, stdout) = run(&[
            "componentize".as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_eq!(code, Some(1));
        assert_eq!(stdout, format!("{}: {why}\n", input.display()));
        assert!(!out.exists());
    }
}

#[test]
fn conform_prints_each_case_and_fails_on_a_wrong_answer() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.json");
    std::fs::write(
        &cases,
        r#"{"cases": [
            {"name": "listed", "gate": "allow-tools", "config": {"tools": "read"}, "tool": "read", "expect": "allow-once"},
            {"name": "other gate", "gate": "deny-commands", "tool": "read", "expect": "reject"},
            {"name": "wrong on purpose", "config": {"tools": "read"}, "tool": "bash", "expect": "allow-once"}
        ]}"#,
    )
    .unwrap();
    let plugin = std::path::Path::new(approval_host::bundled::ALLOW_TOOLS_PATH);
    let state = dir.path().join("state");
    let (code, stdout) = run(&[
        "--state-dir".as_ref(),
        state.as_os_str(),
        "conform".as_ref(),
        plugin.as_os_str(),
        "--name".as_ref(),
        "allow-tools".as_ref(),
        "--cases".as_ref(),
        cases.as_os_str(),
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stdout,
        "ok    listed: allow-once\nFAIL  wrong on purpose: answered next, expected allow-once\nallow-tools: 1 passed, 1 failed\n"
    );
    std::fs::write(
        &cases,
        r#"{"cases": [{"name": "bad", "tool": "read", "expect": "maybe"}]}"#,
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(&state)
        .arg("conform")
        .arg(plugin)
        .arg("--cases")
        .arg(&cases)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "approval-host: {}: case \"bad\": expect \"maybe\" is not one of allow-once, reject, cancel, next, refused or failed (<kind>)\n",
            cases.display()
        )
    );
}

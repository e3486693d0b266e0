//! `approval-host new`: from nothing to a loaded, tested plugin in a few commands. Each
//! language's skeleton is written, built with its own build script, and passes its own sample
//! conformance cases through `approval-host conform`.

use std::path::Path;
use std::process::Command;

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
}

fn new(dir: &Path, name: &str, lang: &str, role: &str) -> std::process::Output {
    host()
        .current_dir(dir)
        .args(["new", name, "--lang", lang, "--role", role])
        .output()
        .unwrap()
}

#[test]
fn new_writes_each_language_s_skeleton_and_refuses_what_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let expected: [(&str, &[&str]); 4] = [
        ("rust", &["Cargo.toml", "src/lib.rs", "build.sh"]),
        ("python", &["app.py", "build.sh"]),
        ("js", &["p-js.js", "package.json", "build.sh"]),
        ("c", &["p_c.c", "build.sh"]),
    ];
    for (lang, own) in expected {
        let name = format!("p-{lang}");
        let out = new(dir.path(), &name, lang, "gate");
        assert!(out.status.success(), "{out:?}");
        let mut want: Vec<String> = ["wit/approval.wit", "deployment.toml", "cases.json"]
            .iter()
            .chain(own)
            .map(|f| format!("{name}/{f}"))
            .collect();
        want.push(format!(
            "next: approval-host test {name}, then approval-host ask --session s1 --agent a1 --tool bash --config {name}/deployment.toml"
        ));
        let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(printed, want);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(&name).join("wit/approval.wit")).unwrap(),
            include_str!("../../wit/approval-0.2.wit")
        );
    }

    let refused = [
        (
            new(dir.path(), "p-c", "c", "gate"),
            "approval-host: p-c already exists; `new` writes only into a new directory\n",
        ),
        (
            new(dir.path(), "Bad_Name", "c", "gate"),
            "approval-host: plugin name \"Bad_Name\": use lowercase letters, digits and '-', starting with a letter (at most 64)\n",
        ),
    ];
    for (out, stderr) in refused {
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(String::from_utf8_lossy(&out.stderr), stderr);
    }
    // Nothing half-made is left behind.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["p-c", "p-js", "p-python", "p-rust"]);
}

/// Three commands, as the README promises: `new`, `test` (build, check, conformance cases),
/// then one `ask` through the sample deployment. Returns the conformance summary line and the
/// outcome.
fn build_and_conform(root: &Path, name: &str, lang: &str, role: &str) -> (String, String) {
    let out = new(root, name, lang, role);
    assert!(out.status.success(), "{out:?}");
    let dir = root.join(name);
    let tested = host()
        .current_dir(root)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["test", name])
        // A Rust skeleton builds where host/build.rs built the guests: its dependencies (same
        // versions, features and profile) are there already.
        .env("CARGO_TARGET_DIR", env!("APPROVAL_HOST_GUESTS_TARGET"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&tested.stdout).into_owned();
    assert!(
        tested.status.success(),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&tested.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!("ok    build: {name}/{name}.wasm (")),
        "{stdout}"
    );
    assert!(
        lines[1].ends_with("fits approval:plugin/answerer@0.2.0"),
        "{stdout}"
    );
    assert_eq!(
        *lines.last().unwrap(),
        format!(
            "test: {name} builds, fits, and passes its cases; try it with approval-host ask --config {name}/deployment.toml"
        )
    );
    let summary = lines[lines.len() - 2].to_owned();
    let tool = if role == "gate" { "bash" } else { "read" };
    let asked = host()
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args([
            "ask",
            "--session",
            "s1",
            "--agent",
            "a1",
            "--tool",
            tool,
            "--config",
        ])
        .arg(dir.join("deployment.toml"))
        .output()
        .unwrap();
    assert!(asked.status.success(), "{asked:?}");
    (
        summary,
        String::from_utf8_lossy(&asked.stdout).trim().to_owned(),
    )
}

#[test]
fn every_language_s_skeleton_builds_and_passes_its_own_cases() {
    let root = tempfile::tempdir().unwrap();
    let runs = [
        ("gate-rust", "rust", "gate"),
        ("gate-python", "python", "gate"),
        ("gate-js", "js", "gate"),
        ("gate-c", "c", "gate"),
        ("answerer-c", "c", "answerer"),
        ("answerer-python", "python", "answerer"),
    ];
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(name, lang, role)| {
                let root = root.path();
                s.spawn(move || (*name, *role, build_and_conform(root, name, lang, role)))
            })
            .collect();
        for h in handles {
            let (name, role, (summary, outcome)) = h.join().unwrap();
            assert_eq!(summary, format!("{name}: 4 passed, 0 failed"));
            // The sample deployment's sample question: the gate rejects `bash`, the answerer
            // grants `read` once.
            let want = if role == "gate" {
                "rejected"
            } else {
                "allowed-once"
            };
            assert_eq!(outcome, want, "{name}");
        }
    });
}

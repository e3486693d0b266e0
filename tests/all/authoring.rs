//! `approval-host new`: from nothing to a loaded, tested plugin in a few commands. Each
//! language's skeleton is written, built with its own build script, and passes its own sample
//! conformance cases through `approval-host conform`.

use std::path::{Path, PathBuf};
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
            "next: {name}/build.sh, then approval-host conform {name}/{name}.wasm --cases {name}/cases.json"
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

/// Writes, builds and conforms one skeleton, then asks through its sample deployment; returns
/// the `conform` summary line and the outcome.
fn build_and_conform(root: &Path, name: &str, lang: &str, role: &str) -> (String, String) {
    let out = new(root, name, lang, role);
    assert!(out.status.success(), "{out:?}");
    let dir = root.join(name);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_approval-host"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let built = Command::new(dir.join("build.sh"))
        .env("PATH", path)
        // Rust skeletons share one target directory across runs.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("skeleton-target"),
        )
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{name}/build.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let conformed = host()
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("conform")
        .arg(dir.join(format!("{name}.wasm")))
        .arg("--cases")
        .arg(dir.join("cases.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&conformed.stdout).into_owned();
    assert!(conformed.status.success(), "{name}: {stdout}");
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
        stdout.lines().last().unwrap().to_owned(),
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

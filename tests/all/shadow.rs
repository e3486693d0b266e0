//! Shadow plugins on live traffic (issue 29, part 3): a `[[plugin]] mode = "shadow"` sees every
//! settled question after its decision and never changes an outcome or the order of the log,
//! even when it traps or hangs (its failure is recorded); what it would have decided is an
//! `approval/shadowed` record, read back by `shadow report`, `plugins/list` and the console.

use std::path::Path;
use std::process::Command;

use approval_host::assemble;
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeOptions, Server, auth};
use approval_host::{ApprovalRequest, ApprovalService, Deployment, Outcome, PluginHost};
use serde_json::{Value, json};

use crate::console::{ADMIN, http, log_in_as};
use crate::fixtures;
use crate::support::{events_at, log_path};

/// A deciding `no-rm` gate and a rule for `ls`; `extra` adds entries.
fn deployment(dir: &Path, extra: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("deny.wasm"), approval_host::bundled::DENY_COMMANDS).unwrap();
    std::fs::write(dir.join("trap.wasm"), fixtures::trap()).unwrap();
    std::fs::write(dir.join("hang.wasm"), fixtures::endless_loop()).unwrap();
    let path = dir.join("deploy.toml");
    std::fs::write(
        &path,
        format!(
            "[[rule]]\nrule = \"Bash(ls:*)\"\n\n\
             [[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\n\
             [plugin.config]\npatterns = \"rm \"\n\n{extra}"
        ),
    )
    .unwrap();
    path
}

/// A stricter `no-rm` (also refuses `curl`), one that traps and one that never returns.
const SHADOWS: &str = "[[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\nmode = \"shadow\"\n\
    [plugin.config]\npatterns = \"rm ,curl \"\nreason = \"no downloads\"\n\n\
    [[plugin]]\nname = \"trapper\"\npath = \"trap.wasm\"\nrole = \"gate\"\nmode = \"shadow\"\n\n\
    [[plugin]]\nname = \"hanger\"\npath = \"hang.wasm\"\nrole = \"gate\"\nmode = \"shadow\"\ntimeout_ms = 200\n";

const COMMANDS: [&str; 4] = ["ls -la", "rm -rf build", "curl http://x", "cargo build"];

/// Asks the four commands in session `s1`; returns the outcomes and the log's asked/decided
/// lines as (type, tool or outcome).
async fn run(state: &Path, config: &Path) -> (Vec<Outcome>, Vec<(String, Value)>) {
    let deployment = Deployment::load(config).unwrap();
    let service = ApprovalService::open_dir(state, deployment.default_policy);
    assemble::prepare(&service, &deployment, state, true).unwrap();
    let host = PluginHost::new().unwrap();
    let quarantine = QuarantinePolicy {
        max_failures: 100,
        ..QuarantinePolicy::default()
    };
    let mounted = assemble::mount(&service, &host, &deployment, quarantine).unwrap();
    let shadows = assemble::shadows(&service, &host, &deployment, quarantine).unwrap();
    let agent = service.agent("s1", "main").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let mut outcomes = Vec::new();
    for (i, command) in COMMANDS.iter().enumerate() {
        let call = format!("c{i}");
        service
            .record_tool_call(&agent, &call, "Bash", json!({ "command": command }))
            .await
            .unwrap();
        let verdict = service
            .ask(ApprovalRequest::new(&agent, "Bash").call_id(call))
            .await
            .unwrap();
        outcomes.push(verdict.outcome);
    }
    service.end_turn("s1").await.unwrap();
    shadows.idle().await;
    drop((agent, mounted, service));
    let decisions = events_at(&log_path(state, "s1"))
        .into_iter()
        .filter(|(t, _)| t != "approval/shadowed")
        .map(|(t, d)| {
            let keep =
                json!({"outcome": d["outcome"], "answerer": d["answerer"], "tool": d["toolName"]});
            (t, keep)
        })
        .collect();
    (outcomes, decisions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_never_changes_an_outcome_or_its_order_even_when_it_traps_or_hangs() {
    let plain = tempfile::tempdir().unwrap();
    let config = deployment(plain.path(), "");
    let (without, log_without) = run(&plain.path().join("state"), &config).await;
    assert_eq!(
        without,
        [
            Outcome::AllowedOnce,
            Outcome::Rejected,
            Outcome::Unavailable,
            Outcome::Unavailable
        ]
    );

    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), SHADOWS);
    let state = dir.path().join("state");
    let (with, log_with) = run(&state, &config).await;
    assert_eq!(with, without);
    assert_eq!(log_with, log_without, "the shadows changed the log's order");

    // Each settled question got one record per shadow, after its decision.
    let events = events_at(&log_path(&state, "s1"));
    let ids: Vec<Value> = events
        .iter()
        .filter(|(t, _)| t == "approval/asked")
        .map(|(_, d)| d["id"].clone())
        .collect();
    let shadowed: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "approval/shadowed")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(shadowed.len(), 12);
    let of = |plugin: &str, q: usize| {
        let mut found: Vec<Value> = shadowed
            .iter()
            .filter(|s| s["plugin"] == plugin && s["id"] == ids[q])
            .map(|s| {
                let mut s = (*s).clone();
                let o = s.as_object_mut().unwrap();
                assert_eq!(o.remove("digest").unwrap().as_str().unwrap().len(), 64);
                o.remove("id");
                s
            })
            .collect();
        assert_eq!(found.len(), 1, "{plugin} on question {q}");
        found.remove(0)
    };
    assert_eq!(
        of("no-rm", 0),
        json!({"plugin": "no-rm", "would": "next", "decided": "allowed-once", "agrees": true})
    );
    assert_eq!(
        of("no-rm", 1),
        json!({"plugin": "no-rm", "would": "rejected", "decided": "rejected", "agrees": true,
               "reason": "no downloads"})
    );
    assert_eq!(
        of("no-rm", 2),
        json!({"plugin": "no-rm", "would": "rejected", "decided": "unavailable", "agrees": false,
               "reason": "no downloads"})
    );
    assert_eq!(
        of("no-rm", 3),
        json!({"plugin": "no-rm", "would": "next", "decided": "unavailable", "agrees": true})
    );
    for q in 0..4 {
        let decided = ["allowed-once", "rejected", "unavailable", "unavailable"][q];
        assert_eq!(
            of("trapper", q),
            json!({"plugin": "trapper", "would": "failed", "failure": "trap", "decided": decided})
        );
        assert_eq!(
            of("hanger", q),
            json!({"plugin": "hanger", "would": "failed", "failure": "timeout", "decided": decided})
        );
    }

    // `shadow report` reads it back: exit 1 for the disagreement, which it shows in context.
    let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(&state)
        .args(["shadow", "report"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let digest = |name: &str| {
        shadowed.iter().find(|s| s["plugin"] == name).unwrap()["digest"]
            .as_str()
            .unwrap()[..12]
            .to_owned()
    };
    assert_eq!(lines.len(), 6, "{text}");
    let seq = 1 + events
        .iter()
        .position(|(t, d)| t == "approval/asked" && d["id"] == ids[2])
        .unwrap();
    assert_eq!(
        lines[0],
        format!(
            "hanger ({}): 4 seen, 0 agreed, 0 disagreed, 4 failed: agreement -",
            digest("hanger")
        )
    );
    assert_eq!(lines[1], "  failed (timeout): 4");
    assert_eq!(
        lines[2],
        format!(
            "no-rm ({}): 4 seen, 3 agreed, 1 disagreed, 0 failed: agreement 75.0%",
            digest("no-rm")
        )
    );
    assert!(
        lines[3].starts_with("  s1  ")
            && lines[3].ends_with(
                &format!("  Bash  curl http://x  decided unavailable by nobody, would be rejected (no downloads)   (approval-host log s1  # seq {seq})")
            ),
        "{}",
        lines[3]
    );
    assert_eq!(
        lines[4],
        format!(
            "trapper ({}): 4 seen, 0 agreed, 0 disagreed, 4 failed: agreement -",
            digest("trapper")
        )
    );
    assert_eq!(lines[5], "  failed (trap): 4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_list_and_the_console_show_each_shadows_agreement_and_disagreements() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(
        dir.path(),
        &format!(
            "{}\n[[token]]\nname = \"root\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n\n\
             [[answerer]]\nkind = \"web\"\nsessions = [\"other-\"]\n",
            SHADOWS
                .split("[[plugin]]\nname = \"trapper\"")
                .next()
                .unwrap(),
            auth::token_hash(ADMIN)
        ),
    );
    let server = Server::start(ServeOptions {
        config,
        state_dir: dir.path().join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let service = server.service().clone();
    let agent = service.agent("s1", "main").await.unwrap();
    service.start_turn("s1").await.unwrap();
    for (i, command) in ["ls", "curl <b>x</b>"].iter().enumerate() {
        let call = format!("c{i}");
        service
            .record_tool_call(&agent, &call, "Bash", json!({ "command": command }))
            .await
            .unwrap();
        service
            .ask(ApprovalRequest::new(&agent, "Bash").call_id(call))
            .await
            .unwrap();
    }
    server.shadows_settled().await;
    let status = serde_json::to_value(server.shadow_status()).unwrap();
    let question = status[0]["recent"][0]["question"].clone();
    assert_eq!(
        status,
        json!([{"name": "no-rm", "digest": status[0]["digest"], "seen": 2, "agreed": 1,
                "disagreed": 1, "failed": 0, "dropped": 0, "agreement": 0.5,
                "recent": [{"session": "s1", "question": question, "tool": "Bash",
                            "decided": "unavailable", "would": "rejected",
                            "reason": "no downloads"}]}])
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_console(listener, None).await });
    let (admin, _) = log_in_as(addr, ADMIN).await;
    let page = http(addr, "GET", "/plugins", Some(&admin), None).await.body;
    assert!(page.contains("<h2>Shadows (1)</h2>"), "{page}");
    assert!(
        page.contains("<td class=\"num agreement\">50.0%</td>"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<a href=\"/sessions/s1#q-{}\">s1</a></td><td>Bash</td><td>unavailable</td><td>nobody</td><td>rejected</td><td>no downloads</td>",
            question.as_str().unwrap()
        )),
        "{page}"
    );
    service.end_turn("s1").await.unwrap();
}

#[test]
fn a_shadow_entry_is_checked_like_any_plugin_and_may_share_its_deciding_versions_name() {
    let dir = tempfile::tempdir().unwrap();
    let base = deployment(dir.path(), "");
    let path = base.display().to_string();
    let cases = dir.path().join("cases.json");
    std::fs::write(&cases, r#"{"cases": []}"#).unwrap();
    let entry = |name: &str, more: &str| {
        format!("[[plugin]]\nname = \"{name}\"\npath = \"deny.wasm\"\nrole = \"gate\"\n{more}")
    };
    let load = |extra: String| {
        let text = std::fs::read_to_string(&base).unwrap();
        let other = dir.path().join("other.toml");
        std::fs::write(&other, format!("{text}\n{extra}")).unwrap();
        Deployment::load(&other).map_err(|e| e.to_string())
    };
    let ok = load(entry("no-rm", "mode = \"shadow\"\n")).unwrap();
    assert_eq!(ok.plugins.len(), 1);
    assert_eq!(ok.shadows.len(), 1);
    assert_eq!(ok.shadows[0].name, "no-rm");
    let other = path.replace("deploy.toml", "other.toml");
    for (extra, want) in [
        (
            entry("x", "mode = \"watch\"\n"),
            "plugin \"x\": mode = \"watch\": must be \"decide\" or \"shadow\"",
        ),
        (
            entry("x", "mode = \"shadow\"\ncases = \"cases.json\"\n"),
            "plugin \"x\": cases apply to a deciding version; a shadow is tried on live traffic instead",
        ),
        (
            format!(
                "{}\n{}",
                entry("x", "mode = \"shadow\"\n"),
                entry("x", "mode = \"shadow\"\n")
            ),
            "plugin #3: name = \"x\" is used by an earlier shadow; names must be unique",
        ),
    ] {
        let err = load(extra).unwrap_err();
        assert!(err.starts_with(&format!("{other}:")), "{err}");
        assert!(err.ends_with(want), "{err}");
    }
}

#[test]
fn an_in_process_hook_s_questions_are_shadowed_after_it_answered() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(
        dir.path(),
        "[[plugin]]\nname = \"no-curl\"\npath = \"deny.wasm\"\nrole = \"gate\"\nmode = \"shadow\"\n\
         [plugin.config]\npatterns = \"rm ,curl \"\nreason = \"no downloads\"\n",
    );
    let state = dir.path().join("state");
    let input = json!({"session_id": "hooked", "transcript_path": "/t", "cwd": "/w",
        "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "curl http://x"}, "tool_use_id": "toolu_1"});
    let out = crate::support::spawn_hook(
        &state,
        "claude-code",
        &["--config", config.to_str().unwrap()],
        &input.to_string(),
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["hookSpecificOutput"]["permissionDecision"], "ask");
    // The hook has answered and exited; its shadows run in a process of their own and record
    // on the session's log.
    let log = log_path(&state, "hooked");
    let started = std::time::Instant::now();
    let shadowed = loop {
        let found: Vec<Value> = crate::support::events_so_far(&log)
            .into_iter()
            .filter(|(t, _)| t == "approval/shadowed")
            .map(|(_, d)| d)
            .collect();
        if !found.is_empty() {
            break found;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no shadow recorded: {:?}",
            events_at(&log)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(shadowed.len(), 1, "{shadowed:?}");
    assert_eq!(shadowed[0]["plugin"], "no-curl");
    assert_eq!(shadowed[0]["would"], "rejected");
    assert_eq!(shadowed[0]["decided"], "unavailable");
    assert_eq!(shadowed[0]["agrees"], false);
    assert_eq!(shadowed[0]["reason"], "no downloads");
    let asked = events_at(&log)
        .into_iter()
        .find(|(t, _)| t == "approval/asked")
        .unwrap()
        .1;
    assert_eq!(shadowed[0]["id"], asked["id"]);
}

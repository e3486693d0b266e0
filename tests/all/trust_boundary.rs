//! Rules the agent cannot talk its way around, one test per finding: shell syntax the old
//! splitter misread, options that write or run programs, programs hidden from reject rules,
//! symlinks and glob characters in paths, URL tricks, rules widened by whoever may answer, and
//! the policy's own files within the agent's reach (built-in protections, rules logs checked on
//! every read, a keyed compiled cache, state outside the project).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::answer::{Authority, Effect, RuleScope};
use approval_host::rules::protect::{Area, Protected};
use approval_host::rules::{self, NewRule, RuleBook, proposals};
use approval_host::{
    Answer, ApprovalRequest, ApprovalService, Decision, Listener, Outcome, Position, Proposal,
    Question, Scope, Verdict,
};
use serde_json::{Value, json};

use super::support::{Host, log_path, rules_on};

fn enable(host: &Host) -> Arc<RuleBook> {
    rules_on(&host.service, "trust")
}

async fn add(host: &Host, text: &str, effect: Effect) -> String {
    host.service
        .add_rule(NewRule {
            rule: text.to_owned(),
            effect,
            scope: RuleScope::Project,
            session: None,
            lasts: None,
            creator: "test".to_owned(),
            reason: None,
        })
        .await
        .unwrap()
        .id
}

/// Asks about a call of `tool` with `args` from `cwd` in session `s1`, inside a turn.
async fn ask(service: &ApprovalService, call: &str, tool: &str, args: Value, cwd: &str) -> Verdict {
    let agent = service.agent("s1", "a").await.unwrap();
    if !service.turn_open("s1").await.unwrap() {
        service.start_turn("s1").await.unwrap();
    }
    service
        .record_tool_call(&agent, call, tool, args)
        .await
        .unwrap();
    service
        .ask(ApprovalRequest::new(&agent, tool).call_id(call).cwd(cwd))
        .await
        .unwrap()
}

async fn bash(service: &ApprovalService, call: &str, command: &str) -> Verdict {
    ask(service, call, "Bash", json!({ "command": command }), "/w").await
}

/// Under `rule`, none of `commands` is allowed (nothing else answers: they settle unavailable).
async fn none_allowed(rule: &str, commands: &[&str]) {
    let host = Host::new();
    enable(&host);
    add(&host, rule, Effect::Allow).await;
    for (i, command) in commands.iter().enumerate() {
        let v = bash(&host.service, &format!("c{i}"), command).await;
        assert_eq!(
            v.outcome,
            Outcome::Unavailable,
            "{rule} allowed {command:?}"
        );
    }
}

#[tokio::test]
async fn a_hash_after_a_redirection_is_not_a_comment() {
    none_allowed("Bash(npm run test:*)", &["npm run test >&1#;rm -rf ~"]).await;
}

#[tokio::test]
async fn a_line_continuation_inside_double_quotes_hides_no_substitution() {
    none_allowed(
        "Bash(npm run test:*)",
        &["npm run test \"$\\\n(rm -rf ~)\""],
    )
    .await;
}

#[tokio::test]
async fn ansi_c_quotes_and_quotes_inside_expansions_are_read_as_bash_reads_them() {
    none_allowed(
        "Bash(npm run test:*)",
        &[
            "npm run test $'\\'' ; rm -rf ~ ; echo \"'\" #\"",
            "npm run test \"${x:-'\"'}\" ; rm -rf ~ #'",
        ],
    )
    .await;
}

#[tokio::test]
async fn special_parameters_and_their_transformations_are_opaque() {
    none_allowed(
        "Bash(npm run test:*)",
        &[
            "npm run test '$(id)' && npm run test \"${_@P}\"",
            "npm run test ${PATH:_}",
            "npm run test $[_]",
            "npm run test ${PATH[_]}",
        ],
    )
    .await;
}

#[tokio::test]
async fn redirections_that_write_files_are_not_covered() {
    none_allowed(
        "Bash(npm run test:*)",
        &[
            "npm run test >&1out.txt",
            "npm run test >&2file",
            "npm run test >&1-2",
            "npm run test >/dev/null\u{a0}",
            "npm run test >/dev/null\r",
            "npm run test >/dev/null\u{b}",
            "npm run test >/dev/null\u{c}",
        ],
    )
    .await;
    // The harmless forms still ride the rule.
    let host = Host::new();
    enable(&host);
    add(&host, "Bash(npm run test:*)", Effect::Allow).await;
    let v = bash(&host.service, "ok", "npm run test >/dev/null 2>&1").await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn an_exact_rule_takes_no_argument_hidden_next_to_a_redirection() {
    none_allowed(
        "Bash(git status)",
        &["git status \"1\">/dev/null", "git status ''>/dev/null"],
    )
    .await;
}

#[tokio::test]
async fn options_that_write_or_run_programs_pass_no_read_rule() {
    for (rule, command) in [
        ("Bash(find:*)", "find . -name x -exec rm {} \\;"),
        ("Bash(find:*)", "find . -delete"),
        ("Bash(find:*)", "find . -fprint /etc/passwd"),
        ("Bash(rg:*)", "rg --pre ./x files"),
        ("Bash(git log:*)", "git log --output=FILE"),
        ("Bash(git diff:*)", "git diff --ext-diff"),
        ("Bash(sed:*)", "sed -n '1e id' f"),
        ("Bash(sed -n:*)", "sed -n 'w /tmp/out' f"),
        ("Bash(git branch:*)", "git branch -D main"),
    ] {
        none_allowed(rule, &[command]).await;
    }
}

#[tokio::test]
async fn a_reject_rule_sees_through_an_assignment_in_front() {
    let host = Host::new();
    enable(&host);
    add(&host, "Bash", Effect::Allow).await;
    let reject = add(&host, "Bash(git push:*)", Effect::Reject).await;
    for (i, command) in [
        "CI=true git push",
        "env CI=true git push",
        "timeout 5 git push",
        "/usr/bin/git push origin main",
        "bash -c 'git push --force'",
    ]
    .iter()
    .enumerate()
    {
        let v = bash(&host.service, &format!("c{i}"), command).await;
        assert_eq!(v.outcome, Outcome::Rejected, "{command}");
        assert_eq!(v.answerer, Some(format!("rule:{reject}")), "{command}");
    }
}

#[tokio::test]
async fn a_symlink_inside_the_allowed_tree_does_not_reach_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(w.join("src")).unwrap();
    std::os::unix::fs::symlink("/etc", w.join("src/l")).unwrap();
    let host = Host::new();
    enable(&host);
    add(&host, "Read(./src/**)", Effect::Allow).await;
    let cwd = w.to_str().unwrap();
    let v = ask(
        &host.service,
        "c1",
        "Read",
        json!({"file_path": "src/l/passwd"}),
        cwd,
    )
    .await;
    assert_eq!(v.outcome, Outcome::Unavailable);
    let v = ask(
        &host.service,
        "c2",
        "Read",
        json!({"file_path": "src/a.rs"}),
        cwd,
    )
    .await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn glob_characters_in_the_working_directory_match_only_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for name in ["proj[12]", "proj1", "p*", "pother"] {
        std::fs::create_dir_all(root.join(name)).unwrap();
    }
    let host = Host::new();
    enable(&host);
    add(&host, "Read(./**)", Effect::Allow).await;
    for (i, (cwd, neighbour)) in [("proj[12]", "proj1"), ("p*", "pother")].iter().enumerate() {
        let cwd = root.join(cwd);
        let secret = root.join(neighbour).join("secret");
        let v = ask(
            &host.service,
            &format!("n{i}"),
            "Read",
            json!({ "file_path": secret }),
            cwd.to_str().unwrap(),
        )
        .await;
        assert_eq!(
            v.outcome,
            Outcome::Unavailable,
            "{} from {}",
            secret.display(),
            cwd.display()
        );
        let v = ask(
            &host.service,
            &format!("o{i}"),
            "Read",
            json!({"file_path": "own"}),
            cwd.to_str().unwrap(),
        )
        .await;
        assert_eq!(v.outcome, Outcome::AllowedOnce);
    }
}

#[tokio::test]
async fn a_backslash_before_the_at_sign_leaves_the_host_where_browsers_find_it() {
    let host = Host::new();
    enable(&host);
    add(&host, "WebFetch(domain:example.com)", Effect::Allow).await;
    let v = ask(
        &host.service,
        "c1",
        "WebFetch",
        json!({"url": "https://evil.com\\@example.com/"}),
        "/w",
    )
    .await;
    assert_eq!(v.outcome, Outcome::Unavailable);
}

/// An answerer outside the process: it answers with `answer` and says it has `authority`.
struct Remote {
    answer: Answer,
}

impl Listener for Remote {
    fn leaves_process(&self) -> bool {
        true
    }

    fn decide(&self, _question: Question) -> approval_host::waterfall::ListenerFuture {
        let decision = self.answer.decision;
        Box::pin(async move { Ok(decision) })
    }

    fn answer(
        &self,
        _question: &Question,
    ) -> Option<(Option<Arc<str>>, approval_host::waterfall::AnswerFuture)> {
        let answer = self.answer.clone();
        Some((None, Box::pin(async move { Ok(answer) })))
    }
}

fn always(rule: &str, scope: RuleScope) -> Proposal {
    let spec = rules::pattern::parse(rule).unwrap();
    let (tool, pattern) = match spec.text.split_once('(') {
        Some((t, p)) => (t.to_owned(), Some(p.trim_end_matches(')').to_owned())),
        None => (spec.text.clone(), None),
    };
    Proposal::checked(Effect::Allow, tool, pattern, scope).unwrap()
}

/// The decided event of the last question in `s1`.
fn last_decided(host: &Host) -> Value {
    host.events("s1")
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .unwrap()
        .1
}

#[tokio::test]
async fn an_answerer_may_not_widen_everyone_s_permissions() {
    let host = Host::new();
    let book = enable(&host);
    let answer = Answer::from(Decision::AllowOnce)
        .proposing(always("Bash", RuleScope::User))
        .with_authority(Authority::Answerer);
    let _r = host
        .service
        .register("remote", Scope::Global, Position::Back, Remote { answer });
    let v = bash(&host.service, "c1", "npm run test").await;
    // The decision stands for this call; the rule is refused and the refusal recorded.
    assert_eq!(v.outcome, Outcome::AllowedOnce);
    let decided = last_decided(&host);
    assert_eq!(
        decided["ruleDeclined"],
        proposals::declined_for_answerers(RuleScope::User)
    );
    assert!(decided.get("ruleAdded").is_none());
    assert!(book.list(None).is_empty());
    // An outside answerer that says nothing of its authority is an answerer, not a person.
    let answer =
        Answer::from(Decision::AllowOnce).proposing(always("Bash(npm run:*)", RuleScope::Project));
    let _r2 = host
        .service
        .register("silent", Scope::Global, Position::Front, Remote { answer });
    bash(&host.service, "c2", "npm run lint").await;
    assert_eq!(
        last_decided(&host)["ruleDeclined"],
        proposals::declined_for_answerers(RuleScope::Project)
    );
    assert!(book.list(None).is_empty());
}

#[tokio::test]
async fn a_proposed_rule_must_cover_the_question_it_answers() {
    let host = Host::new();
    let book = enable(&host);
    let answer = Answer::from(Decision::AllowOnce)
        .proposing(always("Bash(ls:*)", RuleScope::Project))
        .with_authority(Authority::Person);
    let _r = host
        .service
        .register("person", Scope::Global, Position::Back, Remote { answer });
    let v = bash(&host.service, "c1", "npm run test").await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
    assert_eq!(
        last_decided(&host)["ruleDeclined"],
        proposals::declined_not_covering("Bash(ls:*)", Effect::Allow)
    );
    assert!(book.list(None).is_empty());
    // A person at the host may make a project rule that covers the call.
    drop(_r);
    let answer = Answer::from(Decision::AllowOnce)
        .proposing(always("Bash(npm run test:*)", RuleScope::Project))
        .with_authority(Authority::Person);
    let _r = host
        .service
        .register("person", Scope::Global, Position::Back, Remote { answer });
    bash(&host.service, "c2", "npm run test").await;
    let listed = book.list(None);
    assert_eq!(listed.len(), 1);
    assert_eq!(last_decided(&host)["ruleAdded"], listed[0].id.as_str());
}

#[tokio::test]
async fn no_always_option_is_offered_when_no_narrow_rule_is_safe() {
    use approval_host::rules::suggest::suggest;
    for (tool, args) in [
        ("Bash", json!({"command": "echo $(date)"})),
        ("Bash", json!({"command": "bash -c 'npm test'"})),
        ("Bash", json!({"command": "python3 -c 'print(1)'"})),
        ("Bash", json!({"command": "env X=1 npm test"})),
        ("Bash", json!({"command": "xargs rm"})),
        ("Bash", json!({"command": "sudo ls"})),
        ("Bash", json!({"command": "git -C x status"})),
        ("Task", json!({"prompt": "x"})),
    ] {
        assert_eq!(
            suggest(tool, Some(&args), Some("/w")),
            None,
            "{tool} {args}"
        );
    }
    assert_eq!(suggest("Bash", None, Some("/w")), None);
    // A path offers its own directory, not the tree under it.
    assert_eq!(
        suggest("Edit", Some(&json!({"file_path": "src/a.rs"})), Some("/w")).as_deref(),
        Some("Edit(//w/src/*)")
    );
}

#[tokio::test]
async fn the_policy_s_own_files_are_protected_from_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let project = root.join("proj");
    let state = root.join("state");
    std::fs::create_dir_all(project.join(".approval-host")).unwrap();
    std::fs::create_dir_all(state.join("sessions")).unwrap();
    let deployment = project.join(".approval-host/claude-code.toml");
    std::fs::write(&deployment, "").unwrap();
    let key = root.join("audit.key");
    std::fs::write(&key, "k").unwrap();
    let host = Host::new();
    enable(&host);
    // Even a rule allowing every call of every tool does not reach them.
    add(&host, "Bash", Effect::Allow).await;
    add(&host, "Write", Effect::Allow).await;
    add(&host, "Read", Effect::Allow).await;
    host.service.set_protected(Some(Protected::new([
        Area::tree("state-dir", "the state directory", &state),
        Area::file("deployment", "the deployment file", &deployment),
        Area::secret("signing-key", "the audit signing key", &key),
    ])));
    let cwd = project.to_str().unwrap();
    let s = state.to_str().unwrap();
    for (i, (tool, args, area)) in [
        (
            "Write",
            json!({"file_path": ".approval-host/claude-code.toml"}),
            "deployment",
        ),
        (
            "Write",
            json!({"file_path": format!("{s}/sessions/rules.user.jsonl")}),
            "state-dir",
        ),
        (
            "Write",
            json!({"file_path": ".claude/settings.json"}),
            "claude-settings",
        ),
        (
            "Bash",
            json!({"command": format!("echo x >> {s}/sessions/rules.user.jsonl")}),
            "state-dir",
        ),
        (
            "Bash",
            json!({"command": "tee .approval-host/claude-code.toml < evil"}),
            "deployment",
        ),
        (
            "Bash",
            json!({"command": "cp evil .approval-host/claude-code.toml"}),
            "deployment",
        ),
        (
            "Bash",
            json!({"command": "mv .approval-host/claude-code.toml x"}),
            "deployment",
        ),
        (
            "Bash",
            json!({"command": "sed -i s/a/b/ .approval-host/claude-code.toml"}),
            "deployment",
        ),
        (
            "Bash",
            json!({"command": "truncate -s0 .approval-host/claude-code.toml"}),
            "deployment",
        ),
        (
            "Bash",
            json!({"command": format!("rm -rf {s}")}),
            "state-dir",
        ),
        (
            "Bash",
            json!({"command": "echo '{}' > .claude/settings.local.json"}),
            "claude-settings",
        ),
        ("Write", json!({"file_path": ".mcp.json"}), "mcp-config"),
        (
            "Bash",
            json!({"command": "echo '{}' > .vscode/mcp.json"}),
            "vscode-mcp",
        ),
        (
            "Edit",
            json!({"file_path": "sub/.cursor/mcp.json"}),
            "cursor-mcp",
        ),
        (
            "Bash",
            json!({"command": "sed -i s/approval-host// .github/mcp.json"}),
            "copilot-mcp",
        ),
        (
            "Bash",
            json!({"command": "sed -i s/approval-host// .mcp.json"}),
            "mcp-config",
        ),
        // Copilot CLI runs the user's hook files in every folder; a person's record of trusted
        // folders decides whether a project's hooks load.
        (
            "Write",
            json!({"file_path": "home/.copilot/hooks/approval-host.json"}),
            "copilot-user-hooks",
        ),
        (
            "Bash",
            json!({"command": "echo '{}' > home/.copilot/hooks/other.json"}),
            "copilot-user-hooks",
        ),
        (
            "Bash",
            json!({"command": "echo '{}' > home/.gemini/trustedFolders.json"}),
            "gemini-trust",
        ),
        (
            "Edit",
            json!({"file_path": "home/.copilot/config.json"}),
            "copilot-config",
        ),
        ("Read", json!({"file_path": key}), "signing-key"),
        (
            "Bash",
            json!({"command": format!("cat {}", key.display())}),
            "signing-key",
        ),
    ]
    .iter()
    .enumerate()
    {
        let v = ask(&host.service, &format!("p{i}"), tool, args.clone(), cwd).await;
        assert_eq!(v.outcome, Outcome::Rejected, "{tool} {args}");
        assert_eq!(
            v.answerer,
            Some(format!("rule:builtin-{area}")),
            "{tool} {args}"
        );
        let decided = last_decided(&host);
        assert_eq!(decided["rule"]["creator"], "built-in");
    }
    // Reading the deployment, and ordinary work, still ride the rules.
    for (i, (tool, args)) in [
        (
            "Read",
            json!({"file_path": ".approval-host/claude-code.toml"}),
        ),
        ("Write", json!({"file_path": "src/main.rs"})),
        ("Bash", json!({"command": "cargo test 2>&1 | tee test.log"})),
        ("Read", json!({"file_path": ".mcp.json"})),
        ("Write", json!({"file_path": "docs/mcp.json"})),
        ("Write", json!({"file_path": "notes.mcp.json"})),
        (
            "Read",
            json!({"file_path": "home/.gemini/trustedFolders.json"}),
        ),
        ("Write", json!({"file_path": "home/.copilot/hooks.md"})),
    ]
    .iter()
    .enumerate()
    {
        let v = ask(&host.service, &format!("ok{i}"), tool, args.clone(), cwd).await;
        assert_eq!(v.outcome, Outcome::AllowedOnce, "{tool} {args}");
    }
    // Built-in rules cannot be revoked.
    let err = host
        .service
        .revoke_rule("builtin-deployment", "test", None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rule \"builtin-deployment\" is built in: it protects this host's own policy and cannot be revoked"
    );
}

/// Appends `event` to the log at `path` as a well-chained next line, as a writer would.
fn append_chained(path: &Path, event: Value) {
    let text = std::fs::read_to_string(path).unwrap();
    let last = text.lines().last().unwrap();
    let record: Value = serde_json::from_str(last).unwrap();
    use sha2::Digest;
    let prev: String = sha2::Sha256::digest(last.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let line = json!({
        "v": 2,
        "seq": record["seq"].as_u64().unwrap() + 1,
        "ts": record["ts"],
        "type": event["type"],
        "data": event["data"],
        "prev": prev,
    });
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
}

/// Waits until `done` holds, for at most ten seconds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A host whose rule changes are checkpointed with a signing key, and its rule book.
async fn signed_host(dir: &Path) -> (Host, Arc<RuleBook>) {
    let host = Host::new();
    let key = dir.join("audit.key");
    approval_host::audit::checkpoint::keygen(&key).unwrap();
    let signing = approval_host::audit::checkpoint::load_signing_key(&key).unwrap();
    let checkpointer = Arc::new(approval_host::audit::checkpoint::Checkpointer::new(
        signing,
        host.dir.path(),
    ));
    host.service.set_checkpointer(Some(checkpointer));
    let book = enable(&host);
    (host, book)
}

#[tokio::test]
async fn a_rule_appended_behind_the_host_s_back_is_refused_and_stops_every_allow() {
    let dir = tempfile::tempdir().unwrap();
    let (host, book) = signed_host(dir.path()).await;
    add(&host, "Bash(cargo test:*)", Effect::Allow).await;
    let reject = add(&host, "Bash(git push:*)", Effect::Reject).await;
    assert_eq!(
        bash(&host.service, "c1", "cargo test").await.outcome,
        Outcome::AllowedOnce
    );
    // The agent appends a well-chained rule/added to the project's rules log.
    let path = log_path(host.dir.path(), book.project_log_name());
    append_chained(
        &path,
        json!({"type": "rule/added", "data": {"id": "forged", "tool": "Bash", "effect": "allow",
               "scope": "project", "creator": "cli:root"}}),
    );
    until("the forged record is refused", || !book.broken().is_empty()).await;
    let (log, why) = book.broken().remove(0);
    assert_eq!(log, book.project_log_name());
    assert!(why.contains("added-after-checkpoint"), "{why}");
    assert!(book.get("forged").is_none());
    // Fail closed: no allow rule applies; reject rules still do.
    assert_eq!(
        bash(&host.service, "c2", "cargo test").await.outcome,
        Outcome::Unavailable
    );
    assert_eq!(
        bash(&host.service, "c3", "rm -rf ~").await.outcome,
        Outcome::Unavailable
    );
    let v = bash(&host.service, "c4", "git push").await;
    assert_eq!(v.outcome, Outcome::Rejected);
    assert_eq!(v.answerer, Some(format!("rule:{reject}")));
}

#[tokio::test]
async fn a_revocation_dropped_from_the_log_does_not_bring_the_rule_back() {
    for signed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (host, book) = if signed {
            signed_host(dir.path()).await
        } else {
            let host = Host::new();
            let book = enable(&host);
            (host, book)
        };
        let id = add(&host, "Bash(curl:*)", Effect::Allow).await;
        host.service.revoke_rule(&id, "test", None).await.unwrap();
        let path = log_path(host.dir.path(), book.project_log_name());
        let text = std::fs::read_to_string(&path).unwrap();
        let kept: Vec<&str> = text.lines().collect();
        std::fs::write(&path, format!("{}\n", kept[..kept.len() - 1].join("\n"))).unwrap();
        until("the truncation is noticed", || !book.broken().is_empty()).await;
        assert!(book.get(&id).is_none(), "signed: {signed}");
        let v = bash(&host.service, "c1", "curl https://example.com").await;
        assert_eq!(v.outcome, Outcome::Unavailable, "signed: {signed}");
    }
}

#[test]
fn a_planted_compiled_artefact_is_never_loaded() {
    use approval_host::bundled;
    use approval_host::plugin::cache::{CacheKey, CompiledCache, Source};
    use approval_host::plugin::digest;
    let dir = tempfile::tempdir().unwrap();
    let cache = CompiledCache::with_key(dir.path(), CacheKey::from_bytes([7; 32]));
    let host = approval_host::PluginHost::new().unwrap();
    let (allow, reject) = (digest(bundled::ALLOW_TOOLS), digest(bundled::REJECT_ALL));
    cache
        .load(host.engine(), &allow, bundled::ALLOW_TOOLS)
        .unwrap();
    // The agent puts allow-tools' compiled code where reject-all's entry goes.
    std::fs::copy(
        cache.entry(host.engine(), &allow),
        cache.entry(host.engine(), &reject),
    )
    .unwrap();
    let (_, source) = cache
        .load(host.engine(), &reject, bundled::REJECT_ALL)
        .unwrap();
    assert_eq!(
        source,
        Source::Compiled,
        "an entry MACed for another digest"
    );
    // An entry in the old format (its own unkeyed SHA-256 in front) is not trusted either.
    let artifact = std::fs::read(cache.entry(host.engine(), &allow)).unwrap()[32..].to_vec();
    use sha2::Digest;
    let mut old = sha2::Sha256::digest(&artifact).to_vec();
    old.extend_from_slice(&artifact);
    std::fs::write(cache.entry(host.engine(), &allow), old).unwrap();
    let (_, source) = cache
        .load(host.engine(), &allow, bundled::ALLOW_TOOLS)
        .unwrap();
    assert_eq!(source, Source::Compiled, "an unkeyed entry");
    // Another key (another user's host) cannot make entries this one loads.
    let other = CompiledCache::with_key(dir.path(), CacheKey::from_bytes([8; 32]));
    let (_, source) = other
        .load(host.engine(), &allow, bundled::ALLOW_TOOLS)
        .unwrap();
    assert_eq!(source, Source::Compiled);
    let (_, source) = other
        .load(host.engine(), &allow, bundled::ALLOW_TOOLS)
        .unwrap();
    assert_eq!(source, Source::Cache, "its own entries it does load");
}

#[test]
fn the_cache_key_is_made_once_private_and_outside_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config/approval-host/cache.key");
    let first = approval_host::plugin::cache::CacheKey::load_or_create(&path).unwrap();
    let again = approval_host::plugin::cache::CacheKey::load_or_create(&path).unwrap();
    assert_eq!(format!("{first:?}"), format!("{again:?}"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert_eq!(std::fs::read(&path).unwrap().len(), 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_serve_an_answerer_token_keeps_its_rules_to_its_own_session() {
    use super::serve_network::{Client, ok};
    const TOKEN: &str = "aht_prefix_limited_answerer_token_for_tests_00000000000000000000000";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[token]]\nname = \"ci-bot\"\nsha256 = \"{}\"\nroles = [\"agent\", \"answerer\"]\nsessions = [\"ci-\"]\n",
            approval_host::serve::auth::token_hash(TOKEN)
        ),
    )
    .unwrap();
    let server = approval_host::serve::Server::start(approval_host::serve::ServeOptions {
        config,
        state_dir: dir.path().join("state"),
        quarantine: approval_host::plugin::QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move { s.serve_tcp("127.0.0.1:0", None, Some(tx)).await });
    let addr = rx.await.unwrap();
    let mut c = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    ok(&c
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": TOKEN, "answerer": true}),
        )
        .await);
    ok(&c
        .call("session/open", json!({"sessionId": "ci-1", "agentId": "a"}))
        .await);
    ok(&c.call("turn/start", json!({"sessionId": "ci-1"})).await);
    let mut asked = 0;
    for (scope, rule, declined) in [
        (
            "user",
            "Bash",
            Some(proposals::declined_for_answerers(RuleScope::User)),
        ),
        (
            "project",
            "Bash(npm run test:*)",
            Some(proposals::declined_for_answerers(RuleScope::Project)),
        ),
        (
            "session",
            "Bash(ls:*)",
            Some(proposals::declined_not_covering(
                "Bash(ls:*)",
                Effect::Allow,
            )),
        ),
        ("session", "Bash(npm run test:*)", None),
    ] {
        asked += 1;
        let call = format!("c{asked}");
        ok(&c
            .call(
                "tool/call",
                json!({"sessionId": "ci-1", "callId": call, "name": "Bash", "arguments": {"command": "npm run test"}}),
            )
            .await);
        let id = c
            .send(
                "approval/request",
                json!({"sessionId": "ci-1", "agentId": "a", "toolName": "Bash", "callId": call}),
            )
            .await;
        let mut notices = Vec::new();
        let outcome = loop {
            let message = c.line().await.expect("the server closed the connection");
            if message["method"] == "approval/prompt" {
                c.send_value(&json!({"jsonrpc": "2.0", "id": message["id"], "result":
                    {"decision": "allow-always", "rule": rule, "scope": scope}}))
                    .await;
            } else if message["method"] == approval_host::serve::RULE_DECLINED {
                notices.push(message["params"].clone());
            } else if message["id"] == id {
                break message["result"]["outcome"].as_str().unwrap().to_owned();
            }
        };
        // The person's decision stands for this call either way.
        assert_eq!(outcome, "allowed-once", "{scope} {rule}");
        match &declined {
            Some(why) => {
                assert_eq!(notices.len(), 1, "{notices:?}");
                assert_eq!(notices[0]["reason"], why.as_str());
                assert_eq!(notices[0]["rule"], rule);
            }
            None => assert!(notices.is_empty(), "{notices:?}"),
        }
        let decided = super::support::events_at(&log_path(&dir.path().join("state"), "ci-1"))
            .into_iter()
            .rev()
            .find(|(t, _)| t == "approval/decided")
            .unwrap()
            .1;
        match &declined {
            Some(why) => assert_eq!(decided["ruleDeclined"], why.as_str()),
            None => assert!(decided["ruleAdded"].is_string(), "{decided}"),
        }
    }
    let rules = server.service().rules().unwrap().list(None);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].scope, RuleScope::Session);
    assert_eq!(rules[0].session.as_deref(), Some("ci-1"));
}

#[tokio::test]
async fn a_rules_log_in_doubt_loses_its_allows_never_its_rejects() {
    // Signed: a well-chained line appended after the last checkpoint waits for a checkpoint that
    // never comes. Unsigned: a line that breaks the chain. Either way a fresh process (a hook)
    // reads the log in doubt from its first read.
    for signed in [true, false] {
        let keys = tempfile::tempdir().unwrap();
        let (mut host, book) = if signed {
            signed_host(keys.path()).await
        } else {
            let host = Host::new();
            let book = enable(&host);
            (host, book)
        };
        add(&host, "Bash(cargo test:*)", Effect::Allow).await;
        let reject = add(&host, "Bash(git push:*)", Effect::Reject).await;
        let path = log_path(host.dir.path(), book.project_log_name());
        if signed {
            append_chained(
                &path,
                json!({"type": "rule/added", "data": {"id": "forged", "tool": "Bash",
                       "effect": "allow", "scope": "project", "creator": "cli:root"}}),
            );
        } else {
            let mut text = std::fs::read_to_string(&path).unwrap();
            text.push_str(&format!(
                "{}\n",
                json!({"v": 2, "seq": 99, "ts": "2026-12-06T00:00:00Z", "prev": "00",
                       "type": "rule/revoked", "data": {"id": reject, "by": "agent"}})
            ));
            std::fs::write(&path, text).unwrap();
        }
        drop(book);
        host.restart(approval_host::Policy::Ask);
        if signed {
            let signing =
                approval_host::audit::checkpoint::load_signing_key(&keys.path().join("audit.key"))
                    .unwrap();
            host.service.set_checkpointer(Some(Arc::new(
                approval_host::audit::checkpoint::Checkpointer::new(signing, host.dir.path()),
            )));
        }
        let _book = enable(&host);
        let v = bash(&host.service, "c1", "git push origin main").await;
        assert_eq!(v.outcome, Outcome::Rejected, "signed: {signed}");
        assert_eq!(
            v.answerer,
            Some(format!("rule:{reject}")),
            "signed: {signed}"
        );
        let v = bash(&host.service, "c2", "cargo test").await;
        assert_eq!(v.outcome, Outcome::Unavailable, "signed: {signed}");
    }
}

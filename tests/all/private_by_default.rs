//! What the host writes is its user's alone: session logs, rules logs and checkpoints are created
//! `0600` in `0700` directories whatever the umask, the Unix socket is `0600` from the moment it
//! appears, and a store URL over TCP that names no `sslmode` means TLS with the certificate
//! checked, never a connection a man in the middle can make plaintext.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use approval_host::answer::{Effect, RuleScope};
use approval_host::audit::checkpoint::{Checkpointer, keygen, load_signing_key};
use approval_host::audit::postgres::{Transport, transport};
use approval_host::private::{DIR_MODE, FILE_MODE};
use approval_host::rules::NewRule;
use approval_host::{ApprovalService, Deployment, Policy};

/// Every file and directory under `root` (itself included), with its permission bits.
fn modes(root: &Path) -> Vec<(String, bool, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        found.push((
            path.display().to_string(),
            meta.is_dir(),
            meta.permissions().mode() & 0o777,
        ));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_rules_logs_and_checkpoints_are_created_for_the_host_s_user_alone() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    keygen(&keys.join("audit.key")).unwrap();
    // Not there yet: the host makes the state directory itself.
    let state = dir.path().join("state");
    let service = ApprovalService::open_dir(&state, Policy::Ask);
    service.set_checkpointer(Some(Arc::new(Checkpointer::new(
        load_signing_key(&keys.join("audit.key")).unwrap(),
        &state,
    ))));
    let book = approval_host::assemble::rule_book(
        service.store(),
        &Deployment::embedded(),
        approval_host::rules::system_clock(),
    )
    .unwrap();
    service.set_rules(Some(book));

    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    service
        .add_rule(NewRule {
            rule: "Bash(make test)".to_owned(),
            effect: Effect::Allow,
            scope: RuleScope::Project,
            session: None,
            lasts: None,
            creator: "test".to_owned(),
            reason: None,
        })
        .await
        .unwrap();
    service
        .request(approval_host::ApprovalRequest::new(&agent, "Bash"))
        .await
        .unwrap();
    service.end_turn("s1").await.unwrap();

    let found = modes(&state);
    let files: Vec<_> = found.iter().filter(|(_, dir, _)| !dir).collect();
    assert!(
        files.iter().any(|(p, _, _)| p.ends_with("s1.jsonl"))
            && files.iter().any(|(p, _, _)| p.contains("rules."))
            && files.iter().any(|(p, _, _)| p.contains("checkpoints")),
        "expected a session log, a rules log and a checkpoint log: {found:?}"
    );
    for (path, is_dir, mode) in &found {
        let want = if *is_dir { DIR_MODE } else { FILE_MODE };
        assert_eq!(*mode, want, "{path} is {mode:o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unix_socket_is_0600_from_the_moment_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "").unwrap();
    let server = approval_host::serve::Server::start(approval_host::serve::ServeOptions {
        config,
        state_dir: dir.path().join("state"),
        quarantine: approval_host::plugin::QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let path = dir.path().join("serve.sock");
    let (s, p) = (server.clone(), path.clone());
    tokio::spawn(async move { s.serve_unix(&p).await });
    // The first sight of the path already has the private mode.
    let mode = loop {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            break meta.permissions().mode() & 0o777;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(mode, FILE_MODE);
    tokio::net::UnixStream::connect(&path).await.unwrap();
    // Nothing is left of the private directory it was bound in.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".approval-host-socket-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_store_url_over_tcp_without_sslmode_means_verified_tls() {
    for (url, want) in [
        (
            "postgres://approvals@db.internal/approvals",
            Transport::Verified,
        ),
        (
            "postgresql://db.internal:5433/approvals",
            Transport::Verified,
        ),
        (
            "host=db.internal dbname=approvals user=a",
            Transport::Verified,
        ),
        (
            "host=10.0.0.7 port=5432 dbname=approvals",
            Transport::Verified,
        ),
        (
            "postgres://db.internal/approvals?sslmode=require",
            Transport::Verified,
        ),
        (
            "postgres://db.internal/approvals?sslmode=verify-full",
            Transport::Verified,
        ),
        (
            "host=db.internal dbname=a sslmode=verify-ca",
            Transport::Verified,
        ),
        (
            "postgres://db.internal/approvals?application_name=x&sslmode=prefer",
            Transport::Opportunistic,
        ),
        (
            "host=db.internal dbname=a sslmode=disable",
            Transport::Plain,
        ),
        ("host=/run/postgresql dbname=approvals", Transport::Local),
        (
            "postgresql://%2Frun%2Fpostgresql/approvals",
            Transport::Local,
        ),
        // libpq's form: the query's socket directory replaces the host before the path.
        (
            "postgres://postgres@localhost:5432/approvals?host=/run/postgresql",
            Transport::Local,
        ),
        (
            "postgres://localhost/approvals?sslmode=require&host=%2Frun%2Fpostgresql",
            Transport::Local,
        ),
        (
            "postgres://[::1]:5433/approvals?host=/run/postgresql",
            Transport::Local,
        ),
        // A `hostaddr` is TCP, whatever `host` says: never taken for a socket.
        (
            "host=/run/postgresql hostaddr=203.0.113.5 dbname=approvals",
            Transport::Verified,
        ),
        (
            "postgres://app@/approvals?hostaddr=203.0.113.5",
            Transport::Verified,
        ),
        (
            "postgres://app@db/approvals?host=/run/postgresql&hostaddr=203.0.113.5",
            Transport::Verified,
        ),
        // A query host over TCP is TCP: the default stays verified TLS.
        (
            "postgres:///approvals?host=db.internal",
            Transport::Verified,
        ),
    ] {
        assert_eq!(transport(url).unwrap(), want, "{url}");
    }
    assert!(transport("host=db.internal sslmode=sometimes").is_err());
}

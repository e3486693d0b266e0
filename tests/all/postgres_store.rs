//! What the PostgreSQL store adds to the store contract: leases between hosts, fencing of a host
//! that lost its lease, retried serialization failures, and a versioned schema.

use std::time::Duration;

use approval_host::event::Event;
use approval_host::log::SessionLog;
use approval_host::postgres::{DbError, PASSWORD_ENV, schema};
use approval_host::{LogError, PgOptions, PgStore, Store};

use crate::support::pg::{fresh_schema, sql, store};

const LEASE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_second_host_is_refused_an_owned_session_and_told_who_owns_it() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    let b = store(&url, "host-b", LEASE);
    let log = SessionLog::open(&a, "s1").unwrap();
    log.append(Event::TurnStart).await.unwrap();

    let err = SessionLog::open(&b, "s1").unwrap_err();
    let LogError::Locked { holder, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(holder.as_deref().unwrap().starts_with("host-a #"), "{err}");
    assert!(
        err.to_string()
            .starts_with("session log postgres:s1 is in use by host-a #"),
        "{err}"
    );

    // Closing the log releases the lease at once: the other host opens it and sees the record.
    drop(log);
    let log = SessionLog::open(&b, "s1").unwrap();
    assert_eq!(log.len(), 1);
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_owner_can_no_longer_write() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    let b = store(&url, "host-b", LEASE);
    let stale = SessionLog::open(&a, "s1").unwrap();
    stale.append(Event::TurnStart).await.unwrap();
    // Host A stalls past its lease (a long pause, a partition): the row says it expired.
    sql(
        &url,
        "UPDATE approval_leases SET expires_at = now() - INTERVAL '1 second'",
    );

    let taken = SessionLog::open(&b, "s1").unwrap();
    assert_eq!(taken.len(), 1);
    taken.append(Event::TurnEnd).await.unwrap();

    // A wakes up and writes: refused, naming the new owner, and nothing it sent is stored.
    let err = stale.append(Event::TurnEnd).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the session's lease was taken over by host-b #"),
        "{text}"
    );
    let lines = String::from_utf8(b.read("s1").unwrap()).unwrap();
    let types: Vec<String> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"].to_string())
        .collect();
    assert_eq!(types, ["\"turn/start\"", "\"turn/end\""]);
    // The stale log refuses everything from now on.
    assert!(matches!(
        stale.append(Event::TurnStart).await.unwrap_err(),
        LogError::Poisoned { .. }
    ));
}

#[tokio::test]
async fn a_takeover_that_commits_while_an_append_waits_for_the_lease_refuses_the_append() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    let stale = SessionLog::open(&a, "s1").unwrap();
    stale.append(Event::TurnStart).await.unwrap();
    // Another host's takeover, begun and not committed: it holds the lease row.
    let (taker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let taker_pid: i32 = taker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    taker
        .batch_execute(
            "BEGIN; UPDATE approval_leases SET owner = 'host-b #takeover' WHERE session = 's1'",
        )
        .await
        .unwrap();
    // The append's commit (one session's rows: the one-session statement) waits for that lock.
    let append = tokio::spawn(async move {
        stale
            .append(Event::TurnEnd)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let (watcher, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    loop {
        assert!(
            !append.is_finished(),
            "the append ended without waiting for the takeover: {:?}",
            append.await
        );
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&taker_pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    taker.batch_execute("COMMIT").await.unwrap();
    // The lock's recheck finds the new owner: refused, named, and nothing of it stored.
    let refused = append.await.unwrap().unwrap_err();
    assert!(
        refused.contains("the session's lease was taken over by host-b #takeover"),
        "{refused}"
    );
    assert_eq!(a.log_len("s1").unwrap(), Some(1));
}

#[tokio::test]
async fn serialization_failures_are_retried_and_the_batch_commits_once() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    // The database itself fails the next two inserts with SQLSTATE 40001, as a distributed
    // database does under contention (a sequence, so the count survives the rollbacks).
    sql(
        &url,
        "CREATE SEQUENCE failures;
         CREATE FUNCTION fail_twice() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('failures') <= 2 THEN
                 RAISE EXCEPTION 'injected conflict' USING ERRCODE = '40001';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER fail_twice BEFORE INSERT ON approval_records
             FOR EACH ROW EXECUTE FUNCTION fail_twice();",
    );
    let log = SessionLog::open(&a, "s1").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    assert_eq!(a.retries(), 2);
    drop(log);
    assert_eq!(a.log_len("s1").unwrap(), Some(1));
    assert_eq!(SessionLog::open(&a, "s1").unwrap().len(), 1);
}

#[tokio::test]
async fn an_unrecoverable_database_error_stops_the_log_and_stores_nothing() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    sql(
        &url,
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'disk full (injected)' USING ERRCODE = '53100'; END $$;
         CREATE TRIGGER refuse BEFORE INSERT ON approval_records
             FOR EACH ROW EXECUTE FUNCTION refuse();",
    );
    let log = SessionLog::open(&a, "s1").unwrap();
    let err = log.append(Event::TurnStart).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("disk full (injected) (SQLSTATE 53100)"),
        "{err}"
    );
    assert_eq!(a.retries(), 0);
    assert!(matches!(
        log.append(Event::TurnStart).await.unwrap_err(),
        LogError::Poisoned { .. }
    ));
    drop(log);
    assert_eq!(a.log_len("s1").unwrap(), Some(0));
}

#[test]
fn the_schema_is_created_by_migrate_and_refused_when_behind_or_ahead() {
    let url = fresh_schema();
    let mut options = PgOptions::new(&url);
    options.host_label = "host-a".into();

    // An empty database: refused until migrated, with the command to run.
    let err = PgStore::connect(options.clone()).unwrap_err();
    assert!(
        matches!(err, DbError::SchemaBehind { found: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the database schema is at version 0, this host needs version {}: run `approval-host db migrate` (or start with --migrate)",
            schema::CURRENT_VERSION
        )
    );

    options.migrate = true;
    let store = PgStore::connect(options.clone()).unwrap();
    assert_eq!(store.schema_version().unwrap(), schema::CURRENT_VERSION);
    // Migrating again changes nothing.
    assert_eq!(
        store.migrate().unwrap(),
        (schema::CURRENT_VERSION, schema::CURRENT_VERSION)
    );
    drop(store);

    // A schema from a newer host is never misread.
    sql(
        &url,
        &format!(
            "UPDATE approval_schema SET version = {}",
            schema::CURRENT_VERSION + 1
        ),
    );
    let err = PgStore::connect(options).unwrap_err();
    assert!(matches!(err, DbError::SchemaAhead { .. }), "{err:?}");
}

#[test]
fn two_hosts_migrating_at_once_both_end_on_the_current_version() {
    let url = fresh_schema();
    let hosts: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut options = PgOptions::new(url);
                options.host_label = format!("host-{i}");
                options.migrate = true;
                PgStore::connect(options).map(|s| s.schema_version().unwrap())
            })
        })
        .collect();
    for host in hosts {
        assert_eq!(host.join().unwrap().unwrap(), schema::CURRENT_VERSION);
    }
}

#[test]
fn a_password_comes_from_the_options_never_the_url() {
    assert_eq!(PASSWORD_ENV, "APPROVAL_HOST_DB_PASSWORD");
    let err = approval_host::postgres::check_url("postgres://agent:hunter2@db.example/approvals")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "store URL: a password in the URL is refused (it would show in process listings); set APPROVAL_HOST_DB_PASSWORD or the deployment's [store] password-file instead"
    );
    approval_host::postgres::check_url("postgres://agent@db.example/approvals").unwrap();
    let err = approval_host::postgres::check_url("postgres://[::1").unwrap_err();
    assert!(err.to_string().starts_with("store URL: "), "{err}");
}

#[tokio::test]
async fn reading_listing_and_measuring_logs_never_takes_a_lease() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    let b = store(&url, "host-b", LEASE);
    let log = SessionLog::open(&a, "s2").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    log.append(Event::TurnEnd).await.unwrap();
    SessionLog::open(&a, "s1")
        .unwrap()
        .append(Event::TurnStart)
        .await
        .unwrap();

    assert_eq!(b.list().unwrap(), ["s1", "s2"]);
    assert_eq!(b.log_len("s2").unwrap(), Some(2));
    assert_eq!(b.log_len("nobody").unwrap(), Some(0));
    assert!(b.read("nobody").unwrap().is_empty());
    let text = String::from_utf8(b.read("s2").unwrap()).unwrap();
    assert_eq!(text.lines().count(), 2);
    // The exact lines: the chain verifies as it does on a file.
    let report = approval_host::audit::verify::verify_reader(text.as_bytes(), "s2").unwrap();
    assert!(report.intact(), "{report:?}");
    // s2 is still open on host A.
    assert!(matches!(
        SessionLog::open(&b, "s2").unwrap_err(),
        LogError::Locked { .. }
    ));
}

#[tokio::test]
async fn a_database_at_the_previous_schema_version_migrates_and_keeps_its_logs() {
    let url = fresh_schema();
    // A database as the previous version of the host left it: version 1, with a session log.
    let (version, statements) = schema::MIGRATIONS[schema::MIGRATIONS.len() - 2];
    sql(
        &url,
        &format!(
            "{}{statements} UPDATE approval_schema SET version = {version};",
            schema::ENSURE_VERSION_TABLE
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let file_store = approval_host::DirStore::new(dir.path());
    {
        let log = SessionLog::open(&file_store, "s1").unwrap();
        log.append(Event::TurnStart).await.unwrap();
        log.append(Event::TurnEnd).await.unwrap();
    }
    let old_lines = String::from_utf8(file_store.read("s1").unwrap()).unwrap();
    let mut inserts = String::new();
    for (i, line) in old_lines.lines().enumerate() {
        inserts.push_str(&format!(
            "INSERT INTO approval_records (session, seq, line) VALUES ('s1', {}, '{}');",
            i + 1,
            line.replace('\'', "''")
        ));
    }
    sql(&url, &inserts);

    // The current host refuses it until migrated, then reads and extends the old log.
    let mut options = PgOptions::new(&url);
    options.host_label = "host-a".into();
    let err = PgStore::connect(options.clone()).unwrap_err();
    assert!(
        matches!(err, DbError::SchemaBehind { found, .. } if found == version),
        "{err:?}"
    );
    options.migrate = true;
    let store = PgStore::connect(options).unwrap();
    assert_eq!(store.schema_version().unwrap(), schema::CURRENT_VERSION);
    let log = SessionLog::open(&store, "s1").unwrap();
    assert_eq!(log.len(), 2);
    log.append(Event::TurnStart).await.unwrap();
    drop(log);
    let text = String::from_utf8(store.read("s1").unwrap()).unwrap();
    assert!(text.starts_with(&old_lines), "{text}");
    let report = approval_host::audit::verify::verify_reader(text.as_bytes(), "s1").unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.records, 3);
    // New rows name the host that wrote them; the old ones stay as they were.
    sql(
        &url,
        "DO $$ BEGIN
             IF (SELECT count(*) FROM approval_records WHERE written_by IS NULL) <> 2
                OR (SELECT written_by FROM approval_records WHERE seq = 3) <> 'host-a' THEN
                 RAISE EXCEPTION 'written_by is wrong';
             END IF;
         END $$;",
    );
}

#[tokio::test]
async fn tls_to_the_database_trusts_the_named_authority_and_no_other() {
    let url = std::env::var("APPROVAL_HOST_TEST_POSTGRES_TLS")
        .expect("run the tests through .ci/with-postgres (it serves TLS on a loopback port)");
    let ca = std::env::var("APPROVAL_HOST_TEST_POSTGRES_CA").unwrap();
    let schema = fresh_schema();
    let search_path = schema.rsplit(' ').next().unwrap();
    let url = format!("{url} {search_path}");

    // sslmode=require: the connection is TLS or nothing, and the certificate must chain to ca.
    let mut options = PgOptions::new(&url);
    options.host_label = "host-a".into();
    options.migrate = true;
    options.ca_file = Some(ca.into());
    let store = PgStore::connect(options.clone()).unwrap();
    let log = SessionLog::open(&store, "s1").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    drop(log);
    assert_eq!(store.log_len("s1").unwrap(), Some(1));

    // The system's authorities do not know the test's certificate: refused, never plaintext.
    options.ca_file = None;
    let err = PgStore::connect(options.clone()).unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    options.ca_file = Some(empty.clone());
    let err = PgStore::connect(options).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("store TLS: {}: no CERTIFICATE in the file", empty.display())
    );
}

#[tokio::test]
async fn over_tcp_a_url_without_sslmode_is_tls_with_the_certificate_checked() {
    let url = std::env::var("APPROVAL_HOST_TEST_POSTGRES_TLS")
        .expect("run the tests through .ci/with-postgres (it serves TLS on a loopback port)");
    let ca = std::env::var("APPROVAL_HOST_TEST_POSTGRES_CA").unwrap();
    let schema = fresh_schema();
    let search_path = schema.rsplit(' ').next().unwrap();
    let unwritten = url.replace("sslmode=require", "");
    assert!(!unwritten.contains("sslmode"), "{unwritten}");

    // No sslmode, or libpq's verify-full: TLS, and the certificate must chain to the CA file.
    for url in [
        format!("{unwritten} {search_path}"),
        format!("{unwritten} sslmode=verify-full {search_path}"),
    ] {
        let mut options = PgOptions::new(&url);
        options.migrate = true;
        options.ca_file = Some(ca.clone().into());
        let store = PgStore::connect(options.clone()).unwrap();
        assert!(store.log_len("s1").unwrap().is_none_or(|n| n == 0));
        // The system's authorities do not know the test's certificate: refused, never
        // plaintext.
        options.ca_file = None;
        let err = PgStore::connect(options).unwrap_err();
        assert!(err.to_string().contains("certificate"), "{url}: {err}");
    }
}

#[tokio::test]
async fn a_url_naming_the_servers_unix_socket_connects_as_libpq_reads_it_without_tls() {
    let keywords = fresh_schema();
    let field = |key: &str| {
        keywords
            .split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap()
            .to_owned()
    };
    let (dir, port) = (field("host"), field("port"));
    let schema = field("options").replace("-csearch_path=", "");
    // libpq's documented form: the `host` query parameter (a socket directory) replaces the host
    // before the path; the port stays, naming the socket file.
    let url = format!(
        "postgres://postgres@localhost:{port}/approval_test?host={dir}&options=-csearch_path%3D{schema}&application_name={schema}"
    );
    assert_eq!(
        approval_host::postgres::transport(&url).unwrap(),
        approval_host::postgres::Transport::Local,
        "{url}"
    );
    let mut options = PgOptions::new(&url);
    options.migrate = true;
    let store = PgStore::connect(options).unwrap();
    let log = SessionLog::open(&store, "s1").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    drop(log);
    assert_eq!(store.log_len("s1").unwrap(), Some(1));
    // Written into the fresh schema (the query's options were read too), over no TLS.
    sql(
        &keywords,
        "DO $$ BEGIN
             IF (SELECT count(*) FROM approval_records) <> 1
                OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = current_schema()) THEN
                 RAISE EXCEPTION 'the record is not in the schema';
             END IF;
             IF (SELECT bool_or(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                 WHERE application_name = current_schema()) THEN
                 RAISE EXCEPTION 'a store connection uses TLS';
             END IF;
         END $$;",
    );
    // A URL that names no host in its query keeps its own hosts (TCP, so TLS by default).
    assert_eq!(
        approval_host::postgres::transport(&format!(
            "postgres://postgres@localhost:{port}/approval_test"
        ))
        .unwrap(),
        approval_host::postgres::Transport::Verified
    );
}

#[tokio::test]
async fn syncs_of_many_sessions_share_commits_and_a_lost_lease_refuses_only_its_own_rows() {
    let url = fresh_schema();
    let a = store(&url, "host-a", LEASE);
    let b = store(&url, "host-b", LEASE);
    let logs: Vec<SessionLog> = (0..16)
        .map(|i| SessionLog::open(&a, &format!("s{i}")).unwrap())
        .collect();
    for log in &logs {
        log.append(Event::TurnStart).await.unwrap();
    }
    // s3's lease runs out and host B takes the session over.
    sql(
        &url,
        "UPDATE approval_leases SET expires_at = now() - INTERVAL '1 second' WHERE session = 's3'",
    );
    let taken = SessionLog::open(&b, "s3").unwrap();
    // Every session of A syncs at once (their rows committed in shared batches): all but s3
    // commit; s3 is refused, naming its new owner, and none of its rows is stored.
    let ends = logs.iter().map(|log| log.append(Event::TurnEnd));
    let results = futures_util::future::join_all(ends).await;
    for (i, result) in results.into_iter().enumerate() {
        if i == 3 {
            let text = result.unwrap_err().to_string();
            assert!(
                text.contains("the session's lease was taken over by host-b #"),
                "{text}"
            );
        } else {
            result.unwrap();
            assert_eq!(a.log_len(&format!("s{i}")).unwrap(), Some(2), "s{i}");
        }
    }
    assert_eq!(a.log_len("s3").unwrap(), Some(1));
    taken.append(Event::TurnEnd).await.unwrap();
    assert_eq!(b.log_len("s3").unwrap(), Some(2));
    sql(
        &url,
        "DO $$ BEGIN
             IF (SELECT count(*) FROM approval_records WHERE session = 's3' AND written_by = 'host-a') <> 1 THEN
                 RAISE EXCEPTION 'host-a wrote s3 after losing it';
             END IF;
         END $$;",
    );
}

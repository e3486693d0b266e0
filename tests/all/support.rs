//! Shared fixtures: a service over a temporary state directory, a store whose writes can be made
//! to fail or to wait, listeners that count their calls, and readers for the log on disk.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use approval_host::{
    ApprovalService, Decision, DirStore, Failure, Journal, LogError, OpenedLog, Policy, Question,
    Store,
};
use serde_json::Value;

/// A service over a fresh temporary state directory.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub service: ApprovalService,
}

impl Host {
    pub fn new() -> Self {
        Self::with_policy(Policy::Ask)
    }

    pub fn with_policy(policy: Policy) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let service = ApprovalService::open_dir(dir.path(), policy);
        Host { dir, service }
    }

    /// A new service over the same state directory, as after a restart.
    pub fn restart(&mut self, policy: Policy) {
        self.service = ApprovalService::open_dir(self.dir.path(), policy);
    }

    pub fn events(&self, session: &str) -> Vec<(String, Value)> {
        events_at(&log_path(self.dir.path(), session))
    }

    /// The complete records of a session's log that may still be being written.
    pub fn events_so_far(&self, session: &str) -> Vec<(String, Value)> {
        events_so_far(&log_path(self.dir.path(), session))
    }

    /// Another process on the same state directory.
    pub fn another_service(&self, policy: Policy) -> ApprovalService {
        ApprovalService::open_dir(self.dir.path(), policy)
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.service.store()
    }
}

/// A store for the log contract suite: the directory store over a fresh directory (and, in
/// `on_postgres`, a fresh schema of the test database).
pub struct LogFixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
}

impl LogFixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(DirStore::new(dir.path()));
        LogFixture { _dir: dir, store }
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub fn service(&self, policy: Policy) -> ApprovalService {
        ApprovalService::with_store(self.store.clone(), policy)
    }

    pub fn events(&self, session: &str) -> Vec<(String, Value)> {
        events_in(&String::from_utf8(self.store.read(session).unwrap()).unwrap())
    }
}

/// A fresh home and a fresh git project beside it, as a new user has them: (the directory
/// holding both, the home, the project).
pub fn home_and_git_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(git.success());
    (dir, home, project)
}

pub fn log_path(state_dir: &Path, session: &str) -> PathBuf {
    DirStore::new(state_dir).session_path(session)
}

/// The records of a log that is still being written: its complete lines only (the last may be
/// half written), as `(type, data)`. For waiting on a live log; a finished one is read with
/// [`events_at`], which refuses a torn line.
pub fn events_so_far(path: &Path) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    events_in(complete)
}

/// Every line of a log as `(type, data)`, asserting the record shape on the way.
pub fn events_at(path: &Path) -> Vec<(String, Value)> {
    events_in(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Every line of a log's text as `(type, data)`, asserting the record shape on the way.
pub fn events_in(text: &str) -> Vec<(String, Value)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line).unwrap();
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            // Chained lines (log format 2).
            assert_eq!(
                keys,
                ["v", "seq", "ts", "type", "data", "prev"],
                "line {}",
                i + 1
            );
            assert_eq!(v["seq"], (i + 1) as u64);
            (v["type"].as_str().unwrap().to_owned(), v["data"].clone())
        })
        .collect()
}

/// The event types of a log, in order.
pub fn types(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(t, _)| t.as_str()).collect()
}

/// A listener that always answers `decision` and counts its calls.
pub fn counting(decision: Decision) -> (Arc<AtomicUsize>, impl approval_host::Listener) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let listener = move |_q: Question| {
        c.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Failure>(decision) }
    };
    (calls, listener)
}

/// Controls what [`ControlledStore`]'s journals do.
#[derive(Default)]
pub struct Control {
    /// Journal appends so far (each is one group commit).
    pub appends: AtomicUsize,
    /// Appends that succeed before every later one fails; `usize::MAX` never fails.
    pub fail_after: AtomicUsize,
    /// While set, an append waits until it is cleared.
    held: Mutex<bool>,
    released: Condvar,
    /// While set, closing a journal waits until it is cleared.
    close_held: Mutex<bool>,
    /// How many journals have begun closing.
    closing: Mutex<usize>,
    close_changed: Condvar,
}

/// The error every failing append returns.
pub const INJECTED: &str = "injected disk failure";

impl Control {
    pub fn new() -> Arc<Self> {
        let c = Control::default();
        c.fail_after.store(usize::MAX, Ordering::SeqCst);
        Arc::new(c)
    }

    /// Lets `n` more appends succeed, then fails the rest.
    pub fn fail_after(&self, n: usize) {
        let done = self.appends.load(Ordering::SeqCst);
        self.fail_after.store(done + n, Ordering::SeqCst);
    }

    pub fn hold(&self) {
        *self.held.lock().unwrap() = true;
    }

    pub fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.released.notify_all();
    }

    pub fn hold_close(&self) {
        *self.close_held.lock().unwrap() = true;
    }

    pub fn release_close(&self) {
        *self.close_held.lock().unwrap() = false;
        self.close_changed.notify_all();
    }

    /// Blocks until a journal has begun closing.
    pub fn wait_closing(&self) {
        let mut closing = self.closing.lock().unwrap();
        while *closing == 0 {
            closing = self.close_changed.wait(closing).unwrap();
        }
    }
}

/// The file store, with journals that obey a [`Control`].
pub struct ControlledStore {
    pub inner: DirStore,
    pub control: Arc<Control>,
}

struct ControlledJournal {
    inner: Box<dyn Journal>,
    control: Arc<Control>,
}

impl Journal for ControlledJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut held = self.control.held.lock().unwrap();
        while *held {
            held = self.control.released.wait(held).unwrap();
        }
        drop(held);
        let n = self.control.appends.fetch_add(1, Ordering::SeqCst);
        if n >= self.control.fail_after.load(Ordering::SeqCst) {
            return Err(io::Error::new(io::ErrorKind::StorageFull, INJECTED));
        }
        self.inner.append(bytes)
    }
}

impl Drop for ControlledJournal {
    fn drop(&mut self) {
        *self.control.closing.lock().unwrap() += 1;
        self.control.close_changed.notify_all();
        let mut held = self.control.close_held.lock().unwrap();
        while *held {
            held = self.control.close_changed.wait(held).unwrap();
        }
    }
}

impl Store for ControlledStore {
    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        let opened = self.inner.open(session)?;
        Ok(OpenedLog {
            name: opened.name,
            records: opened.records,
            tail: opened.tail,
            journal: Box::new(ControlledJournal {
                inner: opened.journal,
                control: self.control.clone(),
            }),
            taken_over: opened.taken_over,
        })
    }
}

/// A service whose store obeys the returned control.
pub fn controlled(policy: Policy) -> (tempfile::TempDir, ApprovalService, Arc<Control>) {
    let dir = tempfile::tempdir().unwrap();
    let control = Control::new();
    let service = ApprovalService::new(
        ControlledStore {
            inner: DirStore::new(dir.path()),
            control: control.clone(),
        },
        policy,
    );
    (dir, service, control)
}

/// Counts and steers what [`SyncCountingStore`]'s journals do.
#[derive(Default)]
pub struct SyncControl {
    /// `write` calls that wrote something.
    pub writes: AtomicUsize,
    /// `sync` calls.
    pub syncs: AtomicUsize,
    /// When set, every sync fails.
    pub fail_syncs: std::sync::atomic::AtomicBool,
    /// While set, a sync waits until it is cleared; `entered` counts syncs that began waiting.
    held: Mutex<bool>,
    changed: Condvar,
    entered: Mutex<usize>,
    entered_changed: Condvar,
}

impl SyncControl {
    pub fn hold(&self) {
        *self.held.lock().unwrap() = true;
    }

    pub fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.changed.notify_all();
    }

    /// Blocks until a sync is waiting on the hold.
    pub fn wait_entered(&self) {
        let mut entered = self.entered.lock().unwrap();
        while *entered == 0 {
            entered = self.entered_changed.wait(entered).unwrap();
        }
    }
}

/// The file store (write and sync apart, one sync per request), counting writes and syncs.
pub struct SyncCountingStore {
    pub inner: DirStore,
    pub control: Arc<SyncControl>,
}

struct SyncCountingJournal {
    inner: Box<dyn Journal>,
    control: Arc<SyncControl>,
}

impl Journal for SyncCountingJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)?;
        self.sync()
    }

    fn commit_mode(&self) -> approval_host::CommitMode {
        self.inner.commit_mode()
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.control.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut held = self.control.held.lock().unwrap();
        if *held {
            *self.control.entered.lock().unwrap() += 1;
            self.control.entered_changed.notify_all();
        }
        while *held {
            held = self.control.changed.wait(held).unwrap();
        }
        drop(held);
        self.control.syncs.fetch_add(1, Ordering::SeqCst);
        if self.control.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::other(INJECTED));
        }
        self.inner.sync()
    }
}

impl Store for SyncCountingStore {
    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        let opened = self.inner.open(session)?;
        Ok(OpenedLog {
            name: opened.name,
            records: opened.records,
            tail: opened.tail,
            journal: Box::new(SyncCountingJournal {
                inner: opened.journal,
                control: self.control.clone(),
            }),
            taken_over: opened.taken_over,
        })
    }
}

/// A service over the file store whose syncs the returned control counts.
pub fn sync_counting(policy: Policy) -> (tempfile::TempDir, ApprovalService, Arc<SyncControl>) {
    let dir = tempfile::tempdir().unwrap();
    let control = Arc::new(SyncControl::default());
    let service = ApprovalService::new(
        SyncCountingStore {
            inner: DirStore::new(dir.path()),
            control: control.clone(),
        },
        policy,
    );
    (dir, service, control)
}

/// The suites that run on both stores: `tests/all/main.rs` includes them a second time with this
/// module's [`PgHost`] as their `Host`.
pub mod pg {
    use std::sync::Arc;
    use std::time::Duration;

    use approval_host::{ApprovalService, PgOptions, PgStore, Policy, Store};
    use serde_json::Value;

    /// The environment variable `.ci/with-postgres` sets to the throwaway cluster's database.
    pub const URL_ENV: &str = "APPROVAL_HOST_TEST_POSTGRES";

    /// The test database: tests that need PostgreSQL fail, never skip, without it.
    pub fn base_url() -> String {
        std::env::var(URL_ENV).unwrap_or_else(|_| {
            panic!(
                "{URL_ENV} is not set: run the tests through .ci/with-postgres (it starts a throwaway PostgreSQL cluster)"
            )
        })
    }

    /// Runs SQL statements on the test database, from any thread or runtime.
    pub fn sql(url: &str, statements: &str) {
        let (url, statements) = (url.to_owned(), statements.to_owned());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client.batch_execute(&statements).await.unwrap();
            });
        })
        .join()
        .unwrap();
    }

    /// A fresh, empty schema of the test database, and a URL that works in it.
    pub fn fresh_schema() -> String {
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let base = base_url();
        sql(&base, &format!("CREATE SCHEMA {schema}"));
        format!("{base} options=-csearch_path={schema}")
    }

    /// A store on `url` (migrated), labelled `label`, with leases of `lease`.
    pub fn store(url: &str, label: &str, lease: Duration) -> PgStore {
        let mut options = PgOptions::new(url);
        options.host_label = label.to_owned();
        options.lease = lease;
        options.migrate = true;
        options.max_connections = 4;
        PgStore::connect(options).unwrap()
    }

    /// The log contract suite's store on PostgreSQL: a fresh schema.
    pub struct PgLogFixture {
        store: Arc<dyn Store>,
    }

    impl PgLogFixture {
        pub fn new() -> Self {
            PgLogFixture {
                store: Arc::new(store(&fresh_schema(), "host-a", Duration::from_secs(15))),
            }
        }

        pub fn store(&self) -> &dyn Store {
            &*self.store
        }

        pub fn service(&self, policy: Policy) -> ApprovalService {
            ApprovalService::with_store(self.store.clone(), policy)
        }

        pub fn events(&self, session: &str) -> Vec<(String, Value)> {
            super::events_in(&String::from_utf8(self.store.read(session).unwrap()).unwrap())
        }
    }

    /// The fixture of the shared suites on PostgreSQL: a service over a fresh schema.
    pub struct PgHost {
        pub url: String,
        pub service: ApprovalService,
    }

    impl PgHost {
        pub fn new() -> Self {
            Self::with_policy(Policy::Ask)
        }

        pub fn with_policy(policy: Policy) -> Self {
            let url = fresh_schema();
            let service =
                ApprovalService::new(store(&url, "host-a", Duration::from_secs(15)), policy);
            PgHost { url, service }
        }

        /// A new service on the same database, as after a restart.
        pub fn restart(&mut self, policy: Policy) {
            self.service =
                ApprovalService::new(store(&self.url, "host-a", Duration::from_secs(15)), policy);
        }

        /// Another host on the same database.
        pub fn another_service(&self, policy: Policy) -> ApprovalService {
            ApprovalService::new(store(&self.url, "host-b", Duration::from_secs(15)), policy)
        }

        pub fn events(&self, session: &str) -> Vec<(String, Value)> {
            let bytes = self.service.store().read(session).unwrap();
            super::events_in(&String::from_utf8(bytes).unwrap())
        }

        /// As [`Self::events`]: the database hands out whole records only.
        pub fn events_so_far(&self, session: &str) -> Vec<(String, Value)> {
            self.events(session)
        }

        pub fn store(&self) -> Arc<dyn Store> {
            self.service.store()
        }
    }
}

/// A `serve --no-watch --socket` child of a deployment, ready once it accepts a connection;
/// killed when dropped.
pub struct SocketServer {
    child: std::process::Child,
    socket: PathBuf,
}

impl SocketServer {
    pub fn start(state: &Path, config: &Path) -> SocketServer {
        let socket = state.join("serve.sock");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(state)
            .args(["serve", "--no-watch", "--config"])
            .arg(config)
            .arg("--socket")
            .arg(&socket)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not start listening"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        SocketServer { child, socket }
    }

    pub fn socket(&self) -> &str {
        self.socket.to_str().unwrap()
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `approval-host --state-dir STATE hook CLI ARGS…` with `stdin` written to it, running (no
/// inherited `RUST_LOG` or `TRACEPARENT`, so what it logs and traces is the test's choice).
pub fn spawn_hook(state: &Path, cli: &str, args: &[&str], stdin: &str) -> std::process::Child {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(state)
        .args(["hook", cli])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("TRACEPARENT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child
}

/// Turns on standing rules for `service`: a fresh rule book for project `project` over its store,
/// with no deployment rules, no plugin-made scopes and the system clock.
pub fn rules_on(service: &ApprovalService, project: &str) -> Arc<approval_host::rules::RuleBook> {
    let book = approval_host::rules::RuleBook::open(
        service.store(),
        project,
        vec![],
        vec![],
        approval_host::rules::system_clock(),
    )
    .unwrap();
    service.set_rules(Some(book.clone()));
    book
}

/// A string nested in `depth` arrays: JSON as deep as a test needs.
pub fn nested(depth: usize) -> Value {
    let mut v = Value::from("x");
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

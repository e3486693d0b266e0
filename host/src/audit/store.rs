//! Where session logs live: the [`Store`] and [`Journal`] seams, and the embedded default, one
//! append-only JSON-lines file per session under `<state-dir>/sessions/<session-id>.jsonl`.
//!
//! The file store makes three promises: an append returns only once its bytes are durable
//! (`fdatasync`); a torn last line left by a crash is truncated on open, with a warning, and every
//! complete line survives; and one process at a time writes a session (an exclusive file lock).

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::audit::chain::{self, Head};
use crate::audit::descriptors::{Descriptors, Handle, lock_patiently};
use crate::audit::error::LogError;
use crate::audit::event::Record;
use crate::audit::fold::SessionFold;
use crate::audit::kept::{self, KeySource, Mark, Resumed};

/// Durable storage for one session's records, appended in batches.
///
/// [`Journal::append`] is all a journal must provide. [`Journal::commit_mode`] tells the log how
/// to drive it: on the appending task ([`CommitMode::Inline`], for journals that never wait), or
/// on a small shared pool of commit threads ([`CommitMode::Blocking`], the default), or with the
/// write and the sync apart ([`CommitMode::Split`]) so an approval question is written before it is
/// asked and made durable together with its decision: one sync per request.
pub trait Journal: Send + 'static {
    /// Writes `bytes` (whole lines) at the end and returns once they are durable. On error the
    /// journal must not leave a partial batch behind when it can avoid it.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// How the log commits to this journal.
    fn commit_mode(&self) -> CommitMode {
        CommitMode::Blocking
    }

    /// [`CommitMode::Split`] only: writes `bytes` at the end without waiting for durability
    /// (a page-cache write, quick enough to run on the appending task).
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.append(bytes)
    }

    /// [`CommitMode::Split`] only: makes everything written so far durable.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Whether a commit may run on the thread that asks for it, when the process commits in
    /// place ([`crate::audit::log::commit_in_place`]): a journal whose sync waits only for a local
    /// device, not for another runtime or the network.
    fn commits_in_place(&self) -> bool {
        false
    }

    /// [`CommitMode::Split`] only: whether [`Journal::detach_sync`] hands a sync over to work
    /// that finishes it without the committing thread (a database client's own runtime): the log
    /// then starts its commits on the asking task and is told when they are durable, with no
    /// commit thread between them.
    fn syncs_detached(&self) -> bool {
        false
    }

    /// When [`Journal::syncs_detached`]: takes everything written so far for a sync the log starts
    /// at once (this call must not wait). The journal counts those lines as its own from here; a
    /// sync that fails stops the log, which is reopened from what is stored. The default refuses,
    /// and the log stops with that error rather than commit nothing.
    fn detach_sync(&mut self) -> Box<dyn DetachedSync> {
        Box::new(Refused)
    }

    /// Called as the log closes with every record durable: it holds `records`, its last line's
    /// chain value is `head`, and `fold` is its state. A store that keeps folds beside its logs
    /// ([`crate::audit::kept`]) may keep this one, at its own pace. Best effort: a fold not kept
    /// costs the next open time, nothing else. The default keeps none.
    fn keep(&mut self, _records: u64, _head: &Head, _fold: &SessionFold) {}
}

/// A sync taken by [`Journal::detach_sync`].
pub trait DetachedSync: Send {
    /// Starts the sync; `done` is called once, from any thread, when the lines are durable or
    /// with why they are not; dropping it uncalled stops the log ([`NO_REPORT`]). `done` does not
    /// block, and may start the log's next sync: report success from elsewhere than this call
    /// (a failure may be reported before it returns).
    fn start(self: Box<Self>, done: SyncDone);
}

/// Where a [`DetachedSync`] reports.
pub type SyncDone = Box<dyn FnOnce(io::Result<()>) + Send + Sync>;

/// Why a log stopped whose journal says it syncs detached but has no way to.
pub const NO_DETACHED_SYNC: &str =
    "this journal says it syncs detached but does not implement detach_sync";

/// Why a log stopped whose journal dropped a detached sync without reporting it.
pub const NO_REPORT: &str = "the journal dropped a sync without reporting whether it was durable";

/// Starts `sync` and waits for its report, on this thread: for a log being closed.
pub(crate) fn wait_for(sync: Box<dyn DetachedSync>) -> io::Result<()> {
    let (tell, told) = std::sync::mpsc::sync_channel(1);
    sync.start(Box::new(move |result| {
        let _ = tell.send(result);
    }));
    told.recv()
        .unwrap_or_else(|_| Err(io::Error::other(NO_REPORT)))
}

/// The sync of a journal that said it syncs detached and has no way to.
struct Refused;

impl DetachedSync for Refused {
    fn start(self: Box<Self>, done: SyncDone) {
        done(Err(io::Error::other(NO_DETACHED_SYNC)));
    }
}

/// Most threads committing session logs at once, whatever the number of open sessions: syncs of
/// different logs overlap on the device up to about this many.
pub const MAX_COMMIT_THREADS: usize = 16;

/// How a session log drives its [`Journal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// `append` never waits (a journal in memory, or one that discards): committed on the
    /// appending task, with no hand-off to another thread.
    Inline,
    /// `append` may block (disk, network): committed on the shared commit threads, concurrent
    /// appends grouped into one call. An approval question is committed before it is asked.
    Blocking,
    /// `write` is quick and `sync` blocks: an approval question is written before it is asked and
    /// synced with its decision; syncs run on the shared commit threads, grouped.
    Split,
}

/// An opened session log: what is already durable, and where to append.
pub struct OpenedLog {
    /// A name for the log in messages (the file path for the file store).
    pub name: String,
    /// Complete records already stored, in order.
    pub records: Vec<Record>,
    /// The chain value of the last stored line ([`crate::audit::chain::line_hash`] of its exact
    /// bytes), which the next line commits to; `None` for an empty log.
    pub tail: Option<crate::audit::chain::Head>,
    /// The journal to append to.
    pub journal: Box<dyn Journal>,
    /// The writer whose place this open took because it stopped answering (a host whose lease
    /// ran out), when the store can tell; `None` for a log nobody else held.
    pub taken_over: Option<String>,
}

/// Opens session logs. The file store ([`DirStore`]) is the embedded default; tests and embedders
/// may supply their own.
pub trait Store: Send + Sync + 'static {
    /// Opens the log of `session` (already validated by [`validate_session_id`]), creating it
    /// when absent.
    fn open(&self, session: &str) -> Result<OpenedLog, LogError>;

    /// [`Store::open`], starting from a fold the store kept beside the log ([`Journal::keep`])
    /// when it still fits the log: the opened log's `records` are then only the ones after it.
    /// The default keeps none and reads every record.
    fn open_resuming(&self, session: &str) -> Result<(OpenedLog, Option<Resumed>), LogError> {
        Ok((self.open(session)?, None))
    }

    /// The size of `session`'s log without opening it, when the store can tell cheaply: a reader
    /// that keeps a log's state (the rule book) rereads it only when this changes. `None` means
    /// "cannot tell": the reader rereads on every refresh.
    fn log_len(&self, _session: &str) -> Result<Option<u64>, LogError> {
        Ok(None)
    }

    /// The complete lines of `session`'s log as stored, without opening it for writing (readers
    /// such as `log`, `verify` and `export` run beside the host that writes it). Empty when the
    /// session has no log.
    fn read(&self, session: &str) -> Result<Vec<u8>, LogError> {
        Err(LogError::Io {
            log: session.to_owned(),
            source: Arc::new(io::Error::new(
                io::ErrorKind::Unsupported,
                "this store cannot be read without opening a log",
            )),
        })
    }

    /// [`Store::list`], each log with its [`Store::log_len`]. A database answers in one query.
    fn list_lens(&self) -> Result<LogLens, LogError> {
        self.list()?
            .into_iter()
            .map(|name| {
                let len = self.log_len(&name)?;
                Ok((name, len))
            })
            .collect()
    }

    /// What keeps the store from serving sessions safely now, beyond answering at all (a shared
    /// database whose session leases could not be renewed at the last attempt); `None` when
    /// nothing does. Cheap: no round trip.
    fn trouble(&self) -> Option<String> {
        None
    }

    /// The logs the store holds (sessions and rules logs), in name order.
    fn list(&self) -> Result<Vec<String>, LogError> {
        Err(LogError::Io {
            log: "store".to_owned(),
            source: Arc::new(io::Error::new(
                io::ErrorKind::Unsupported,
                "this store cannot list its logs",
            )),
        })
    }
}

/// The logs a store holds with what [`Store::log_len`] says of each, in name order: a reader that
/// keeps summaries (the console's Sessions page) rereads only the logs that changed. The default
/// asks [`Store::log_len`] once per log; a store that can tell all at once overrides
/// [`Store::list_lens`].
pub type LogLens = Vec<(String, Option<u64>)>;

/// The prefix of every rules log (`rules.user`, `rules.project-…`); no session may be named
/// with it. Kept here, with the logs' names, so a reader of logs knows one without the rules.
pub const RULES_LOG_PREFIX: &str = "rules.";

/// The prefix of every pins log (`pins.<server>`: the MCP gateway's pinned tool definitions);
/// no session may be named with it.
pub const PINS_LOG_PREFIX: &str = "pins.";

/// Whether `name` is a ledger (a rules or pins log: records written one by one, each
/// checkpointed, no turns) rather than a session's log.
pub fn is_ledger(name: &str) -> bool {
    // Any case: on a file system that folds case, `PINS.notes` is the ledger's file.
    [RULES_LOG_PREFIX, PINS_LOG_PREFIX].iter().any(|prefix| {
        name.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    })
}

/// Longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Refuses a session id that could escape the sessions directory or is not portable as a file
/// name: it must be 1 to 128 characters of `A-Z a-z 0-9 . _ -` and must not start with a dot.
pub fn validate_session_id(id: &str) -> Result<(), LogError> {
    let why = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_SESSION_ID_LEN {
        Some("it is longer than 128 characters")
    } else if id.starts_with('.') {
        Some("it starts with a dot")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("only A-Z, a-z, 0-9, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match why {
        Some(why) => Err(LogError::InvalidSessionId {
            id: id.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// The embedded default store: `<state-dir>/sessions/<session-id>.jsonl`, its open logs' files
/// kept to a bounded set ([`Descriptors`]).
#[derive(Debug, Clone)]
pub struct DirStore {
    state_dir: PathBuf,
    descriptors: Arc<Descriptors>,
    /// The key kept folds are sealed with; none are kept or read without it.
    folds: Option<Arc<KeySource>>,
}

impl DirStore {
    /// A store rooted at `state_dir` (created on first open), keeping the default number of
    /// files open ([`default_open_logs`](crate::audit::descriptors::default_open_logs)).
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self::with_open_logs(state_dir, crate::audit::descriptors::default_open_logs())
    }

    /// A store rooted at `state_dir` keeping at most `open_logs` session files open at once
    /// (`[limits] open_logs`); the others are reopened when next written.
    pub fn with_open_logs(state_dir: impl Into<PathBuf>, open_logs: usize) -> Self {
        DirStore {
            state_dir: state_dir.into(),
            descriptors: Descriptors::new(open_logs),
            folds: None,
        }
    }

    /// This store, keeping each long session's fold beside its log (`<session>.fold`, sealed
    /// with the key `keys` gives), so that an open reads only the records appended since
    /// ([`crate::audit::kept`]).
    pub fn keeping_folds(mut self, keys: Arc<KeySource>) -> Self {
        self.folds = Some(keys);
        self
    }

    /// Where the kept fold of one session lives.
    pub fn kept_fold_path(&self, session: &str) -> PathBuf {
        self.sessions_dir()
            .join(format!("{session}{}", kept::SUFFIX))
    }

    /// The files of its logs it may keep open, and keeps open now.
    pub fn descriptors(&self) -> &Descriptors {
        &self.descriptors
    }

    /// The directory holding the session files.
    pub fn sessions_dir(&self) -> PathBuf {
        self.state_dir.join("sessions")
    }

    /// The file of one session.
    pub fn session_path(&self, session: &str) -> PathBuf {
        self.sessions_dir().join(format!("{session}.jsonl"))
    }
}

fn io_err(path: &Path, source: io::Error) -> LogError {
    LogError::Io {
        log: path.display().to_string(),
        source: Arc::new(source),
    }
}

impl Store for DirStore {
    fn log_len(&self, session: &str) -> Result<Option<u64>, LogError> {
        validate_session_id(session)?;
        let path = self.session_path(session);
        match fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some(0)),
            Err(e) => Err(io_err(&path, e)),
        }
    }

    fn read(&self, session: &str) -> Result<Vec<u8>, LogError> {
        validate_session_id(session)?;
        let path = self.session_path(session);
        let mut bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&path, e)),
        };
        // A line still being written (or torn by a crash) is not part of the log yet.
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(complete);
        Ok(bytes)
    }

    fn list(&self) -> Result<Vec<String>, LogError> {
        let dir = self.sessions_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&dir, e))?;
            let name = entry.file_name();
            if let Some(session) = name.to_str().and_then(|n| n.strip_suffix(".jsonl"))
                && validate_session_id(session).is_ok()
            {
                names.push(session.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        let (path, file) = self.open_file(session)?;
        let read = read_whole(&path, &file)?;
        self.opened(session, path, file, read, 0)
    }

    fn open_resuming(&self, session: &str) -> Result<(OpenedLog, Option<Resumed>), LogError> {
        let (path, file) = self.open_file(session)?;
        let log_len = file.metadata().map_err(|e| io_err(&path, e))?.len();
        if let Some((mark, fold)) = self.kept_fold(session, log_len) {
            if let Some(read) = read_after(&path, &file, &mark)? {
                let opened = self.opened(session, path, file, read, mark.records)?;
                let resumed = Resumed {
                    fold,
                    records: mark.records,
                };
                return Ok((opened, Some(resumed)));
            }
            tracing::debug!(
                log = %path.display(),
                reason = %kept::NotUsed::Stale(mark.records),
                "reading the whole log: its kept fold does not fit it"
            );
        }
        let read = read_whole(&path, &file)?;
        Ok((self.opened(session, path, file, read, 0)?, None))
    }
}

impl DirStore {
    /// Opens the file of `session` (creating it and its directory) and takes its lock.
    fn open_file(&self, session: &str) -> Result<(PathBuf, File), LogError> {
        validate_session_id(session)?;
        let dir = self.sessions_dir();
        crate::private::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let path = self.session_path(session);
        let existed = path.exists();
        let file = crate::private::open_options()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        lock_patiently(&file, &path)?;
        if !existed {
            // Make the new directory entry itself durable, not just the file's contents.
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(&dir, e))?;
        }
        Ok((path, file))
    }

    /// The kept fold of `session`, when this store keeps folds, has its key and finds one sealed
    /// with it. Read under the log's lock, so no writer replaces it meanwhile.
    fn kept_fold(&self, session: &str, log_len: u64) -> Option<(Mark, SessionFold)> {
        let key = self.folds.as_ref()?.get()?;
        let path = self.kept_fold_path(session);
        let most = log_len.saturating_add(kept::MOST_OVER_LOG);
        let bytes = match read_regular(&path, most) {
            Ok(bytes) => bytes,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::debug!(fold = %path.display(), error = %e, "kept fold unreadable");
                }
                return None;
            }
        };
        match kept::unseal(key, session, &bytes) {
            Ok(kept) => Some(kept),
            Err(why) => {
                tracing::debug!(fold = %path.display(), reason = %why, "kept fold not used");
                None
            }
        }
    }

    /// The opened log, its journal appending to `file` after what was `read`; its kept fold
    /// covers the first `kept` records.
    fn opened(
        &self,
        session: &str,
        path: PathBuf,
        file: File,
        read: LogRead,
        kept: u64,
    ) -> Result<OpenedLog, LogError> {
        Ok(OpenedLog {
            name: path.display().to_string(),
            records: read.records,
            tail: read.tail,
            journal: Box::new(FileJournal {
                handle: self.descriptors.admit(file).map_err(|e| io_err(&path, e))?,
                descriptors: self.descriptors.clone(),
                fold_path: self.kept_fold_path(session),
                session: session.to_owned(),
                path,
                len: read.len,
                last_line: read.last_line,
                folds: self.folds.clone(),
                kept,
            }),
            taken_over: None,
        })
    }
}

/// What an open read of a log file.
struct LogRead {
    /// The records read (all, or those after a kept fold).
    records: Vec<Record>,
    /// The chain value of the log's last line.
    tail: Option<Head>,
    /// The length of its complete lines.
    len: u64,
    /// The length of its last line, with the newline (0 for an empty log).
    last_line: u64,
}

/// Reads every line of the log.
fn read_whole(path: &Path, mut file: &File) -> Result<LogRead, LogError> {
    let mut bytes = Vec::new();
    file.seek(io::SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|e| io_err(path, e))?;
    let complete = recover_torn_tail(path, file, 0, &bytes)?;
    let body = &bytes[..complete];
    let records = parse_lines(&path.display().to_string(), body)?;
    let last_line = last_line_len(body);
    Ok(LogRead {
        records,
        tail: (last_line > 0).then(|| chain::line_hash(&body[complete - last_line..])),
        len: complete as u64,
        last_line: last_line as u64,
    })
}

/// Reads the lines after `mark`, when the log still ends its first `mark.records` records with
/// the line the mark hashed; `None` when it does not.
fn read_after(path: &Path, mut file: &File, mark: &Mark) -> Result<Option<LogRead>, LogError> {
    let start = mark.last_line_start();
    let mut bytes = Vec::new();
    file.seek(io::SeekFrom::Start(start))
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|e| io_err(path, e))?;
    let last = usize::try_from(mark.last_line).unwrap_or(usize::MAX);
    if bytes.len() < last || !mark.ends_with(&bytes[..last]) {
        return Ok(None);
    }
    let complete = last + recover_torn_tail(path, file, mark.bytes, &bytes[last..])?;
    let after = &bytes[last..complete];
    let records = parse_lines_after(&path.display().to_string(), after, mark.records)?;
    let (tail, last_line) = match last_line_len(after) {
        0 => (mark.head, mark.last_line),
        n => (chain::line_hash(&after[after.len() - n..]), n as u64),
    };
    Ok(Some(LogRead {
        records,
        tail: Some(tail),
        len: start + complete as u64,
        last_line,
    }))
}

/// The bytes of the regular file at `path`, when it holds at most `most`: not through a link,
/// and never waiting on a pipe or a device someone put there.
fn read_regular(path: &Path, most: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > most {
        return Err(io::Error::other(kept::NotUsed::Large.to_string()));
    }
    // The file may grow while it is read: never past the bound.
    let mut bytes = Vec::new();
    file.take(most.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > most {
        return Err(io::Error::other(kept::NotUsed::Large.to_string()));
    }
    Ok(bytes)
}

/// The length of the last line of `body` (whole lines), with its newline; 0 for no line.
fn last_line_len(body: &[u8]) -> usize {
    match body.strip_suffix(b"\n") {
        None => 0,
        Some(b) => body.len() - b.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1),
    }
}

/// Truncates bytes after the last newline (a line torn by a crash mid-write) and returns the
/// length of the complete part of `bytes`, which were read from `offset` to the file's end.
fn recover_torn_tail(
    path: &Path,
    file: &File,
    offset: u64,
    bytes: &[u8],
) -> Result<usize, LogError> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if complete < bytes.len() {
        tracing::warn!(
            log = %path.display(),
            torn_bytes = bytes.len() - complete,
            "truncating a torn last line left by an interrupted write"
        );
        file.set_len(offset + complete as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_err(path, e))?;
    }
    Ok(complete)
}

/// Parses complete lines; any line that does not parse, or a `seq` out of order, is corruption
/// that names the line, never silently skipped.
pub fn parse_lines(name: &str, bytes: &[u8]) -> Result<Vec<Record>, LogError> {
    parse_lines_after(name, bytes, 0)
}

/// [`parse_lines`] for the lines after the first `before` records of a log: the first must be
/// `seq` `before + 1`, and errors name lines as the whole log numbers them.
pub fn parse_lines_after(name: &str, bytes: &[u8], before: u64) -> Result<Vec<Record>, LogError> {
    let mut records = Vec::new();
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if body.is_empty() {
        return Ok(records);
    }
    let before = usize::try_from(before).unwrap_or(usize::MAX);
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        records.push(parse_record(name, line, before.saturating_add(i + 1))?);
    }
    Ok(records)
}

/// Line `number` (counted from 1 in the whole log `name`) as a record: corruption when it does not
/// parse or its `seq` is not its number.
pub fn parse_record(name: &str, line: &[u8], number: usize) -> Result<Record, LogError> {
    let corrupt = |reason: String| LogError::Corrupt {
        log: name.to_owned(),
        line: number,
        reason,
    };
    let record = Record::parse_line(line).map_err(corrupt)?;
    let expected = number as u64;
    if record.seq != expected {
        return Err(corrupt(format!(
            "seq {} where {expected} was expected",
            record.seq
        )));
    }
    Ok(record)
}

/// The file store's journal: appends, then `fdatasync`, through its place in the store's
/// bounded set of open files.
struct FileJournal {
    handle: Arc<Handle>,
    descriptors: Arc<Descriptors>,
    path: PathBuf,
    /// Length of the complete part of the file (durable once synced).
    len: u64,
    /// The length of the last complete line, with its newline.
    last_line: u64,
    session: String,
    /// Where its kept fold goes, and the key it is sealed with (none kept without).
    fold_path: PathBuf,
    folds: Option<Arc<KeySource>>,
    /// The records the kept fold on disk covers (0: none that fits).
    kept: u64,
}

impl Drop for FileJournal {
    fn drop(&mut self) {
        self.descriptors.release(&self.handle);
    }
}

impl Journal for FileJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)?;
        self.sync()
    }

    fn commit_mode(&self) -> CommitMode {
        CommitMode::Split
    }

    fn commits_in_place(&self) -> bool {
        true
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut open = self
            .descriptors
            .use_file(&self.handle, &self.path, self.len)?;
        match open.file().write_all(bytes) {
            Ok(()) => {
                open.set_dirty(true);
                self.len += bytes.len() as u64;
                // Whole lines: the batch's last line is the log's.
                let lines = last_line_len(bytes);
                if lines > 0 {
                    self.last_line = lines as u64;
                }
                Ok(())
            }
            Err(e) => {
                // Back to the last complete length, so the next open finds no partial batch
                // (best effort: the write already failed).
                let _ = open.file().set_len(self.len);
                Err(e)
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut open = self
            .descriptors
            .use_file(&self.handle, &self.path, self.len)?;
        // A failed fdatasync leaves what was written in doubt; the log stops accepting events
        // after it and the next open reads back what really reached the disk.
        open.file().sync_data()?;
        open.set_dirty(false);
        Ok(())
    }

    fn keep(&mut self, records: u64, head: &Head, fold: &SessionFold) {
        if records < self.kept.saturating_add(kept::KEEP_AFTER) || self.last_line == 0 {
            return;
        }
        let Some(key) = self.folds.as_ref().and_then(|k| k.get()) else {
            return;
        };
        // Under the log's lock (taken again if its file was closed to spare a descriptor, and
        // only if nobody wrote it meanwhile), so the fold written is of the log as it is.
        let open = match self
            .descriptors
            .use_file(&self.handle, &self.path, self.len)
        {
            Ok(open) => open,
            Err(e) => {
                tracing::debug!(log = %self.path.display(), error = %e, "fold not kept");
                return;
            }
        };
        let mark = Mark {
            records,
            bytes: self.len,
            last_line: self.last_line,
            head: *head,
        };
        let sealed = kept::seal(key, &self.session, &mark, fold);
        // Written aside and renamed into place: a reader finds the old fold or the new, whole.
        // Not synced: a fold lost in a crash only makes the next open read the whole log.
        let aside = self.fold_path.with_extension("fold.new");
        // A new file, never through whatever else is at that name (a link someone left there).
        let _ = fs::remove_file(&aside);
        let written = crate::private::open_options()
            .write(true)
            .create_new(true)
            .open(&aside)
            .and_then(|mut f| f.write_all(&sealed))
            .and_then(|()| fs::rename(&aside, &self.fold_path));
        drop(open);
        match written {
            Ok(()) => self.kept = records,
            Err(e) => {
                let _ = fs::remove_file(&aside);
                tracing::debug!(fold = %self.fold_path.display(), error = %e, "fold not kept");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_ids_that_escape_or_are_not_portable() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            ".hidden",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(validate_session_id(bad).is_err(), "{bad:?} was accepted");
        }
        for good in ["s1", "sess-01.a_b", &"x".repeat(128)] {
            validate_session_id(good).unwrap();
        }
    }
}

//! One session's log as the host writes it: validation before commit, and group commit.
//!
//! An append is checked against the [`SessionFold`] rules under a lock, given the next `seq`, and
//! queued for the log's writer thread; it returns once the writer has written and synced it.
//! The writer takes every append queued while the previous sync ran and commits them with one
//! write and one sync, so durable throughput grows with the number of concurrent appenders.
//!
//! A failed write stops the log (it is "poisoned"): memory may be ahead of what reached the disk,
//! so nothing more is accepted until the log is reopened, which recovers from what is on disk.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;

use crate::error::LogError;
use crate::event::{Event, Record};
use crate::fold::SessionFold;
use crate::store::{Journal, OpenedLog, Store, validate_session_id};

/// Most appends one group commit writes.
const MAX_BATCH: usize = 4096;

struct Pending {
    line: Vec<u8>,
    done: oneshot::Sender<Result<(), LogError>>,
}

struct State {
    fold: SessionFold,
    next_seq: u64,
    records: u64,
}

/// An open, validated, durable session log. Dropping it stops its writer thread and releases the
/// store's lock once queued appends are written.
pub struct SessionLog {
    session: String,
    name: String,
    state: Mutex<State>,
    queue: Mutex<Option<mpsc::Sender<Pending>>>,
    writer: Option<std::thread::JoinHandle<()>>,
    poisoned: Arc<OnceLock<String>>,
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog")
            .field("session", &self.session)
            .field("log", &self.name)
            .finish_non_exhaustive()
    }
}

impl SessionLog {
    /// Opens `session` in `store`, replaying and re-validating every stored record.
    pub fn open(store: &dyn Store, session: &str) -> Result<SessionLog, LogError> {
        validate_session_id(session)?;
        let OpenedLog {
            name,
            records,
            journal,
        } = store.open(session)?;
        let mut fold = SessionFold::new();
        for (i, r) in records.iter().enumerate() {
            fold.push(r.seq, &r.event)
                .map_err(|violation| LogError::Inconsistent {
                    log: name.clone(),
                    line: i + 1,
                    violation,
                })?;
        }
        let count = records.len() as u64;
        let poisoned = Arc::new(OnceLock::new());
        let (tx, rx) = mpsc::channel();
        let writer_poison = poisoned.clone();
        let writer_name = name.clone();
        let writer = std::thread::Builder::new()
            .name(format!("log-{session}"))
            .spawn(move || write_loop(journal, rx, &writer_name, &writer_poison))
            .map_err(|e| LogError::Io {
                log: name.clone(),
                source: Arc::new(e),
            })?;
        Ok(SessionLog {
            session: session.to_owned(),
            name,
            state: Mutex::new(State {
                fold,
                next_seq: count + 1,
                records: count,
            }),
            queue: Mutex::new(Some(tx)),
            writer: Some(writer),
            poisoned,
        })
    }

    /// The session id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The log's name (its path for the file store).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the fold half-applied (apply does not
        // panic), so a poisoned mutex is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the folded state.
    pub fn with_fold<R>(&self, f: impl FnOnce(&SessionFold) -> R) -> R {
        f(&self.state().fold)
    }

    /// How many records the log holds (committed or being committed).
    pub fn len(&self) -> u64 {
        self.state().records
    }

    /// Whether the log holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Validates `event`, appends it, and returns its record once it is durable.
    ///
    /// # Errors
    /// [`LogError::Refused`] when the event breaks a rule (nothing is written);
    /// [`LogError::Io`] when the write or sync failed, after which the log is poisoned;
    /// [`LogError::Poisoned`] for every append after that.
    pub async fn append(&self, event: Event) -> Result<Record, LogError> {
        let (record, done) = self.enqueue(event)?;
        match done.await {
            Ok(result) => result.map(|()| record),
            // The writer thread is gone (it only exits once every sender is dropped).
            Err(_) => Err(self.poisoned_error()),
        }
    }

    fn poisoned_error(&self) -> LogError {
        LogError::Poisoned {
            log: self.name.clone(),
            reason: self
                .poisoned
                .get()
                .cloned()
                .unwrap_or_else(|| "the log writer stopped".to_owned()),
        }
    }

    fn enqueue(
        &self,
        event: Event,
    ) -> Result<(Record, oneshot::Receiver<Result<(), LogError>>), LogError> {
        let mut state = self.state();
        if self.poisoned.get().is_some() {
            return Err(self.poisoned_error());
        }
        state
            .fold
            .check(&event)
            .map_err(|violation| LogError::Refused {
                session: self.session.clone(),
                kind: event.kind(),
                violation,
            })?;
        let record = Record::now(state.next_seq, event);
        let (done, rx) = oneshot::channel();
        {
            let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            let sent = queue.as_ref().map(|tx| {
                tx.send(Pending {
                    line: record.to_line(),
                    done,
                })
            });
            if !matches!(sent, Some(Ok(()))) {
                return Err(self.poisoned_error());
            }
        }
        // Sent while holding the state lock, so the queue order is the seq order.
        state.fold.apply(record.seq, &record.event);
        state.next_seq += 1;
        state.records += 1;
        Ok((record, rx))
    }
}

impl Drop for SessionLog {
    fn drop(&mut self) {
        // Closing the queue lets the writer drain what is queued and exit; joining it means the
        // store's lock is released when this returns, so the session can be reopened at once.
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn write_loop(
    mut journal: Box<dyn Journal>,
    rx: mpsc::Receiver<Pending>,
    name: &str,
    poisoned: &OnceLock<String>,
) {
    let mut batch: Vec<Pending> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let result = if let Some(reason) = poisoned.get() {
            Err(LogError::Poisoned {
                log: name.to_owned(),
                reason: reason.clone(),
            })
        } else {
            bytes.clear();
            for p in &batch {
                bytes.extend_from_slice(&p.line);
            }
            journal.append(&bytes).map_err(|e| {
                let err = LogError::Io {
                    log: name.to_owned(),
                    source: Arc::new(e),
                };
                let _ = poisoned.set(err.to_string());
                tracing::error!(log = name, error = %err, "session log write failed; the log stops accepting events");
                err
            })
        };
        for p in batch.drain(..) {
            // The appender may have gone away; its record is durable (or failed) regardless.
            let _ = p.done.send(result.clone());
        }
    }
}

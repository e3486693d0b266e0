//! The file store's open session files, bounded: a host with 100,000 open sessions holds at most
//! `[limits] open_logs` descriptors for them, whatever the process's descriptor limit.
//!
//! A log's file is opened when it is written and closed again when the set is full and another
//! log needs a descriptor: the one not used for longest (a clock sweep, so choosing costs O(1)
//! amortised at any bound) that is not in use now, preferring one with nothing unsynced (an
//! unsynced one is synced before it is closed). Closing a file releases the log's exclusive lock:
//! while it is closed another process can open the session, and this host's next write finds out.
//! Reopening takes the lock again and checks that the file is the same file (device and inode)
//! and exactly as long as this host left it; a log another process wrote or replaced meanwhile is
//! refused (the session stops accepting events and its next open reads what is really there),
//! never appended to blindly. Nothing is lost by closing: every byte written is synced first.
//! Below the bound nothing is ever closed, so a host with fewer open sessions keeps every lock.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::audit::error::LogError;

/// Most session files a file store keeps open at once unless `[limits] open_logs` says.
pub const DEFAULT_OPEN_LOGS: usize = 1024;

/// The bound a store takes when none is named: [`DEFAULT_OPEN_LOGS`], or a quarter of the
/// process's descriptor limit when that is lower (sockets, plugins and the console need the
/// rest), and never under 16.
pub fn default_open_logs() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    DEFAULT_OPEN_LOGS.min(soft / 4).max(16)
}

/// What a reopened log says when its file is not as this host left it.
pub const CHANGED_WHILE_CLOSED: &str =
    "the log changed while its file was closed to spare a descriptor (another process wrote it)";

/// The bounded set of open files shared by one store's logs.
#[derive(Debug)]
pub struct Descriptors {
    limit: usize,
    ring: Mutex<Ring>,
    /// Whether the set went over its bound (every file was in use): read without the ring's
    /// lock each time a file is given back, so only then is the lock taken to close some.
    over: AtomicBool,
}

#[derive(Debug, Default)]
struct Ring {
    /// The open files, in sweep order (dead entries are dropped as the sweep meets them).
    open: VecDeque<Weak<Handle>>,
    /// How many of them hold a file.
    count: usize,
}

/// One log's place in the set: its file while open.
#[derive(Debug)]
pub(crate) struct Handle {
    slot: Mutex<Slot>,
    /// Used since the sweep last passed (the clock's reference bit).
    used: AtomicBool,
}

#[derive(Debug)]
struct Slot {
    file: Option<File>,
    /// Bytes written and not yet synced: the sweep closes such a file only after syncing it.
    dirty: bool,
    /// The file's device and inode: a log replaced by another file of the same length (an edit
    /// saved as a new file) is not the one this host left.
    identity: (u64, u64),
}

fn identity(file: &File) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// A log's file, borrowed for one operation. Giving it back brings the set within its bound
/// again if it went over while every file was in use.
pub(crate) struct Open<'a> {
    slot: Option<MutexGuard<'a, Slot>>,
    set: &'a Descriptors,
}

impl Open<'_> {
    fn slot(&mut self) -> &mut Slot {
        self.slot
            .as_mut()
            .expect("an Open holds its slot until dropped")
    }

    /// The open file.
    pub(crate) fn file(&mut self) -> &mut File {
        self.slot().file.as_mut().expect("an Open holds a file")
    }

    /// Marks the file as holding unsynced bytes (`true`) or none (`false`).
    pub(crate) fn set_dirty(&mut self, dirty: bool) {
        self.slot().dirty = dirty;
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        // Unlocked first, so this file too can be closed if it is the one to go.
        drop(self.slot.take());
        // The `Open` whose file took the set over its bound is given back after it went over,
        // so it sees the flag.
        if self.set.over.load(Ordering::Acquire) {
            let mut ring = self.set.ring();
            self.set.close_until(&mut ring, self.set.limit);
            self.set
                .over
                .store(ring.count > self.set.limit, Ordering::Release);
        }
    }
}

impl Descriptors {
    /// A set keeping at most `limit` files open (at least one).
    pub fn new(limit: usize) -> Arc<Descriptors> {
        Arc::new(Descriptors {
            limit: limit.max(1),
            ring: Mutex::new(Ring::default()),
            over: AtomicBool::new(false),
        })
    }

    /// How many files the set may keep open.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How many files it keeps open now.
    pub fn open_now(&self) -> usize {
        self.ring().count
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a just-opened `file` into the set, closing another when it is full.
    pub(crate) fn admit(self: &Arc<Self>, file: File) -> io::Result<Arc<Handle>> {
        let handle = Arc::new(Handle {
            slot: Mutex::new(Slot {
                identity: identity(&file)?,
                file: Some(file),
                dirty: false,
            }),
            used: AtomicBool::new(true),
        });
        self.make_room_for(&handle);
        Ok(handle)
    }

    /// Counts `handle` as holding a file, closing the least recently used other one when the set
    /// is full. Files in use now are passed over, and so are unsynced ones while a synced one can
    /// be closed instead; when none can, an unsynced one is synced and closed (sooner durable
    /// is never wrong). Only when every file is in use does the set go over its bound, by those
    /// (at most one per commit thread and asking task), rather than wait; each file given back
    /// then closes one, down to the bound.
    fn make_room_for(&self, handle: &Arc<Handle>) {
        let mut ring = self.ring();
        self.close_until(&mut ring, self.limit - 1);
        ring.count += 1;
        if ring.count > self.limit {
            self.over.store(true, Ordering::Release);
        }
        ring.open.push_back(Arc::downgrade(handle));
        // Logs that closed while the set had room leave their entries behind: drop them before
        // they outnumber the open files.
        if ring.open.len() > 2 * ring.count + 64 {
            ring.open.retain(|h| {
                h.upgrade()
                    .is_some_and(|h| h.slot.try_lock().map_or(true, |slot| slot.file.is_some()))
            });
        }
    }

    /// Closes the least recently used files not in use until at most `keep` are open (or none
    /// more can be closed now).
    fn close_until(&self, ring: &mut Ring, keep: usize) {
        for take_unsynced in [false, true] {
            let mut passes = 2 * ring.open.len();
            while ring.count > keep && passes > 0 {
                passes -= 1;
                let Some(candidate) = ring.open.pop_front() else {
                    break;
                };
                let Some(candidate) = candidate.upgrade() else {
                    // Its log closed, and `release` counted its file out then.
                    continue;
                };
                if !take_unsynced && candidate.used.swap(false, Ordering::Relaxed) {
                    ring.open.push_back(Arc::downgrade(&candidate));
                    continue;
                }
                let closed = match candidate.slot.try_lock() {
                    // Its log closed (`release` counted it out): forget it.
                    Ok(slot) if slot.file.is_none() => continue,
                    Ok(mut slot) if !slot.dirty => {
                        slot.file = None;
                        true
                    }
                    Ok(mut slot) if take_unsynced => {
                        let synced = slot.file.as_ref().is_some_and(|f| f.sync_data().is_ok());
                        if synced {
                            // The log's own sync finds nothing left to write.
                            slot.file = None;
                            slot.dirty = false;
                        }
                        synced
                    }
                    _ => false,
                };
                if closed {
                    ring.count -= 1;
                } else {
                    ring.open.push_back(Arc::downgrade(&candidate));
                }
            }
        }
    }

    /// The file of the log at `path` whose durable length is `len`, reopened (and locked again)
    /// when the set closed it. A file that is not `len` bytes long then is refused.
    pub(crate) fn use_file<'a>(
        self: &'a Arc<Self>,
        handle: &'a Arc<Handle>,
        path: &Path,
        len: u64,
    ) -> io::Result<Open<'a>> {
        let mut slot = handle.slot.lock().unwrap_or_else(|p| p.into_inner());
        handle.used.store(true, Ordering::Relaxed);
        if slot.file.is_none() {
            let file = reopen(path, len, slot.identity)?;
            slot.file = Some(file);
            self.make_room_for(handle);
        }
        Ok(Open {
            slot: Some(slot),
            set: self,
        })
    }

    /// Forgets `handle`'s file when its log closes.
    pub(crate) fn release(&self, handle: &Handle) {
        let mut slot = handle.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.file.take().is_some() {
            self.ring().count -= 1;
        }
    }
}

/// Opens a closed log's file again: takes its lock (as the first open did) and checks nobody
/// wrote it meanwhile.
fn reopen(path: &Path, len: u64, was: (u64, u64)) -> io::Result<File> {
    let file = crate::private::open_options()
        .read(true)
        .append(true)
        .open(path)?;
    lock_patiently(&file, path).map_err(io::Error::other)?;
    let now = file.metadata()?.len();
    if now != len {
        return Err(io::Error::other(format!(
            "{}: {CHANGED_WHILE_CLOSED}: {now} bytes where this host left {len}",
            path.display()
        )));
    }
    if identity(&file)? != was {
        return Err(io::Error::other(format!(
            "{}: {CHANGED_WHILE_CLOSED}: it is another file now",
            path.display()
        )));
    }
    Ok(file)
}

/// How long opening a log waits for another holder's lock to go before saying [`LogError::Locked`].
///
/// A lock belongs to the open file, and a child process forked by any thread of this process
/// (a hook, a tool, a database server in tests) holds a copy of every descriptor until it execs:
/// for that moment a log that was just closed still looks held. Another process that really holds
/// the log is still reported, this much later.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);

/// Takes the exclusive lock on a log's file, waiting [`LOCK_PATIENCE`] for a holder to go.
pub(crate) fn lock_patiently(file: &File, path: &Path) -> Result<(), LogError> {
    let give_up = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < give_up => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LogError::Locked {
                    log: path.display().to_string(),
                    holder: None,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(LogError::Io {
                    log: path.display().to_string(),
                    source: Arc::new(e),
                });
            }
        }
    }
}

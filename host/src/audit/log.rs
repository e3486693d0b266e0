//! One session's log as the host writes it: validation before commit, and group commit without a
//! thread per session.
//!
//! An append is checked against the [`SessionFold`] rules under the log's lock, given the next
//! `seq`, encoded, and added to the log's pending bytes; the fold is updated at once, so the next
//! append is checked against it. Who then commits depends on the journal's [`CommitMode`]:
//!
//! - `Inline`: the appending task writes the pending bytes itself, under the lock. No hand-off.
//! - `Blocking` and `Split`: the first append that needs its record durable while no commit runs
//!   hands the log to the shared commit threads (`commit`); appends arriving while a commit runs
//!   wait and are committed together by the next round, with one write and one sync (group
//!   commit). A few threads serve every open session. A `Split` journal whose sync finishes
//!   elsewhere ([`Journal::syncs_detached`]: the PostgreSQL store's batcher) needs no commit
//!   thread: the asking task writes and hands the sync over, and the journal's report ends the
//!   round, wakes the appends it made durable and starts the next.
//!
//! An approval question (`SessionLog::append_question`) need not be durable before it is asked
//! in process: with a `Split` journal it is written at once (on the asking task when the journal is
//! idle) and becomes durable with the decision that follows, so a request costs one sync. A
//! question about to leave the process is synced first (`SessionLog::sync_to`).
//!
//! A failed write or sync stops the log (it is "poisoned"): memory may be ahead of what reached
//! the disk, so nothing more is accepted until the log is reopened, which recovers from what is on
//! disk. Subscribers get each record once it is durable, in order, outside the lock.

use std::mem;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::audit::chain::{self, Head};
use crate::audit::commit;
use crate::audit::error::LogError;
use crate::audit::event::Asked;
use crate::audit::event::{Event, Record};
use crate::audit::fold::SessionFold;
use crate::audit::kept::Resumed;
use crate::audit::redact::RedactionCell;
use crate::audit::store::{CommitMode, Journal, OpenedLog, Store, validate_session_id};
use crate::audit::subscribe::Subscribers;
use crate::policy::Policy;

type Done = oneshot::Sender<Result<(), LogError>>;

struct Waiter {
    seq: u64,
    done: Done,
}

struct State {
    fold: SessionFold,
    /// The chain value the next line commits to.
    head: Head,
    /// The chain value of the last durable line.
    durable_head: Head,
    /// Records accepted (committed or on their way).
    records: u64,
    /// Encoded lines accepted and not yet handed to the journal, and their copies for the
    /// subscribers (only taken while someone subscribes).
    pending: Vec<u8>,
    pending_records: Vec<Record>,
    /// Records the journal has written but not yet made durable (`Split`), for the subscribers.
    unsynced_records: Vec<Record>,
    /// Highest seq written to the journal, and made durable.
    written: u64,
    durable: u64,
    /// Highest seq someone needs durable.
    wanted: u64,
    /// The journal; `None` while a commit round holds it.
    journal: Option<Box<dyn Journal>>,
    /// Whether a commit round is scheduled or running.
    committing: bool,
    /// Appends waiting for durability, in seq order.
    waiters: Vec<Waiter>,
    poisoned: Option<String>,
    /// `tool/call` arguments as the log holds them where `[audit] redact` changed them: the fold
    /// holds what the agent sent, and a fold kept beside the log must hold what the log does.
    written_calls: std::collections::HashMap<String, serde_json::Value>,
    /// Durable records not yet delivered, and whether someone is delivering them.
    outbox: Vec<Record>,
    delivering: bool,
}

/// Whether this process commits on the asking thread ([`commit_in_place`]).
static IN_PLACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, a commit of a journal that allows it ([`Journal::commits_in_place`]) runs on the
/// thread that asks for durability, once that thread has let go of the log, rather than on the
/// shared commit threads: for a process whose appends come from one thread with nothing else to
/// do while it waits (the MCP gateway over stdio), where handing the commit over and being woken
/// again costs more than the sync's wait. Appends from other threads meanwhile join the running
/// round, as they do a commit thread's.
///
/// [`Journal::commits_in_place`]: crate::audit::store::Journal::commits_in_place
pub fn commit_in_place() {
    IN_PLACE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// What the commit threads and every handle of one log share.
pub(crate) struct Core {
    session: String,
    name: String,
    mode: CommitMode,
    /// The journal allows committing on the asking thread.
    in_place: bool,
    /// The journal's syncs finish without the committing thread ([`Journal::syncs_detached`]):
    /// commits start on the asking task and end where the journal reports.
    detached: bool,
    state: Mutex<State>,
    /// Signalled when a commit round ends (closing the log waits for it).
    round_over: Condvar,
    subscribers: Arc<Subscribers>,
    /// The writer this open took over from (see [`OpenedLog::taken_over`]).
    taken_over: Option<String>,
    /// What `tool/call` arguments must not be written.
    redaction: RedactionCell,
    /// When the last event was submitted, in microseconds since `opened` (a monotonic clock: a
    /// wall clock stepped back would keep the log "busy" until it caught up): a writer that can wait
    /// (a shadow's answer) appends in the log's quiet moments, not between a question and its
    /// decision.
    last_submit: std::sync::atomic::AtomicU64,
    opened: std::time::Instant,
}

/// An open, validated, durable session log. Dropping it commits what is pending and releases the
/// store's lock before it returns.
pub struct SessionLog {
    core: Arc<Core>,
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog")
            .field("session", &self.core.session)
            .field("log", &self.core.name)
            .finish_non_exhaustive()
    }
}

/// Completes once a record is durable (or its commit failed).
#[must_use = "a ticket does nothing unless awaited; the commit happens regardless"]
pub(crate) enum Ticket {
    /// Already committed as far as needed.
    Ready,
    /// Waiting for a commit round.
    Waiting(Waiting),
}

/// A ticket's wait for a commit round. A detached commit leaves the delivery to subscribers to
/// the appends it woke: one dropped after being woken, before it was polled, still delivers.
pub(crate) struct Waiting {
    rx: Option<oneshot::Receiver<Result<(), LogError>>>,
    core: Arc<Core>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take()
            && self.core.detached
            && matches!(rx.try_recv(), Ok(Ok(())))
        {
            self.core.deliver();
        }
    }
}

impl Ticket {
    /// Waits for the commit.
    pub(crate) async fn wait(self) -> Result<(), LogError> {
        match self {
            Ticket::Ready => Ok(()),
            Ticket::Waiting(mut waiting) => {
                let answer = match waiting.rx.as_mut() {
                    Some(rx) => rx.await.ok(),
                    None => None,
                };
                waiting.rx = None;
                let core = &waiting.core;
                match answer {
                    Some(Ok(())) => {
                        // A detached commit ends on the journal's thread, which leaves the
                        // delivery to subscribers (which may block) to the appends it made
                        // durable.
                        if core.detached {
                            core.deliver();
                        }
                        Ok(())
                    }
                    Some(Err(e)) => Err(e),
                    // Dropped without an answer: only when the log failed and was torn down.
                    None => Err(core.poisoned_error(&core.lock())),
                }
            }
        }
    }
}

impl SessionLog {
    /// Opens `session` in `store`, replaying and re-validating every stored record.
    pub fn open(store: &dyn Store, session: &str) -> Result<SessionLog, LogError> {
        Self::open_observed(store, session, Arc::default(), RedactionCell::default())
    }

    /// [`SessionLog::open`], waiting up to `patience` while another process (or host) holds
    /// the log: for the logs any process of a deployment appends to now and then (the rules
    /// and pins ledgers). Blocks the thread.
    pub fn open_waiting(
        store: &dyn Store,
        session: &str,
        patience: std::time::Duration,
    ) -> Result<SessionLog, LogError> {
        let started = std::time::Instant::now();
        loop {
            match Self::open(store, session) {
                Err(LogError::Locked { .. }) if started.elapsed() < patience => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }

    /// Opens `session`, delivering its durable records to `subscribers` and writing `tool/call`
    /// arguments as `redaction` says.
    pub(crate) fn open_observed(
        store: &dyn Store,
        session: &str,
        subscribers: Arc<Subscribers>,
        redaction: RedactionCell,
    ) -> Result<SessionLog, LogError> {
        let opened = Self::open_validated(store, session, subscribers, redaction);
        if let Err(LogError::Corrupt { .. } | LogError::Inconsistent { .. }) = &opened {
            crate::audit::stats::log_refused();
        }
        opened
    }

    fn open_validated(
        store: &dyn Store,
        session: &str,
        subscribers: Arc<Subscribers>,
        redaction: RedactionCell,
    ) -> Result<SessionLog, LogError> {
        validate_session_id(session)?;
        let (
            OpenedLog {
                name,
                records,
                tail,
                journal,
                taken_over,
            },
            resumed,
        ) = store.open_resuming(session)?;
        let head = tail.unwrap_or_else(|| chain::genesis(session));
        // A kept fold stands for the records before the ones read; the rest are checked on it.
        let (mut fold, before) = match resumed {
            Some(Resumed { fold, records }) => (fold, records),
            None => (SessionFold::new(), 0),
        };
        for (i, r) in records.iter().enumerate() {
            fold.push(r.seq, &r.event)
                .map_err(|violation| LogError::Inconsistent {
                    log: name.clone(),
                    line: usize::try_from(before)
                        .unwrap_or(usize::MAX)
                        .saturating_add(i + 1),
                    violation,
                })?;
        }
        let count = before + records.len() as u64;
        Ok(SessionLog {
            core: Arc::new(Core {
                session: session.to_owned(),
                name,
                mode: journal.commit_mode(),
                in_place: journal.commits_in_place(),
                detached: journal.commit_mode() == CommitMode::Split && journal.syncs_detached(),
                state: Mutex::new(State {
                    fold,
                    head,
                    durable_head: head,
                    records: count,
                    pending: Vec::new(),
                    pending_records: Vec::new(),
                    unsynced_records: Vec::new(),
                    written: count,
                    durable: count,
                    wanted: count,
                    journal: Some(journal),
                    committing: false,
                    waiters: Vec::new(),
                    poisoned: None,
                    written_calls: std::collections::HashMap::new(),
                    outbox: Vec::new(),
                    delivering: false,
                }),
                round_over: Condvar::new(),
                subscribers,
                taken_over,
                redaction,
                last_submit: std::sync::atomic::AtomicU64::new(0),
                opened: std::time::Instant::now(),
            }),
        })
    }

    /// The writer whose place this open took because it stopped answering, when the store
    /// could tell (a database lease that ran out).
    pub fn taken_over(&self) -> Option<&str> {
        self.core.taken_over.as_deref()
    }

    /// The session id.
    pub fn session(&self) -> &str {
        &self.core.session
    }

    /// The log's name (its path for the file store).
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Reads the folded state.
    pub fn with_fold<R>(&self, f: impl FnOnce(&SessionFold) -> R) -> R {
        f(&self.core.lock().fold)
    }

    /// How many records the log holds (committed or being committed).
    pub fn len(&self) -> u64 {
        self.core.lock().records
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
        let (record, ticket) = self.submit(event, true)?;
        ticket.wait().await?;
        Ok(record)
    }

    /// Appends an approval question: validated and given its seq now, written before this
    /// returns a ready ticket where the journal allows it, and made durable by the next commit
    /// (normally its decision's). With a `Blocking` journal the ticket waits for durability, as
    /// a question must not be asked before it is committed somewhere.
    ///
    /// The question records the session's own sandbox mode as it stands, and this returns it
    /// with the session's own policy switch, both read under the log's lock.
    pub(crate) fn append_question(&self, mut asked: Asked) -> Result<Appended, LogError> {
        let durable_now = self.core.mode == CommitMode::Blocking;
        let mut policy = None;
        let mut sandbox = None;
        let (record, ticket) = self.submit_with(
            |fold| {
                sandbox = fold.sandbox_override().map(|s| s.mode);
                asked.sandbox_mode = sandbox;
                Event::Asked(asked)
            },
            durable_now,
            |fold| {
                policy = fold.policy_override().map(|p| p.policy);
            },
        )?;
        Ok(Appended {
            seq: record.seq,
            own_policy: policy,
            sandbox_mode: sandbox,
            ticket,
        })
    }

    /// `arguments` as this log would write them: with `[audit] redact`'s values replaced.
    pub fn redacted(&self, arguments: serde_json::Value) -> serde_json::Value {
        let redaction = self
            .core
            .redaction
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match redaction.apply(&arguments) {
            Some((redacted, _)) => redacted,
            None => arguments,
        }
    }

    /// How long since the last event was submitted.
    pub fn quiet_for(&self) -> std::time::Duration {
        let last = self
            .core
            .last_submit
            .load(std::sync::atomic::Ordering::Relaxed);
        let now = self.core.opened.elapsed().as_micros() as u64;
        std::time::Duration::from_micros(now.saturating_sub(last))
    }

    /// The last durable record's seq and chain value: what a checkpoint signs.
    pub fn durable_point(&self) -> (u64, Head) {
        let state = self.core.lock();
        (state.durable, state.durable_head)
    }

    /// Makes every record up to `seq` durable, e.g. a question before it leaves the process.
    pub(crate) fn sync_to(&self, seq: u64) -> Ticket {
        let mut state = self.core.lock();
        let (ticket, lead) = self.core.want(&mut state, seq);
        drop(state);
        self.core.lead(lead);
        ticket
    }

    /// Validates and accepts `event`; `durable` asks for a commit now, else the record is only
    /// written when that is cheap and waits for the next commit to become durable.
    pub(crate) fn submit(&self, event: Event, durable: bool) -> Result<(Record, Ticket), LogError> {
        self.submit_with(|_| event, durable, |_| {})
    }

    /// [`SessionLog::submit`] of the event `make` builds from the fold as it stands, reading the
    /// fold after the event with `read`, all under the same lock.
    fn submit_with(
        &self,
        make: impl FnOnce(&SessionFold) -> Event,
        durable: bool,
        read: impl FnOnce(&SessionFold),
    ) -> Result<(Record, Ticket), LogError> {
        let core = &self.core;
        let mut state = core.lock();
        if state.poisoned.is_some() {
            return Err(core.poisoned_error(&state));
        }
        let event = make(&state.fold);
        core.last_submit.store(
            core.opened.elapsed().as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let now = std::time::SystemTime::now();
        state
            .fold
            .check(&event)
            .map_err(|violation| LogError::Refused {
                session: core.session.clone(),
                kind: event.kind(),
                violation,
            })?;
        // A redacted call is written (and shown to subscribers) redacted; the fold keeps what the
        // agent sent, which is what this process's gates read.
        let (record, sent) = match core.redacted(&event) {
            Some(written) => (Record::at(state.records + 1, now, written), Some(event)),
            None => (Record::at(state.records + 1, now, event), None),
        };
        let start = state.pending.len();
        let head = state.head;
        record.write_chained_line(&head, &mut state.pending);
        if crate::audit::event::nesting(&state.pending[start..]) > crate::audit::event::MOST_NESTING
        {
            state.pending.truncate(start);
            return Err(LogError::Refused {
                session: core.session.clone(),
                kind: record.event.kind(),
                violation: crate::audit::fold::Violation::TooDeep(record.event.kind()),
            });
        }
        state.head = chain::line_hash(&state.pending[start..]);
        if core.subscribers.active() {
            state.pending_records.push(record.clone());
        }
        state
            .fold
            .apply(record.seq, sent.as_ref().unwrap_or(&record.event));
        if let Event::ToolCall(call) = &record.event {
            if sent.is_some() {
                let written = call.arguments.clone();
                state.written_calls.insert(call.call_id.clone(), written);
            } else if !state.written_calls.is_empty() {
                state.written_calls.remove(&call.call_id);
            }
        }
        state.records += 1;
        read(&state.fold);
        let seq = record.seq;
        let ticket = match core.mode {
            CommitMode::Inline => {
                core.commit_inline(&mut state)?;
                Ticket::Ready
            }
            _ if durable => {
                let (ticket, lead) = core.want(&mut state, seq);
                if lead {
                    drop(state);
                    core.lead(lead);
                    return Ok((record, ticket));
                }
                ticket
            }
            CommitMode::Split if !state.committing => {
                // The journal is idle: write now (quick), sync with the next commit.
                core.write_idle(&mut state)?;
                Ticket::Ready
            }
            // A commit round is running; the next one writes this too.
            _ => Ticket::Ready,
        };
        let undelivered = !state.outbox.is_empty() && !state.delivering;
        drop(state);
        if undelivered {
            core.deliver();
        }
        Ok((record, ticket))
    }
}

impl commit::Rounds for Core {
    fn commit_round(&self) -> bool {
        Core::commit_round(self)
    }
}

/// A question just appended: its seq, what the session's fold said of it, and its commit.
pub(crate) struct Appended {
    /// The `approval/asked` record's seq.
    pub(crate) seq: u64,
    /// The session's own policy switch.
    pub(crate) own_policy: Option<Policy>,
    /// The session's own sandbox mode, as recorded on the question.
    pub(crate) sandbox_mode: Option<crate::policy::SandboxModeName>,
    /// Completes when the question is durable.
    pub(crate) ticket: Ticket,
}

/// What a commit round takes from the state: the pending bytes and records, and the durable
/// point it starts from and ends at.
struct Taken {
    from: u64,
    bytes: Vec<u8>,
    records: Vec<Record>,
    to: (u64, Head),
}

fn take_round(state: &mut State) -> Taken {
    Taken {
        from: state.durable,
        bytes: mem::take(&mut state.pending),
        records: mem::take(&mut state.pending_records),
        to: (state.records, state.head),
    }
}

/// What a detached round ends with: its records and where it started.
struct Round {
    core: Arc<Core>,
    started: std::time::Instant,
    from: u64,
    to: (u64, Head),
    records: Vec<Record>,
}

/// A detached round's end, owed by its journal: reported once, or, when the journal drops it
/// unreported, the round fails and the log stops, rather than leave its appends waiting forever.
struct RoundEnd(Option<Round>);

impl RoundEnd {
    fn report(mut self, result: std::io::Result<()>) {
        if let Some(round) = self.0.take() {
            round.core.clone().end_detached_round(round, result);
        }
    }
}

impl Drop for RoundEnd {
    fn drop(&mut self) {
        if let Some(round) = self.0.take() {
            let error = std::io::Error::other(crate::audit::store::NO_REPORT);
            round.core.clone().end_detached_round(round, Err(error));
        }
    }
}

impl Core {
    /// The record to write for `event` when `[audit] redact` changes it: a `tool/call` whose
    /// arguments hold a value it names.
    fn redacted(&self, event: &Event) -> Option<Event> {
        let Event::ToolCall(call) = event else {
            return None;
        };
        let redaction = self
            .redaction
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (arguments, redacted) = redaction.apply(&call.arguments)?;
        Some(Event::ToolCall(crate::audit::event::ToolCall {
            arguments,
            redacted,
            ..call.clone()
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the fold half-applied (apply does not
        // panic), so a poisoned mutex is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn poisoned_error(&self, state: &State) -> LogError {
        LogError::Poisoned {
            log: self.name.clone(),
            reason: state
                .poisoned
                .clone()
                .unwrap_or_else(|| "the log was closed".to_owned()),
        }
    }

    /// Registers a wish for durability up to `seq`, scheduling a commit round if none runs; `true`
    /// beside the ticket when the caller is to run that round itself ([`commit_in_place`]), with
    /// [`Core::lead`] once it has let go of the lock.
    fn want(self: &Arc<Self>, state: &mut State, seq: u64) -> (Ticket, bool) {
        if state.durable >= seq {
            return (Ticket::Ready, false);
        }
        if state.poisoned.is_some() {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(self.poisoned_error(state)));
            return (self.waiting(rx), false);
        }
        state.wanted = state.wanted.max(seq);
        let (done, rx) = oneshot::channel();
        state.waiters.push(Waiter { seq, done });
        let mut lead = false;
        if !state.committing {
            state.committing = true;
            lead = self.detached
                || (self.in_place && IN_PLACE.load(std::sync::atomic::Ordering::Relaxed));
            if !lead {
                commit::schedule(self.clone());
            }
        }
        (self.waiting(rx), lead)
    }

    fn waiting(self: &Arc<Self>, rx: oneshot::Receiver<Result<(), LogError>>) -> Ticket {
        Ticket::Waiting(Waiting {
            rx: Some(rx),
            core: self.clone(),
        })
    }

    /// Runs the commit rounds [`Core::want`] left to this thread, until nothing more is wanted;
    /// with a detached journal, only starts the first (each one's end starts the next).
    fn lead(self: &Arc<Self>, lead: bool) {
        if lead && self.detached {
            self.start_detached_round();
        } else if lead {
            while commit::Rounds::commit_round(&**self) {}
        }
    }

    /// One commit round of a detached journal, started on this task without waiting: writes what
    /// is pending and hands the sync over; [`Core::end_detached_round`] runs when it reports. The
    /// journal stays in the state: `committing` keeps every other writer off it meanwhile.
    fn start_detached_round(self: &Arc<Self>) {
        let started = std::time::Instant::now();
        let mut state = self.lock();
        let Taken {
            from,
            bytes,
            records,
            to: (target, head),
        } = take_round(&mut state);
        let Some(journal) = state.journal.as_mut() else {
            drop(state);
            self.end_round(None, Ok(()), (target, head), records, false);
            return;
        };
        let written = if bytes.is_empty() {
            Ok(())
        } else {
            journal.write(&bytes)
        };
        let sync = written.map(|()| journal.detach_sync());
        drop(state);
        let end = RoundEnd(Some(Round {
            core: self.clone(),
            started,
            from,
            to: (target, head),
            records,
        }));
        match sync {
            Ok(sync) => sync.start(Box::new(move |result| end.report(result))),
            Err(e) => end.report(Err(e)),
        }
    }

    /// The end of a detached round, on whichever thread the journal reported from: wakes the
    /// satisfied appends (which deliver to the subscribers themselves) and starts the next round
    /// when more is wanted.
    fn end_detached_round(self: &Arc<Self>, round: Round, result: std::io::Result<()>) {
        let (target, head) = round.to;
        crate::audit::stats::round(
            target.saturating_sub(round.from),
            round.started.elapsed().as_nanos() as u64,
            result.is_ok(),
        );
        let (more, answered) = self.end_round(None, result, (target, head), round.records, false);
        if !answered && self.undelivered() {
            // Every append this round made durable went away before it could deliver (a request
            // dropped mid-way, its cancellation's ticket discarded): deliver off the journal's
            // thread, which must not wait on subscribers.
            let core = self.clone();
            let spawned = std::thread::Builder::new()
                .name("log-deliver".to_owned())
                .stack_size(256 << 10)
                .spawn(move || core.deliver());
            if spawned.is_err() {
                self.deliver();
            }
        }
        if more {
            self.start_detached_round();
        }
    }

    /// `Inline`: commits the pending bytes on this task.
    fn commit_inline(&self, state: &mut State) -> Result<(), LogError> {
        let records = mem::take(&mut state.pending_records);
        let Some(journal) = state.journal.as_mut() else {
            return Err(self.poisoned_error(state));
        };
        // Written from the buffer in place, which keeps its capacity for the next line.
        let appended = journal.append(&state.pending);
        state.pending.clear();
        match appended {
            Ok(()) => {
                state.written = state.records;
                state.durable = state.records;
                state.durable_head = state.head;
                state.outbox.extend(records);
                Ok(())
            }
            Err(e) => Err(self.poison(state, e)),
        }
    }

    /// `Split` with no round running: writes the pending bytes on this task.
    fn write_idle(&self, state: &mut State) -> Result<(), LogError> {
        let records = mem::take(&mut state.pending_records);
        let Some(journal) = state.journal.as_mut() else {
            return Err(self.poisoned_error(state));
        };
        let written = journal.write(&state.pending);
        state.pending.clear();
        match written {
            Ok(()) => {
                state.written = state.records;
                state.unsynced_records.extend(records);
                Ok(())
            }
            Err(e) => Err(self.poison(state, e)),
        }
    }

    /// Stops the log after a failed write or sync; every waiter gets the error, which is returned.
    fn poison(&self, state: &mut State, source: std::io::Error) -> LogError {
        let err = LogError::Io {
            log: self.name.clone(),
            source: Arc::new(source),
        };
        tracing::error!(log = %self.name, error = %err, "session log write failed; the log stops accepting events");
        state.poisoned = Some(err.to_string());
        state.pending.clear();
        state.pending_records.clear();
        state.unsynced_records.clear();
        for w in state.waiters.drain(..) {
            let _ = w.done.send(Err(err.clone()));
        }
        err
    }

    /// One commit round, on a commit thread: takes the journal and what is pending, writes and
    /// syncs without the lock, then wakes the satisfied waiters. Returns whether more is wanted.
    pub(crate) fn commit_round(&self) -> bool {
        let mut state = self.lock();
        let Taken {
            from,
            bytes,
            records,
            to: (target, head),
        } = take_round(&mut state);
        let journal = state.journal.take();
        drop(state);

        let Some(mut journal) = journal else {
            return self
                .end_round(None, Ok(()), (target, head), records, true)
                .0;
        };
        let started = (self.mode != CommitMode::Inline).then(std::time::Instant::now);
        let result = match self.mode {
            CommitMode::Split => {
                let written = if bytes.is_empty() {
                    Ok(())
                } else {
                    journal.write(&bytes)
                };
                written.and_then(|()| {
                    if self.detached {
                        crate::audit::store::wait_for(journal.detach_sync())
                    } else {
                        journal.sync()
                    }
                })
            }
            CommitMode::Inline | CommitMode::Blocking => {
                if bytes.is_empty() {
                    Ok(())
                } else {
                    journal.append(&bytes)
                }
            }
        };
        if let Some(started) = started {
            crate::audit::stats::round(
                target.saturating_sub(from),
                started.elapsed().as_nanos() as u64,
                result.is_ok(),
            );
        }
        self.end_round(Some(journal), result, (target, head), records, true)
            .0
    }

    fn end_round(
        &self,
        journal: Option<Box<dyn Journal>>,
        result: std::io::Result<()>,
        (target, head): (u64, Head),
        records: Vec<Record>,
        deliver: bool,
    ) -> (bool, bool) {
        let mut state = self.lock();
        if journal.is_some() {
            state.journal = journal;
        }
        let mut ready = Vec::new();
        match result {
            Ok(()) if state.poisoned.is_none() => {
                state.written = target;
                state.durable = target;
                state.durable_head = head;
                let synced = mem::take(&mut state.unsynced_records);
                state.outbox.extend(synced);
                state.outbox.extend(records);
                let durable = state.durable;
                let (now, waiting): (Vec<Waiter>, Vec<Waiter>) =
                    state.waiters.drain(..).partition(|w| w.seq <= durable);
                state.waiters = waiting;
                ready = now;
            }
            Ok(()) => {
                let err = self.poisoned_error(&state);
                for w in state.waiters.drain(..) {
                    let _ = w.done.send(Err(err.clone()));
                }
            }
            Err(e) => {
                self.poison(&mut state, e);
            }
        }
        let more = state.poisoned.is_none() && state.wanted > state.durable;
        if !more {
            state.committing = false;
            self.round_over.notify_all();
        }
        drop(state);
        // Subscribers first, so an append usually returns after its record was delivered.
        if deliver {
            self.deliver();
        }
        let mut answered = deliver;
        for w in ready {
            answered |= w.done.send(Ok(())).is_ok();
        }
        (more, answered)
    }

    /// Whether durable records wait for delivery with nobody delivering them.
    fn undelivered(&self) -> bool {
        let state = self.lock();
        !state.outbox.is_empty() && !state.delivering
    }

    /// Delivers durable records to the subscribers, in order, outside the lock; one task at a
    /// time delivers, so the order holds across concurrent commits.
    fn deliver(&self) {
        let mut state = self.lock();
        if state.delivering || state.outbox.is_empty() {
            return;
        }
        state.delivering = true;
        loop {
            let batch = mem::take(&mut state.outbox);
            if batch.is_empty() {
                state.delivering = false;
                return;
            }
            drop(state);
            self.subscribers.deliver(&self.session, &batch);
            state = self.lock();
        }
    }
}

impl Drop for SessionLog {
    fn drop(&mut self) {
        // Commit what is pending (a question whose decision never came is still written), wait for
        // a running round, then drop the journal here: the store's lock is released when this
        // returns, so the session can be reopened at once.
        let core = &self.core;
        let mut state = core.lock();
        while state.committing {
            state = core
                .round_over
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        let unsaved = !state.pending.is_empty() || state.written > state.durable;
        if unsaved && state.poisoned.is_none() {
            state.wanted = state.records;
            state.committing = true;
            drop(state);
            while core.commit_round() {}
            state = core.lock();
        }
        if state.poisoned.is_none() && state.pending.is_empty() && state.durable == state.records {
            // Everything is on disk: the store may keep the fold for the next open.
            let State {
                journal,
                fold,
                records,
                head,
                written_calls,
                ..
            } = &mut *state;
            if let Some(journal) = journal.as_mut() {
                if written_calls.is_empty() {
                    journal.keep(*records, head, fold);
                } else {
                    journal.keep(*records, head, &fold.with_calls_as_written(written_calls));
                }
            }
        }
        let journal = state.journal.take();
        drop(state);
        core.deliver();
        drop(journal);
    }
}

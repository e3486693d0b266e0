//! The threads a plugin runs on when it cannot run on the asking task (it imports WASI, may
//! reach out or wait, or was seen to be slow): a fixed few, started on first use, fed in order.
//!
//! A fixed pool rather than the async runtime's blocking pool: that pool starts a thread
//! whenever none is idle at the instant a run is handed over, so a burst of questions (a
//! thousand at once, each run a millisecond) leaves dozens of threads behind. Here a burst
//! queues; the asking tasks wait without a thread, and the threads are as many as the machine
//! has cores, twice over (a run that waits on the network holds its thread meanwhile).
//!
//! One plugin's runs take at most its share of the threads (all of them but one): a plugin whose
//! decisions spin to their deadline, many at once, leaves a thread to every other plugin instead
//! of queueing them all behind it for as long as its timeout. A run whose asker stopped waiting
//! before a thread took it is not run at all.
//!
//! A run's deadline starts when a thread takes it, so time spent queued is nobody's fault. The
//! epoch interrupt cannot stop a guest blocked inside a host call (a WASI sleep, say); the
//! asking task stops waiting for such a run at its deadline and a grace, settles it as a
//! timeout, and the pool gets a thread in place of the stuck one (up to four times its size),
//! so a few stuck runs cannot stall every plugin.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, oneshot};

use crate::outcome::{Failure, FailureKind, panic_message};

/// The stack of a run's thread: a guest's wasm stack (capped at
/// [`super::engine::MAX_WASM_STACK`]) and the host calls it makes, with a wide margin.
const STACK: usize = 8 << 20;

/// How long past its deadline a run may take before its asker stops waiting for it.
const GRACE: Duration = Duration::from_millis(500);

/// How long a run may wait in the queue for a thread.
const QUEUE_PATIENCE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

type Queue = (Mutex<Sender<Job>>, Arc<Mutex<Receiver<Job>>>);

/// The pool: its queue, and its threads once started.
pub(crate) struct Runner {
    size: usize,
    queue: OnceLock<Queue>,
    /// Threads started, the ones set aside as stuck included.
    threads: AtomicUsize,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("size", &self.size).finish()
    }
}

impl Runner {
    /// A pool of `size` threads (at least one), started on first use.
    pub(crate) fn new(size: usize) -> Runner {
        Runner {
            size: size.max(1),
            queue: OnceLock::new(),
            threads: AtomicUsize::new(0),
        }
    }

    /// Twice the machine's parallelism, at least four.
    pub(crate) fn default_size() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get() * 2)
            .unwrap_or(4)
            .max(4)
    }

    fn queue(&self) -> Result<&Queue, Failure> {
        if let Some(queue) = self.queue.get() {
            return Ok(queue);
        }
        let (tx, rx) = channel::<Job>();
        let queue = self
            .queue
            .get_or_init(|| (Mutex::new(tx), Arc::new(Mutex::new(rx))));
        // Only the caller whose queue won starts the threads.
        if self
            .threads
            .compare_exchange(0, self.size, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            for _ in 0..self.size {
                start(&queue.1)?;
            }
        }
        Ok(queue)
    }

    /// Starts a thread in place of one stuck in a run, up to four times the pool's size.
    fn replace_stuck(&self) {
        let Some(queue) = self.queue.get() else {
            return;
        };
        let cap = self.size * 4;
        let added = self
            .threads
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            });
        if added.is_ok() && start(&queue.1).is_err() {
            self.threads.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Threads started so far, the ones set aside as stuck included.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.threads.load(Ordering::Acquire)
    }

    /// A new plugin's share of the threads: all of them but one (at least one).
    pub(crate) fn share(&self) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(self.size.saturating_sub(1).max(1)))
    }

    /// [`Runner::run`] within `share`: the run waits (without a thread) while the plugin's share
    /// of the threads is taken, and holds its place in the share until its thread is done with
    /// it, a run given up as stuck included.
    pub(crate) async fn run_within<T: Send + 'static>(
        &self,
        share: &Arc<Semaphore>,
        timeout: Duration,
        f: impl FnOnce(Instant) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let patience = QUEUE_PATIENCE.max(timeout);
        let place = match tokio::time::timeout(patience, share.clone().acquire_owned()).await {
            Ok(Ok(place)) => place,
            Ok(Err(_)) => {
                return Err(Failure::error(
                    "the plugin's share of the threads is closed",
                ));
            }
            Err(_) => {
                return Err(Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "this plugin's share of the plugin threads stayed busy for {} s",
                        patience.as_secs()
                    ),
                ));
            }
        };
        self.run(timeout, move |deadline| {
            let _place = place;
            f(deadline)
        })
        .await
    }

    /// Runs `f` on one of the pool's threads, inside the calling task's runtime (so WASI calls
    /// that wait on I/O can), with its deadline `timeout` after a thread takes it, and returns
    /// what it returned. A panic is a [`FailureKind::Panic`]; a run still going a grace after
    /// its deadline, or never taken within the queue's patience, a [`FailureKind::Timeout`].
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(Instant) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (started_tx, started) = oneshot::channel();
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            // Its asker is gone (cancelled, or given up on the queue): nobody reads the answer,
            // and running it would hold a thread, and the plugin's share, to its deadline.
            if tx.is_closed() {
                return;
            }
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            let deadline = Instant::now() + timeout;
            let _ = started_tx.send(deadline);
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| f(deadline))).unwrap_or_else(
                |panic| Err(Failure::new(FailureKind::Panic, panic_message(&*panic))),
            );
            let _ = tx.send(result);
        });
        self.queue()?
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| Failure::error("the plugin threads are gone"))?;
        let gone = || Failure::error("the plugin thread ended without an answer");
        let deadline = match tokio::time::timeout(QUEUE_PATIENCE.max(timeout), started).await {
            Ok(Ok(deadline)) => deadline,
            Ok(Err(_)) => return Err(gone()),
            Err(_) => {
                return Err(Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "no plugin thread was free within {} s",
                        QUEUE_PATIENCE.max(timeout).as_secs()
                    ),
                ));
            }
        };
        let give_up = tokio::time::Instant::from_std(deadline + GRACE);
        match tokio::time::timeout_at(give_up, rx).await {
            Ok(result) => result.unwrap_or_else(|_| Err(gone())),
            Err(_) => {
                self.replace_stuck();
                Err(Failure::new(
                    FailureKind::Timeout,
                    "ran past its deadline inside a host call the deadline cannot interrupt; its thread is set aside",
                ))
            }
        }
    }
}

fn start(queue: &Arc<Mutex<Receiver<Job>>>) -> Result<(), Failure> {
    let queue = queue.clone();
    std::thread::Builder::new()
        .name("plugin-run".to_owned())
        .stack_size(STACK)
        .spawn(move || work(&queue))
        .map(drop)
        .map_err(|e| Failure::error(format!("starting a plugin thread: {e}")))
}

fn work(queue: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while taking a job, never while running it.
        let job = match queue.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_stuck_past_its_deadline_is_given_up_and_its_thread_replaced() {
        let runner = Runner::new(1);
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        // Blocked as a guest in a host call would be, well past its 50 ms.
        let first = runner.run(Duration::from_millis(50), move |_| {
            let _ = stuck.recv();
            Ok(1)
        });
        let failure = first.await.unwrap_err();
        assert_eq!(failure.kind, FailureKind::Timeout);
        assert_eq!(runner.threads(), 2);
        // The next run is not stuck behind it.
        let second = runner.run(Duration::from_secs(5), |_| Ok(2)).await;
        assert_eq!(second.unwrap(), 2);
        release.send(()).unwrap();
    }

    #[tokio::test]
    async fn a_run_s_deadline_starts_when_a_thread_takes_it() {
        let runner = Runner::new(1);
        let (release, held) = std::sync::mpsc::channel::<()>();
        let busy = runner.run(Duration::from_secs(5), move |_| {
            let _ = held.recv();
            Ok(Instant::now())
        });
        let queued = runner.run(Duration::from_secs(5), Ok);
        let (busy, queued) = tokio::join!(busy, async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            release.send(()).unwrap();
            queued.await
        });
        let released = busy.unwrap();
        // Queued behind the first for 100 ms, its 5 s began only once it was taken.
        assert!(queued.unwrap() >= released + Duration::from_secs(5) - Duration::from_millis(50));
    }

    // Two workers: the test thread blocks on `started` while the spawned askers queue their runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_plugin_s_runs_take_at_most_its_share_of_the_threads() {
        let runner = Arc::new(Runner::new(4));
        let spinning = runner.share();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        // Six runs of one plugin, each holding its thread until released (as a guest spinning to
        // a long deadline would).
        let runs: Vec<_> = (0..6)
            .map(|_| {
                let (runner, spinning) = (runner.clone(), spinning.clone());
                let (started_tx, held) = (started_tx.clone(), held.clone());
                tokio::spawn(async move {
                    runner
                        .run_within(&spinning, Duration::from_secs(60), move |_| {
                            let _ = started_tx.send(());
                            let _ = held.lock().unwrap_or_else(|p| p.into_inner()).recv();
                            Ok(())
                        })
                        .await
                })
            })
            .collect();
        for _ in 0..3 {
            started.recv().unwrap();
        }
        // Another plugin is served at once, not after the first one's 60 s.
        let other = runner.share();
        let served = tokio::time::timeout(
            Duration::from_secs(10),
            runner.run_within(&other, Duration::from_secs(5), |_| Ok(7)),
        )
        .await;
        assert_eq!(
            served
                .expect("served while the other plugin spins")
                .unwrap(),
            7
        );
        // The spinning plugin's other three wait for its share, holding no thread.
        assert!(started.try_recv().is_err());
        for _ in 0..6 {
            release.send(()).unwrap();
        }
        for run in runs {
            run.await.unwrap().unwrap();
        }
        assert_eq!(runner.threads(), 4);
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_and_the_thread_serves_on() {
        let runner = Runner::new(1);
        let failure = runner
            .run(Duration::from_secs(5), |_| -> Result<(), Failure> {
                panic!("guest")
            })
            .await
            .unwrap_err();
        assert_eq!(
            (failure.kind, failure.message.as_str()),
            (FailureKind::Panic, "guest")
        );
        assert_eq!(
            runner.run(Duration::from_secs(5), |_| Ok(3)).await.unwrap(),
            3
        );
        assert_eq!(runner.threads(), 1);
    }
}

//! The threads a plugin runs on when it cannot run on the asking task (it imports WASI, may
//! reach out or wait, or was seen to be slow): a fixed few, started on first use, fed in order.
//!
//! A fixed pool rather than the async runtime's blocking pool: that pool starts a thread
//! whenever none is idle at the instant a run is handed over, so a burst of questions (a
//! thousand at once, each run a millisecond) leaves dozens of threads behind. Here a burst
//! queues; the asking tasks wait without a thread, and the threads are as many as the machine
//! has cores, twice over (a run that waits on the network holds its thread meanwhile).

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

use crate::outcome::{Failure, FailureKind, panic_message};

/// The stack of a run's thread: a guest's wasm stack (capped at
/// [`super::engine::MAX_WASM_STACK`]) and the host calls it makes, with a wide margin.
const STACK: usize = 8 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// The pool: its queue, and its threads once started.
pub(crate) struct Runner {
    size: usize,
    queue: OnceLock<Mutex<Sender<Job>>>,
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
        }
    }

    /// Twice the machine's parallelism, at least four.
    pub(crate) fn default_size() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get() * 2)
            .unwrap_or(4)
            .max(4)
    }

    fn queue(&self) -> Result<Sender<Job>, Failure> {
        if let Some(queue) = self.queue.get() {
            return Ok(queue.lock().unwrap_or_else(|p| p.into_inner()).clone());
        }
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..self.size {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name("plugin-run".to_owned())
                .stack_size(STACK)
                .spawn(move || work(&rx))
                .map_err(|e| Failure::error(format!("starting plugin thread {i}: {e}")))?;
        }
        // Another caller may have started a pool meanwhile: its queue wins, these threads end
        // with their sender.
        let queue = self.queue.get_or_init(|| Mutex::new(tx));
        Ok(queue.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Runs `f` on one of the pool's threads, inside the calling task's runtime (so WASI calls
    /// that wait on I/O can), and returns what it returned; a panic is a [`FailureKind::Panic`].
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            let result = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
                Err(Failure::new(FailureKind::Panic, panic_message(&*panic)))
            });
            let _ = tx.send(result);
        });
        self.queue()?
            .send(job)
            .map_err(|_| Failure::error("the plugin threads are gone"))?;
        rx.await
            .unwrap_or_else(|_| Err(Failure::error("the plugin thread ended without an answer")))
    }
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

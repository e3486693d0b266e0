//! The one wasmtime engine and its epoch ticker.
//!
//! Epoch interruption is how deadlines and cancellation reach a running guest: a ticker thread
//! advances the epoch every [`TICK`], and each store's deadline callback decides whether its
//! guest carries on or is interrupted. An unarmed call into a looping guest would hang the host,
//! so every store is armed before any guest code runs (instantiation included).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine};

/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const TICK: Duration = Duration::from_millis(2);

/// Largest wasm stack a guest may use before it traps with a stack overflow.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// The engine configuration every plugin is compiled for.
pub(crate) fn config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    config
}

/// Advances the engine's epoch until dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> std::io::Result<Ticker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".to_owned())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

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

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const TICK: Duration = Duration::from_millis(2);

/// Largest wasm stack a guest may use before it traps with a stack overflow.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// Most instances (of every plugin) alive at once; one more fails to instantiate, which settles
/// its decision `unavailable`.
pub const MAX_INSTANCES: u32 = 1000;

/// Most table elements a guest may have (CPython's function table is large).
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The engine configuration every plugin is compiled for.
///
/// Instances come from wasmtime's pooling allocator: memory, tables and instance metadata are
/// reserved once in slots and reused, linear memories start as copy-on-write images of the
/// component's data, and a slot is reset instead of unmapped, so a fresh instance per decision
/// costs neither an `mmap` nor the cross-core TLB flush of an `munmap`. The reservations are
/// virtual address space, committed only as guests touch it.
pub(crate) fn config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(MAX_INSTANCES)
        // A Python or JavaScript component holds about ten core instances and a few memories.
        .total_core_instances(MAX_INSTANCES * 10)
        .total_memories(MAX_INSTANCES * 2)
        .total_tables(MAX_INSTANCES * 4)
        .table_elements(MAX_TABLE_ELEMENTS)
        // Small guests' memories stay mapped between instances: resetting them is a memset,
        // not a page fault per page on the next decision.
        .linear_memory_keep_resident(64 << 10)
        .table_keep_resident(16 << 10);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
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

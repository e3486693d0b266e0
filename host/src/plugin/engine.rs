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

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const TICK: Duration = Duration::from_millis(2);

/// Largest wasm stack a guest may use before it traps with a stack overflow.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// Most instances (of every plugin) alive at once; one more fails to instantiate, which settles
/// its decision `unavailable`.
pub const MAX_INSTANCES: u32 = 1000;

/// Fewest instances room is made for in a process that answers one question and exits (a hook):
/// its pool is reserved at start, and reserving the server's costs a hook more than its plugins
/// do.
pub const ONE_QUESTION_INSTANCES: u32 = 32;

/// The instances a process answering one question with `plugins` plugins makes room for: each
/// plugin may hold an idle instance and run a fresh one, with room to spare, and never fewer
/// than [`ONE_QUESTION_INSTANCES`] nor more than a server's [`MAX_INSTANCES`].
pub fn one_question_instances(plugins: usize) -> u32 {
    let wanted = u32::try_from(plugins.saturating_mul(4).saturating_add(8)).unwrap_or(u32::MAX);
    wanted.clamp(ONE_QUESTION_INSTANCES, MAX_INSTANCES)
}

/// Most table elements a guest may have (CPython's function table is large).
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;

/// How much of a linear memory stays mapped between instances when the kernel can say which pages
/// were dirtied: all of a Rust or C guest (its 1 MiB stack included), and the low part of an
/// interpreter's heap.
const KEEP_RESIDENT_SCANNED: usize = 4 << 20;

/// The engine configuration every plugin is compiled for.
///
/// Instances come from wasmtime's pooling allocator: memory, tables and instance metadata are
/// reserved once in slots and reused, linear memories start as copy-on-write images of the
/// component's data, and a slot is reset instead of unmapped, so a fresh instance per decision
/// costs neither an `mmap` nor the cross-core TLB flush of an `munmap`. The reservations are
/// virtual address space, committed only as guests touch it.
///
/// The pool has room for `instances` instances at once ([`MAX_INSTANCES`] in a server). Its size
/// is not part of what a component is compiled for: every size reads the same compiled cache.
pub(crate) fn config(instances: u32) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    // Bounds are checked in code rather than by guard pages and a signal handler. With
    // virtual-memory bounds, a memory a guest grew (a Rust guest grows on its first allocation) is
    // `mprotect`ed back to its initial size when the slot is reused, and each such call flushes
    // every core's TLB: the largest single cost of a fresh instance. Explicit checks cost a few
    // per cent on a gate's short run instead. Compiled artefacts are keyed by the engine's
    // compatibility hash, so a cache built under the old settings is rebuilt, not misread.
    config.signals_based_traps(false);
    config.memory_guard_size(0);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        // A running call's fiber stack, each with its guard page (an `mprotect` apiece when the
        // pool is made): as many as instances, not wasmtime's default thousand.
        .total_stacks(instances)
        // A Python or JavaScript component holds about ten core instances and a few memories.
        .total_core_instances(instances * 10)
        .total_memories(instances * 2)
        .total_tables(instances * 4)
        .table_elements(MAX_TABLE_ELEMENTS)
        .table_keep_resident(16 << 10);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        // The kernel tells which pages a guest dirtied (PAGEMAP_SCAN, Linux 6.7+): only those are
        // copied back from the image, and the memory stays mapped. A fresh instance of a small
        // guest then costs neither an `madvise` (with its cross-core TLB flush) nor a page fault
        // per page it touches again.
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_SCANNED);
    } else {
        // Without the scan a kept page is reset by a blind memset: keep only the low pages that
        // small guests touch, and give the rest back.
        pool.linear_memory_keep_resident(64 << 10);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_question_pool_grows_with_the_plugins_between_its_floor_and_a_servers() {
        assert_eq!(one_question_instances(0), ONE_QUESTION_INSTANCES);
        assert_eq!(one_question_instances(2), ONE_QUESTION_INSTANCES);
        assert_eq!(one_question_instances(40), 168);
        assert_eq!(one_question_instances(usize::MAX), MAX_INSTANCES);
    }
}

//! A global allocator that counts allocations, so a bench can say how many allocations one
//! decision or one audit event costs.
//!
//! The count is process-wide, not per thread: work a request hands to another thread (a commit
//! thread, a blocking pool) is counted too. Read it around a stretch where nothing else runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; counting touches only an atomic (no
// allocation, no lock).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (and reallocations) made so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

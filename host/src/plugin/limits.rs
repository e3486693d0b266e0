//! What a guest may consume, and how a contained failure is classified.
//!
//! Memory is capped by a resource limiter that records when the cap was hit; time by the epoch
//! deadline callback, which records why it stopped the guest. Classification reads those records
//! first, then wasmtime's trap code; anything else that went wrong at the boundary (a result that
//! does not lift, an out-of-bounds pointer, invalid UTF-8) is an invalid result.

use wasmtime::{ResourceLimiter, Trap};

use crate::outcome::{Failure, FailureKind};

/// Why the host stopped a running guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The decision deadline passed.
    Deadline,
    /// The question was cancelled; the answer would be discarded anyway.
    Cancelled,
    /// A decision run on an async worker used up its inline budget: it is not a failure, the
    /// decision moves off the worker and runs again there.
    OverBudget,
}

/// The memory and table caps of one store.
#[derive(Debug)]
pub(crate) struct Limits {
    pub(crate) memory_cap: usize,
    pub(crate) memory_hit: bool,
}

use super::engine::MAX_TABLE_ELEMENTS;

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.memory_hit = true;
            wasmtime::bail!(
                "linear memory of {desired} bytes exceeds the plugin's cap of {} bytes",
                self.memory_cap
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Classifies an error from instantiating or calling a guest.
pub(crate) fn classify(err: &wasmtime::Error, stop: Option<Stop>, memory_hit: bool) -> Failure {
    let message = format!("{err:#}");
    let kind = match stop {
        Some(Stop::Deadline) => FailureKind::Timeout,
        Some(Stop::Cancelled) => FailureKind::Error,
        // Never reported as a decision's failure (the decision is run again off the worker).
        Some(Stop::OverBudget) => FailureKind::Timeout,
        None if memory_hit => FailureKind::Memory,
        None => match err.downcast_ref::<Trap>() {
            Some(Trap::StackOverflow) => FailureKind::StackOverflow,
            Some(Trap::Interrupt) => FailureKind::Timeout,
            Some(_) => FailureKind::Trap,
            None if err.downcast_ref::<wasmtime_wasi::I32Exit>().is_some() => FailureKind::Trap,
            None => FailureKind::InvalidResult,
        },
    };
    Failure::new(kind, message)
}

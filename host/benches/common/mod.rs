//! What the benchmarks share: a store that discards the log, so a figure is the seam and the
//! plugins alone (`durable_requests` measures the disk).

use std::io;

use approval_host::LogError;
use approval_host::store::{CommitMode, Journal, OpenedLog, Store};

/// A store whose journals accept every batch without writing it.
pub struct NullStore;

struct NullJournal;

impl Journal for NullJournal {
    fn append(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn commit_mode(&self) -> CommitMode {
        CommitMode::Inline
    }
}

impl Store for NullStore {
    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        Ok(OpenedLog {
            name: format!("null:{session}"),
            records: Vec::new(),
            tail: None,
            journal: Box::new(NullJournal),
            taken_over: None,
        })
    }
}

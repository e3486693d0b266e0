//! A store for dry runs (`approval-host replay`): logs that start as copies of other logs (the
//! standing rules a replay decides with) and take appends without keeping them.
//!
//! Everything appended is still validated against its session's fold and hash-chained, as in a
//! real store, so a replay exercises the same code as a live question; the bytes are then
//! dropped, so a long replay holds no log in memory and never touches the recorded store.

use std::collections::HashMap;
use std::io;

use crate::audit::error::LogError;
use crate::audit::store::{CommitMode, Journal, OpenedLog, Store, parse_lines};

/// Logs seeded from copies, appends dropped.
#[derive(Debug, Default)]
pub struct ScratchStore {
    seeded: HashMap<String, Vec<u8>>,
}

impl ScratchStore {
    /// An empty scratch store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts log `name` as a copy of `bytes` (complete lines, as [`Store::read`] returns them).
    pub fn seed(&mut self, name: impl Into<String>, bytes: Vec<u8>) {
        self.seeded.insert(name.into(), bytes);
    }
}

/// A journal that has nothing to wait for.
struct Dropped;

impl Journal for Dropped {
    fn append(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn commit_mode(&self) -> CommitMode {
        CommitMode::Inline
    }
}

impl Store for ScratchStore {
    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        let name = format!("scratch:{session}");
        let bytes = self.seeded.get(session).map_or(&[][..], Vec::as_slice);
        let records = parse_lines(&name, bytes)?;
        let tail = bytes.strip_suffix(b"\n").map(|b| {
            let start = b.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
            crate::audit::chain::line_hash(&b[start..])
        });
        Ok(OpenedLog {
            name,
            records,
            tail,
            journal: Box::new(Dropped),
            taken_over: None,
        })
    }

    fn log_len(&self, session: &str) -> Result<Option<u64>, LogError> {
        Ok(Some(self.seeded.get(session).map_or(0, |b| b.len() as u64)))
    }

    fn read(&self, session: &str) -> Result<Vec<u8>, LogError> {
        Ok(self.seeded.get(session).cloned().unwrap_or_default())
    }

    fn list(&self) -> Result<Vec<String>, LogError> {
        let mut names: Vec<String> = self.seeded.keys().cloned().collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::Event;
    use crate::audit::log::SessionLog;

    #[tokio::test]
    async fn appends_are_validated_and_dropped_seeds_are_read() {
        let source = tempfile::tempdir().unwrap();
        let dir = crate::audit::store::DirStore::new(source.path());
        {
            let log = SessionLog::open(&dir, "s").unwrap();
            log.append(Event::TurnStart).await.unwrap();
        }
        let mut scratch = ScratchStore::new();
        scratch.seed("s", dir.read("s").unwrap());
        let log = SessionLog::open(&scratch, "s").unwrap();
        assert_eq!(log.len(), 1);
        // The seeded turn is open, so a second turn/start is refused as in any store.
        assert!(log.append(Event::TurnStart).await.is_err());
        log.append(Event::TurnEnd).await.unwrap();
        drop(log);
        assert_eq!(scratch.read("s").unwrap(), dir.read("s").unwrap());
        assert_eq!(SessionLog::open(&scratch, "other").unwrap().len(), 0);
    }
}

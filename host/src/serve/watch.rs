//! Hot reload: watch the deployment file and every plugin file, and reload once changes settle.
//!
//! Directories are watched rather than files, so editors and build tools that replace a file by
//! renaming a new one over it are seen too. Events are debounced: a reload starts once no change
//! arrived for the debounce interval, so a plugin written in several chunks loads once, whole.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::{ServeError, Server};

/// Watches a server's files until dropped.
pub struct Watcher {
    _inner: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn normalize(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_owned())
            .join(name),
        _ => absolute,
    }
}

impl Server {
    /// Starts watching; every settled change reloads the deployment (see [`Server::reload`]).
    pub async fn watch(&self, debounce: Duration) -> Result<Watcher, ServeError> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<PathBuf>>();
        let mut inner = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event {
                let _ = tx.send(event.paths);
            }
        })
        .map_err(|e| ServeError::Io(format!("watching files: {e}")))?;
        let mut files: HashSet<PathBuf> = HashSet::new();
        let mut dirs: HashSet<PathBuf> = HashSet::new();
        for path in self.watched_paths().await {
            let path = normalize(&path);
            if let Some(dir) = path.parent()
                && dirs.insert(dir.to_owned())
            {
                inner
                    .watch(dir, RecursiveMode::NonRecursive)
                    .map_err(|e| ServeError::Io(format!("watching {}: {e}", dir.display())))?;
            }
            files.insert(path);
        }
        let server = self.clone();
        let task = tokio::spawn(async move {
            while let Some(paths) = rx.recv().await {
                if !paths.iter().any(|p| files.contains(&normalize(p))) {
                    continue;
                }
                // Debounce: wait until changes stop arriving.
                while let Ok(Some(_)) = tokio::time::timeout(debounce, rx.recv()).await {}
                match server.reload().await {
                    Ok(report) => {
                        if !report.failed.is_empty() {
                            tracing::error!(failed = ?report.failed, "some plugins failed to reload; their old versions keep serving");
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the deployment file is invalid; nothing was reloaded")
                    }
                }
                // Plugins may have moved: watch what the deployment names now.
                for path in server.watched_paths().await {
                    files.insert(normalize(&path));
                }
            }
        });
        Ok(Watcher {
            _inner: inner,
            task,
        })
    }
}

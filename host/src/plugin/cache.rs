//! Compiled components cached under the state directory, so a restart loads in milliseconds
//! what took seconds to compile (a Python component: ~5 s to compile, ~20 ms to load).
//!
//! An entry is keyed by the component's SHA-256 and the engine's compatibility hash, and carries
//! the SHA-256 of its own bytes: a corrupt, truncated or foreign entry fails that check (or
//! wasmtime's own header check) and is ignored and rebuilt, never deserialized blindly.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct CompiledCache {
    dir: PathBuf,
}

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Deserialized from the cache.
    Cache,
    /// Compiled now (and written to the cache).
    Compiled,
}

impl CompiledCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CompiledCache { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry file for a component digest on `engine`.
    pub fn entry(&self, engine: &Engine, digest: &str) -> PathBuf {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        self.dir.join(format!("{digest}-{:016x}.cwasm", h.finish()))
    }

    fn read(&self, path: &Path, engine: &Engine) -> Option<Component> {
        let bytes = std::fs::read(path).ok()?;
        if bytes.len() < 32 || Sha256::digest(&bytes[32..]).as_slice() != &bytes[..32] {
            tracing::warn!(entry = %path.display(), "ignoring a corrupt compiled-cache entry");
            return None;
        }
        // SAFETY: the bytes are ones this cache wrote with `Component::serialize` (their
        // SHA-256 matches what was stored beside them), and wasmtime checks that they were
        // compiled for this engine's configuration before using them.
        match unsafe { Component::deserialize(engine, &bytes[32..]) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(entry = %path.display(), error = %e, "ignoring a foreign compiled-cache entry");
                None
            }
        }
    }

    fn write(&self, path: &Path, artifact: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut bytes = Sha256::digest(artifact).to_vec();
        bytes.extend_from_slice(artifact);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, path)
    }

    /// Loads the component with this digest from the cache, or compiles `bytes` and caches it.
    pub fn load(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, Source)> {
        self.load_observed(engine, digest, bytes, || Box::new(|_| {}))
    }

    /// [`CompiledCache::load`], calling `compiling` when it has to compile (seconds for a Python
    /// or JavaScript component) and the function it returns once that is over (`true` when the
    /// compile succeeded), so a command can say what it is doing.
    pub fn load_observed(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
        compiling: impl FnOnce() -> Box<dyn FnOnce(bool)>,
    ) -> wasmtime::Result<(Component, Source)> {
        let path = self.entry(engine, digest);
        if let Some(component) = self.read(&path, engine) {
            return Ok((component, Source::Cache));
        }
        let done = compiling();
        let compiled = Component::new(engine, bytes);
        done(compiled.is_ok());
        let component = compiled?;
        match component.serialize() {
            Ok(artifact) => {
                if let Err(e) = self.write(&path, &artifact) {
                    tracing::warn!(entry = %path.display(), error = %e, "could not write the compiled cache");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not serialize a compiled component"),
        }
        Ok((component, Source::Compiled))
    }
}

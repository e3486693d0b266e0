//! Compiled components cached under the state directory, so a restart loads in milliseconds
//! what took seconds to compile (a Python component: ~5 s to compile, ~20 ms to load).
//!
//! An entry is keyed by the component's SHA-256 and the engine's compatibility hash. A compiled
//! entry is native code the host will run, so it is loaded only when it carries a keyed MAC
//! (HMAC-SHA-256 over the component's digest and the entry's bytes) made with a [`CacheKey`]
//! kept outside the state directory: whoever can write the cache but not read the key cannot
//! plant an entry. A corrupt, truncated, foreign or forged entry fails that check (or wasmtime's
//! own header check) and is ignored and rebuilt, never deserialized blindly.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use wasmtime::Engine;
use wasmtime::component::Component;

/// Overrides where the cache key lives.
pub const KEY_ENV: &str = "APPROVAL_HOST_CACHE_KEY";

/// What `init` says once a deployment's plugins are compiled into a cache, before its path.
pub const COMPILED_AHEAD: &str = "plugins compiled ahead of the first tool call into";

/// What `init` says when it could not compile a deployment's plugins ahead (why follows); the
/// hook is set up all the same and its first call compiles them.
pub const NOT_COMPILED_AHEAD: &str =
    "plugins not compiled ahead (the first tool call will compile them)";

/// How a hook's line on a cold cache begins (once per state directory, on stderr): the plugin it
/// had to compile on the asking path, how long that took and what compiles ahead follow.
pub const COLD_CACHE: &str = "approval-host: the compiled cache held no";

/// What the MAC of an entry covers besides its bytes (a version, then the component digest).
const MAC_CONTEXT: &[u8] = b"approval-host compiled cache v2\0";

/// The length of an entry's MAC.
const MAC_LEN: usize = 32;

/// The secret a cache's entries are authenticated with: 32 random bytes in a file only its user
/// may read (0600, in a 0700 directory), made on first use.
#[derive(Clone)]
pub struct CacheKey([u8; 32]);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKey(..)")
    }
}

impl CacheKey {
    /// Where the key lives: `$APPROVAL_HOST_CACHE_KEY`, else
    /// `$XDG_CONFIG_HOME/approval-host/cache.key`, else `~/.config/approval-host/cache.key`.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(KEY_ENV).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(path));
        }
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|p| !p.is_empty())
                    .map(|h| PathBuf::from(h).join(".config"))
            })?;
        Some(config.join("approval-host").join("cache.key"))
    }

    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> CacheKey {
        CacheKey(bytes)
    }

    /// Reads the key at `path`, or makes one there (0600) when there is none. Two processes
    /// making it at once end up with the same key.
    ///
    /// # Errors
    /// The file cannot be read or made, or does not hold 32 bytes.
    pub fn load_or_create(path: &Path) -> std::io::Result<CacheKey> {
        match std::fs::read(path) {
            Ok(bytes) => return Self::parse(path, &bytes),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            Err(_) => {}
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!(".cache.key.{}", std::process::id()));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        // A hard link never replaces: whoever links first wins, the others read theirs.
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(CacheKey(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::parse(path, &std::fs::read(path)?)
            }
            Err(e) => Err(e),
        }
    }

    fn parse(path: &Path, bytes: &[u8]) -> std::io::Result<CacheKey> {
        <[u8; 32]>::try_from(bytes).map(CacheKey).map_err(|_| {
            std::io::Error::other(format!(
                "{}: a cache key holds 32 bytes, this file {}",
                path.display(),
                bytes.len()
            ))
        })
    }

    /// A key for another purpose, derived from this one (HMAC-SHA-256 of `purpose`): one secret
    /// file outside the state directory, and keys that cannot stand in for each other.
    pub fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        mac.update(b"approval-host derived key\0");
        mac.update(purpose);
        mac.finalize().into_bytes().into()
    }

    fn mac(&self, digest: &str, artifact: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        mac.update(MAC_CONTEXT);
        mac.update(digest.as_bytes());
        mac.update(b"\0");
        mac.update(artifact);
        mac
    }
}

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct CompiledCache {
    dir: PathBuf,
    /// The key, read (or made) on first use; `None` inside when it cannot be had: then nothing
    /// is read from or written to the cache, and every component is compiled.
    key: Arc<OnceLock<Option<CacheKey>>>,
    key_path: Option<PathBuf>,
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
    /// A cache in `dir` (created on first write), its entries authenticated with the key at
    /// [`CacheKey::default_path`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CompiledCache {
            dir: dir.into(),
            key: Arc::new(OnceLock::new()),
            key_path: CacheKey::default_path(),
        }
    }

    /// A cache in `dir` whose entries are authenticated with `key`.
    pub fn with_key(dir: impl Into<PathBuf>, key: CacheKey) -> Self {
        CompiledCache {
            dir: dir.into(),
            key: Arc::new(OnceLock::from(Some(key))),
            key_path: None,
        }
    }

    fn key(&self) -> Option<&CacheKey> {
        self.key
            .get_or_init(|| {
                let Some(path) = &self.key_path else {
                    tracing::warn!("no place for the compiled cache's key (set HOME or {KEY_ENV}); compiling without the cache");
                    return None;
                };
                match CacheKey::load_or_create(path) {
                    Ok(key) => Some(key),
                    Err(e) => {
                        tracing::warn!(key = %path.display(), error = %e, "the compiled cache's key cannot be read or made; compiling without the cache");
                        None
                    }
                }
            })
            .as_ref()
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

    fn read(&self, path: &Path, engine: &Engine, digest: &str) -> Option<Component> {
        let key = self.key()?;
        let bytes = std::fs::read(path).ok()?;
        if bytes.len() < MAC_LEN
            || key
                .mac(digest, &bytes[MAC_LEN..])
                .verify_slice(&bytes[..MAC_LEN])
                .is_err()
        {
            tracing::warn!(entry = %path.display(), "ignoring a compiled-cache entry without a valid MAC (corrupt, or not written by this user's host)");
            return None;
        }
        // SAFETY: the bytes are ones a host holding this cache's key wrote with
        // `Component::serialize` (their keyed MAC matches), and wasmtime checks that they were
        // compiled for this engine's configuration before using them.
        match unsafe { Component::deserialize(engine, &bytes[MAC_LEN..]) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(entry = %path.display(), error = %e, "ignoring a foreign compiled-cache entry");
                None
            }
        }
    }

    fn write(&self, path: &Path, digest: &str, artifact: &[u8]) -> std::io::Result<()> {
        let Some(key) = self.key() else {
            return Ok(());
        };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
        }
        let mut bytes = key.mac(digest, artifact).finalize().into_bytes().to_vec();
        bytes.extend_from_slice(artifact);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&bytes)?;
        }
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
        if let Some(component) = self.read(&path, engine, digest) {
            return Ok((component, Source::Cache));
        }
        let done = compiling();
        let compiled = Component::new(engine, bytes);
        done(compiled.is_ok());
        let component = compiled?;
        match component.serialize() {
            Ok(artifact) => {
                if let Err(e) = self.write(&path, digest, &artifact) {
                    tracing::warn!(entry = %path.display(), error = %e, "could not write the compiled cache");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not serialize a compiled component"),
        }
        Ok((component, Source::Compiled))
    }
}

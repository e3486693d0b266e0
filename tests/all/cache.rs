//! The compiled-component cache: hits, and corrupt or foreign entries ignored and rebuilt.

use std::sync::Arc;

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::cache::{CompiledCache, Source};
use approval_host::plugin::{TracingSink, digest};
use approval_host::{ApprovalRequest, Mounted, Outcome, PluginHost, bundled};
use sha2::{Digest, Sha256};

#[test]
fn a_second_load_comes_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompiledCache::new(dir.path().join("cache"));
    let host = PluginHost::new().unwrap();
    let d = digest(bundled::ALLOW_TOOLS);
    let (_, first) = cache.load(host.engine(), &d, bundled::ALLOW_TOOLS).unwrap();
    assert_eq!(first, Source::Compiled);
    assert!(cache.entry(host.engine(), &d).is_file());
    let (_, second) = cache.load(host.engine(), &d, bundled::ALLOW_TOOLS).unwrap();
    assert_eq!(second, Source::Cache);
}

#[test]
fn corrupt_and_foreign_entries_are_ignored_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompiledCache::new(dir.path());
    let host = PluginHost::new().unwrap();
    let d = digest(bundled::REJECT_ALL);
    cache.load(host.engine(), &d, bundled::REJECT_ALL).unwrap();
    let entry = cache.entry(host.engine(), &d);

    // Corrupt: a flipped byte fails the entry's own digest.
    let mut bytes = std::fs::read(&entry).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();
    let (_, source) = cache.load(host.engine(), &d, bundled::REJECT_ALL).unwrap();
    assert_eq!(source, Source::Compiled);
    assert_eq!(
        cache
            .load(host.engine(), &d, bundled::REJECT_ALL)
            .unwrap()
            .1,
        Source::Cache,
        "rebuilt"
    );

    // Foreign: a well-formed entry whose artifact is not a compiled component for this engine.
    let artifact = b"\x7fELF not for this engine".to_vec();
    let mut foreign = Sha256::digest(&artifact).to_vec();
    foreign.extend_from_slice(&artifact);
    std::fs::write(&entry, foreign).unwrap();
    let (_, source) = cache.load(host.engine(), &d, bundled::REJECT_ALL).unwrap();
    assert_eq!(source, Source::Compiled);
}

#[tokio::test]
async fn plugins_loaded_from_the_cache_decide() {
    let host_dir = crate::support::Host::new();
    let service = &host_dir.service;
    let cache_dir = tempfile::tempdir().unwrap();
    let mut spec = PluginSpec::new("allow", bundled::ALLOW_TOOLS_PATH, Role::Gate);
    spec.config.insert("tools".into(), "read".into());
    for _ in 0..2 {
        let host =
            PluginHost::with_cache(Arc::new(TracingSink), CompiledCache::new(cache_dir.path()))
                .unwrap();
        let plugin = host.load(&spec).unwrap();
        let _m = Mounted::mount(service, vec![plugin]);
        let agent = service.agent("s", "a").await.unwrap();
        service.start_turn("s").await.unwrap();
        let outcome = service
            .request(ApprovalRequest::new(&agent, "read"))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::AllowedOnce);
        service.end_turn("s").await.unwrap();
    }
    assert_eq!(std::fs::read_dir(cache_dir.path()).unwrap().count(), 1);
}

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

#[tokio::test]
async fn plugins_loaded_from_the_same_bytes_share_compiled_code_and_keep_their_own_config() {
    let host_dir = crate::support::Host::new();
    let service = &host_dir.service;
    let host = PluginHost::new().unwrap();
    let gate = |name: &str, tools: &str| {
        let mut spec = PluginSpec::new(name, bundled::ALLOW_TOOLS_PATH, Role::Gate);
        spec.config.insert("tools".into(), tools.into());
        host.load(&spec).unwrap()
    };
    let reads = gate("reads", "read");
    let runs = gate("runs", "bash");
    let rejects = host
        .load(&PluginSpec::new(
            "rejects",
            bundled::REJECT_ALL_PATH,
            Role::Answerer,
        ))
        .unwrap();
    assert_eq!(host.compiled_components(), 2, "one per distinct component");

    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    let ask = |tool: &'static str| {
        let agent = agent.clone();
        async move {
            service
                .request(ApprovalRequest::new(&agent, tool))
                .await
                .unwrap()
        }
    };
    {
        let _m = Mounted::mount(service, vec![reads.clone(), rejects.clone()]);
        assert_eq!(ask("read").await, Outcome::AllowedOnce);
        assert_eq!(
            ask("bash").await,
            Outcome::Rejected,
            "not the other gate's tools"
        );
    }
    {
        let _m = Mounted::mount(service, vec![runs.clone(), rejects.clone()]);
        assert_eq!(ask("bash").await, Outcome::AllowedOnce);
        assert_eq!(ask("read").await, Outcome::Rejected);
    }
    drop((reads, runs, rejects));
    assert_eq!(
        host.compiled_components(),
        0,
        "code goes with its last plugin"
    );
    let _again = gate("again", "read");
    assert_eq!(host.compiled_components(), 1);
}

#[test]
fn a_host_for_one_question_reads_the_entries_a_server_sized_host_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let key = approval_host::plugin::cache::CacheKey::from_bytes([7; 32]);
    let cache = CompiledCache::with_key(dir.path(), key.clone());
    let server = PluginHost::with_cache(Arc::new(TracingSink), cache.clone()).unwrap();
    let d = digest(bundled::ALLOW_TOOLS);
    let (_, first) = cache
        .load(server.engine(), &d, bundled::ALLOW_TOOLS)
        .unwrap();
    assert_eq!(first, Source::Compiled);
    // A hook's host has a small instance pool; what it runs is compiled the same way.
    let hook = PluginHost::for_one_question(
        Arc::new(TracingSink),
        CompiledCache::with_key(dir.path(), key),
        1,
    )
    .unwrap();
    assert_eq!(
        cache.entry(hook.engine(), &d),
        cache.entry(server.engine(), &d)
    );
    let (_, second) = cache.load(hook.engine(), &d, bundled::ALLOW_TOOLS).unwrap();
    assert_eq!(second, Source::Cache);
}

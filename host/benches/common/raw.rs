//! The floor the plugin host is compared with: the same `allow-tools` guest called through plain
//! wasmtime (no seam, no sandbox set-up, no deadline), instantiated from an `InstancePre` with the
//! default allocator and with the pooling allocator.

use std::time::{Duration, Instant};

use wasmtime::component::{Component, ComponentType, Lift, Linker, Lower, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The plugin API 0.2 request (`allow-tools` is a 0.2 guest).
#[derive(ComponentType, Lower)]
#[component(record)]
struct Request {
    id: String,
    agent: String,
    #[component(name = "parent-agent")]
    parent_agent: Option<String>,
    session: String,
    #[component(name = "tool-name")]
    tool_name: String,
    #[component(name = "call-id")]
    call_id: Option<String>,
    reason: Option<String>,
    arguments: Option<String>,
    cwd: Option<String>,
    #[component(name = "sandbox-mode")]
    sandbox_mode: Option<String>,
}

// Built by the guest when lifted, never by this code.
#[allow(dead_code)]
#[derive(ComponentType, Lift, Debug, PartialEq, Eq, Clone, Copy)]
#[component(enum)]
#[repr(u8)]
enum Scope {
    #[component(name = "session")]
    Session,
    #[component(name = "project")]
    Project,
    #[component(name = "user")]
    User,
}

// Built by the guest when lifted, never by this code.
#[allow(dead_code)]
#[derive(ComponentType, Lift, Debug, PartialEq, Eq)]
#[component(record)]
struct Rule {
    tool: String,
    pattern: Option<String>,
    scope: Scope,
    reason: Option<String>,
}

// Built by the guest when lifted, never by this code.
#[allow(dead_code)]
#[derive(ComponentType, Lift, Debug, PartialEq, Eq)]
#[component(variant)]
enum Decision {
    #[component(name = "allow-once")]
    AllowOnce,
    #[component(name = "reject")]
    Reject(Option<String>),
    #[component(name = "cancel")]
    Cancel,
    #[component(name = "next")]
    Next,
    #[component(name = "allow-always")]
    AllowAlways(Rule),
    #[component(name = "reject-always")]
    RejectAlways(Rule),
}

// Built by the guest when lifted, never by this code.
#[allow(dead_code)]
#[derive(ComponentType, Lift, Clone, Copy)]
#[component(enum)]
#[repr(u8)]
enum Level {
    #[component(name = "trace")]
    Trace,
    #[component(name = "debug")]
    Debug,
    #[component(name = "info")]
    Info,
    #[component(name = "warn")]
    Warn,
    #[component(name = "error")]
    Error,
}

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Median per-call and per-instantiation (create and drop) times of the raw guest.
pub struct RawFigures {
    pub call: Duration,
    /// The call on an engine set up as the host's is: bounds checked in code (no guard pages or
    /// signal handler) and epoch interruption on.
    pub call_checked: Duration,
    pub instantiate: Duration,
    pub instantiate_pooled: Duration,
}

fn engine(pooling: bool) -> Engine {
    engine_with(pooling, false)
}

fn engine_with(pooling: bool, checked: bool) -> Engine {
    let mut config = Config::new();
    config.wasm_component_model(true);
    if checked {
        config.signals_based_traps(false);
        config.memory_guard_size(0);
        config.epoch_interruption(true);
    }
    if pooling {
        config.allocation_strategy(InstanceAllocationStrategy::pooling());
    }
    Engine::new(&config).unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn setup(engine: &Engine, guest: &[u8]) -> wasmtime::component::InstancePre<State> {
    let component = Component::new(engine, guest).unwrap();
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    let mut host = linker.instance("approval:plugin/host@0.2.0").unwrap();
    host.func_wrap("log", |_s, (_l, _m): (Level, String)| Ok(()))
        .unwrap();
    host.func_wrap("config", |_s, (key,): (String,)| {
        Ok((if key == "tools" {
            Some("read,bash".to_owned())
        } else {
            None
        },))
    })
    .unwrap();
    host.func_wrap("call-arguments", |_s, (_c,): (String,)| {
        Ok((None::<String>,))
    })
    .unwrap();
    linker.instantiate_pre(&component).unwrap()
}

fn store(engine: &Engine) -> Store<State> {
    Store::new(
        engine,
        State {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    )
}

/// Measures the raw guest over `samples` calls and instantiations.
pub fn measure(guest: &[u8], samples: usize) -> RawFigures {
    let request = || Request {
        id: "q".into(),
        agent: "a".into(),
        parent_agent: None,
        session: "bench".into(),
        tool_name: "bash".into(),
        call_id: None,
        reason: None,
        arguments: None,
        cwd: None,
        sandbox_mode: None,
    };
    let instantiate = |pooling: bool| {
        let engine = engine(pooling);
        let pre = setup(&engine, guest);
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples {
            // Creating and dropping, as a fresh instance per decision does.
            let start = Instant::now();
            let mut store = store(&engine);
            pre.instantiate(&mut store).unwrap();
            drop(store);
            times.push(start.elapsed());
        }
        (engine, pre, median(times))
    };
    let (_, _, instantiate_pooled) = instantiate(true);
    let (engine, pre, instantiate) = instantiate(false);
    let call = |engine: &Engine, pre: &wasmtime::component::InstancePre<State>| {
        let mut store = store(engine);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = pre.instantiate(&mut store).unwrap();
        let decide = instance
            .get_typed_func::<(Request,), (Decision,)>(&mut store, "decide")
            .unwrap();
        let mut times = Vec::with_capacity(samples);
        for i in 0..samples + samples / 10 {
            let start = Instant::now();
            let (decision,) = decide.call(&mut store, (request(),)).unwrap();
            if i >= samples / 10 {
                times.push(start.elapsed());
            }
            assert_eq!(decision, Decision::AllowOnce);
        }
        median(times)
    };
    let checked = engine_with(false, true);
    let call_checked = call(&checked, &setup(&checked, guest));
    let call = call(&engine, &pre);
    RawFigures {
        call,
        call_checked,
        instantiate,
        instantiate_pooled,
    }
}

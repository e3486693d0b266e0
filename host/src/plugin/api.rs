//! The plugin API versions this host serves, one module per version (`v0_1` today), and the
//! dispatch between them. A future `approval:plugin@0.2` contract adds a module and a variant
//! here; 0.1 plugins keep loading through theirs.

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::sandbox::PluginState;
use super::v0_1;
use crate::outcome::Decision;
use crate::waterfall::Question;

/// The WIT package every version belongs to.
pub const PACKAGE: &str = "approval:plugin";

/// A served API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `approval:plugin@0.1.x`.
    V0_1,
}

impl Api {
    /// The served version a component's `approval:plugin` version belongs to.
    pub(crate) fn for_version(version: &str) -> Option<Api> {
        let mut parts = version.split('.');
        match (parts.next(), parts.next()) {
            (Some("0"), Some("1")) => Some(Api::V0_1),
            _ => None,
        }
    }

    /// The served versions, as `0.1`, ... for `initialize` and messages.
    pub(crate) const SERVED: [&str; 1] = ["0.1"];
}

/// The linkers, one per served version, sharing the WASI imports.
pub(crate) struct Linkers {
    v0_1: Linker<PluginState>,
}

impl Linkers {
    pub(crate) fn new(engine: &wasmtime::Engine) -> wasmtime::Result<Linkers> {
        let mut v0_1 = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut v0_1)?;
        v0_1::add_to_linker(&mut v0_1)?;
        Ok(Linkers { v0_1 })
    }
}

/// A pre-linked component of some served version.
pub(crate) enum Template {
    V0_1(v0_1::Template),
}

/// A live instance of some served version.
pub(crate) enum Instance {
    V0_1(v0_1::Instance),
}

impl Template {
    pub(crate) fn new(
        api: Api,
        linkers: &Linkers,
        component: &Component,
    ) -> wasmtime::Result<Template> {
        match api {
            Api::V0_1 => Ok(Template::V0_1(v0_1::Template::new(
                &linkers.v0_1,
                component,
            )?)),
        }
    }

    pub(crate) fn instantiate(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Instance> {
        match self {
            Template::V0_1(t) => Ok(Instance::V0_1(t.instantiate(store)?)),
        }
    }
}

impl Instance {
    pub(crate) fn decide(
        &self,
        store: &mut Store<PluginState>,
        question: &Question,
    ) -> wasmtime::Result<Decision> {
        match self {
            Instance::V0_1(i) => i.decide(store, question),
        }
    }
}

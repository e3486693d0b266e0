//! The plugin API versions this host serves, one module per version (`v0_1`, `v0_2`, `v0_3`),
//! and the dispatch between them. A component's version is read from the `approval:plugin`
//! interfaces it imports. A new contract adds `wit/approval-<version>.wit`, a module and a variant
//! in each enum here; older plugins keep loading through theirs, unchanged. The version modules
//! sit below this dispatch (what they share is [`super::world`]), so nothing imports in a circle.

use std::sync::OnceLock;

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::pending::{CallbackRequest, Ruling, Settlement};
use super::sandbox::PluginState;
use super::{v0_1, v0_2, v0_3};
use crate::waterfall::Question;

/// The WIT package every version belongs to.
pub const PACKAGE: &str = "approval:plugin";

/// A served API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `approval:plugin@0.1.x`.
    V0_1,
    /// `approval:plugin@0.2.x`: reasons, proposals, `validate-config`.
    V0_2,
    /// `approval:plugin@0.3.x`: outbound HTTP to granted hosts.
    V0_3,
}

impl Api {
    /// The served version a component's `approval:plugin` version belongs to.
    pub(crate) fn for_version(version: &str) -> Option<Api> {
        let mut parts = version.split('.');
        match (parts.next(), parts.next()) {
            (Some("0"), Some("1")) => Some(Api::V0_1),
            (Some("0"), Some("2")) => Some(Api::V0_2),
            (Some("0"), Some("3")) => Some(Api::V0_3),
            _ => None,
        }
    }

    /// The served versions, as `0.1`, ... for `initialize` and messages.
    pub(crate) const SERVED: [&str; 3] = ["0.1", "0.2", "0.3"];

    /// The newest served version: what `approval-host new` writes.
    pub(crate) const NEWEST: Api = Api::V0_2;

    /// Whether a plugin of this version may send HTTP requests (to the hosts it is granted).
    pub(crate) const fn reaches_out(self) -> bool {
        matches!(self, Api::V0_3)
    }

    /// The exact version of the WIT this host was built from for this API, e.g. `0.2.0`.
    pub(crate) const fn wit_version(self) -> &'static str {
        match self {
            Api::V0_1 => v0_1::VERSION,
            Api::V0_2 => v0_2::VERSION,
            Api::V0_3 => v0_3::VERSION,
        }
    }

    /// What a plugin of this version can say that one of the version before cannot: what `check`
    /// reports.
    pub(crate) const fn adds(self) -> &'static [&'static str] {
        match self {
            Api::V0_1 => &[],
            Api::V0_2 => &[
                "reject carries a reason the model and the user see",
                "allow-always / reject-always propose a standing rule",
                "validate-config checks the plugin's config at load",
                "the request carries arguments, cwd, sandbox mode, question id and parent agent",
            ],
            Api::V0_3 => &[
                "wasi:http requests, sent by the host to the hosts allow-hosts grants",
                "secrets used by name in request headers and host.verify-signature, never held",
                "pending(correlation) waits for the plugin's callback, without a thread",
            ],
        }
    }
}

/// The linkers, one per served version with or without WASI, each built the first time a plugin
/// needs it: a hook answers one question with a plugin or two of one version, so building all
/// six (WASI and `wasi:http` are most of their functions) cost every call time none of its
/// plugins used.
pub(crate) struct Linkers {
    engine: wasmtime::Engine,
    /// By version, then by whether the component imports anything beyond the plugin API.
    built: [[OnceLock<Linker<PluginState>>; 2]; 3],
}

impl Linkers {
    /// Linkers for `engine`; none is built yet.
    pub(crate) fn new(engine: &wasmtime::Engine) -> Linkers {
        Linkers {
            engine: engine.clone(),
            built: Default::default(),
        }
    }

    /// The linker for a component of `api` that imports WASI (`wasi`), or only the plugin API.
    /// A component of the second kind links against exactly the plugin API: a WASI import it
    /// does not declare is never there to reach.
    pub(crate) fn get(&self, api: Api, wasi: bool) -> wasmtime::Result<&Linker<PluginState>> {
        let cell = &self.built[api as usize][usize::from(wasi)];
        if let Some(linker) = cell.get() {
            return Ok(linker);
        }
        let linker = self.build(api, wasi)?;
        // Two loads racing build one each; the first kept serves both.
        Ok(cell.get_or_init(|| linker))
    }

    /// Which linkers have been built, by version and WASI: for tests.
    #[cfg(test)]
    pub(crate) fn built(&self) -> Vec<(Api, bool)> {
        [Api::V0_1, Api::V0_2, Api::V0_3]
            .into_iter()
            .flat_map(|api| [false, true].map(|wasi| (api, wasi)))
            .filter(|&(api, wasi)| self.built[api as usize][usize::from(wasi)].get().is_some())
            .collect()
    }

    fn build(&self, api: Api, wasi: bool) -> wasmtime::Result<Linker<PluginState>> {
        let mut linker = Linker::new(&self.engine);
        if wasi {
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
            // Only 0.3 may reach out: an older plugin importing `wasi:http` does not link.
            if api.reaches_out() {
                wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)?;
            }
        }
        match api {
            Api::V0_1 => v0_1::add_to_linker(&mut linker)?,
            Api::V0_2 => v0_2::add_to_linker(&mut linker)?,
            Api::V0_3 => v0_3::add_to_linker(&mut linker)?,
        }
        Ok(linker)
    }
}

/// A pre-linked component of some served version.
pub(crate) enum Template {
    V0_1(v0_1::Template),
    V0_2(v0_2::Template),
    V0_3(v0_3::Template),
}

/// A live instance of some served version.
pub(crate) enum Instance {
    V0_1(v0_1::Instance),
    V0_2(v0_2::Instance),
    V0_3(v0_3::Instance),
}

impl Template {
    /// Pre-links `component`, of version `api`, against `linker` (from [`Linkers::get`]).
    pub(crate) fn new(
        api: Api,
        linker: &Linker<PluginState>,
        component: &Component,
    ) -> wasmtime::Result<Template> {
        match api {
            Api::V0_1 => Ok(Template::V0_1(v0_1::Template::new(linker, component)?)),
            Api::V0_2 => Ok(Template::V0_2(v0_2::Template::new(linker, component)?)),
            Api::V0_3 => Ok(Template::V0_3(v0_3::Template::new(linker, component)?)),
        }
    }

    pub(crate) fn instantiate(&self, store: &mut Store<PluginState>) -> wasmtime::Result<Instance> {
        match self {
            Template::V0_1(t) => Ok(Instance::V0_1(t.instantiate(store)?)),
            Template::V0_2(t) => Ok(Instance::V0_2(t.instantiate(store)?)),
            Template::V0_3(t) => Ok(Instance::V0_3(t.instantiate(store)?)),
        }
    }
}

impl Instance {
    pub(crate) fn decide(
        &self,
        store: &mut Store<PluginState>,
        question: &Question,
    ) -> wasmtime::Result<Ruling> {
        match self {
            Instance::V0_1(i) => i.decide(store, question).map(Ruling::Answer),
            Instance::V0_2(i) => i.decide(store, question).map(Ruling::Answer),
            Instance::V0_3(i) => i.decide(store, question),
        }
    }

    /// Runs the plugin's `callback` over `request`: `Ok(Err(why))` when the plugin refuses it,
    /// or when its version has no callbacks (before 0.3).
    pub(crate) fn callback(
        &self,
        store: &mut Store<PluginState>,
        request: &CallbackRequest,
    ) -> wasmtime::Result<Result<Settlement, String>> {
        match self {
            Instance::V0_1(_) | Instance::V0_2(_) => Ok(Err(
                "the plugin's API version has no callbacks (0.3 does)".to_owned(),
            )),
            Instance::V0_3(i) => i.callback(store, request),
        }
    }

    /// Checks the plugin's config, for versions that can: `Ok(Err(message))` is the plugin's own
    /// refusal. 0.1 plugins have no such export and accept any config.
    pub(crate) fn validate_config(
        &self,
        store: &mut Store<PluginState>,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Instance::V0_1(_) => Ok(Ok(())),
            Instance::V0_2(i) => i.validate_config(store),
            Instance::V0_3(i) => i.validate_config(store),
        }
    }
}

//! Turning a core WebAssembly module into a plugin component, for languages whose toolchains
//! emit WASI preview1 core modules (C with clang and wasi-libc, and others): the module's
//! embedded component type (from `wit-bindgen`) names the world, and the WASI preview1 reactor
//! adapter of the wasmtime this host runs maps its WASI imports onto WASI 0.2.

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};

/// A core module that could not become a component.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ComponentizeError(String);

/// Encodes `module` (a core module with the `component-type` custom section `wit-bindgen`
/// embeds) as a component, adapting WASI preview1 imports with the reactor adapter. The result
/// is validated; [`crate::plugin::PluginHost::load`] still checks that it fits the plugin world.
pub fn componentize(module: &[u8]) -> Result<Vec<u8>, ComponentizeError> {
    if wasmparser::Parser::is_component(module) {
        return Err(ComponentizeError(
            "is already a component (nothing to do)".to_owned(),
        ));
    }
    if !wasmparser::Parser::is_core_wasm(module) {
        return Err(ComponentizeError("is not a WebAssembly module".to_owned()));
    }
    let encoder = wit_component::ComponentEncoder::default()
        .module(module)
        .map_err(|e| ComponentizeError(format!("{e:#}")))?
        .validate(true)
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .map_err(|e| ComponentizeError(format!("the WASI adapter: {e:#}")))?;
    let mut encoder = encoder;
    encoder
        .encode()
        .map_err(|e| ComponentizeError(format!("{e:#}")))
}

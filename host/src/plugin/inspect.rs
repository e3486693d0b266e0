//! What a component imports and exports, checked against the worlds the host serves: the
//! answer `approval-host check` gives a plugin author, and the first check at load.

use wasmtime::Engine;
use wasmtime::component::Component;

/// The world every plugin implements.
pub const WORLD: &str = "approval:plugin/answerer@0.1.x";

/// The export a plugin must provide.
pub const EXPORT: &str = "decide";

/// A compiled component and what it declares.
pub struct Inspection {
    /// The compiled component.
    pub component: Component,
    /// The plugin API version it was built against (from its `approval:plugin` imports).
    pub api_version: String,
    /// Its imports, by name.
    pub imports: Vec<String>,
    /// Its exports, by name.
    pub exports: Vec<String>,
}

/// Splits `ns:pkg/iface@1.2.3` into (`ns:pkg`, `1.2.3`).
fn package_and_version(name: &str) -> Option<(&str, &str)> {
    let (path, version) = name.split_once('@')?;
    let package = path.split_once('/').map_or(path, |(p, _)| p);
    Some((package, version))
}

/// Whether the host serves an import of this name: the plugin API at a served version, or WASI
/// 0.2.
fn served(name: &str) -> bool {
    match package_and_version(name) {
        // Any version of the plugin API passes here; the loader says which ones it serves.
        Some((package, _)) if package == super::api::PACKAGE => true,
        Some((package, version)) if package.starts_with("wasi:") => version.starts_with("0.2."),
        _ => false,
    }
}

/// Compiles `bytes` and checks that its imports and exports fit a served world. The error is the
/// exact mismatch, in words a plugin author can act on.
pub fn inspect_bytes(engine: &Engine, bytes: &[u8]) -> Result<Inspection, String> {
    inspect_with(engine, bytes, || Component::new(engine, bytes))
}

/// [`inspect_bytes`] with the component obtained by `compile` (from a compiled cache, say), once
/// `bytes` are known to be a component.
pub fn inspect_with(
    engine: &Engine,
    bytes: &[u8],
    compile: impl FnOnce() -> wasmtime::Result<Component>,
) -> Result<Inspection, String> {
    if wasmparser::Parser::is_core_wasm(bytes) {
        return Err(
            "is a core WebAssembly module, not a component: build for wasm32-wasip2, or wrap it with `wasm-tools component new`"
                .to_owned(),
        );
    }
    if !wasmparser::Parser::is_component(bytes) {
        return Err("is not a WebAssembly component".to_owned());
    }
    let component = compile().map_err(|e| format!("is not a valid component: {e:#}"))?;
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_owned()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
    if let Some(foreign) = imports.iter().find(|n| !served(n)) {
        return Err(format!(
            "imports `{foreign}`, which the host does not provide (only {p}/host, {p}/types, and WASI 0.2)",
            p = super::api::PACKAGE
        ));
    }
    if !exports.iter().any(|e| e == EXPORT) {
        return Err(format!(
            "does not export `{EXPORT}` (exports: {})",
            if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            }
        ));
    }
    let api_version = imports
        .iter()
        .filter_map(|n| package_and_version(n))
        .find(|(p, _)| *p == super::api::PACKAGE)
        .map_or(super::v0_1::VERSION, |(_, v)| v)
        .to_owned();
    Ok(Inspection {
        component,
        api_version,
        imports,
        exports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_plugin_api_and_wasi_0_2_only() {
        assert!(served("approval:plugin/host@0.1.0"));
        assert!(served("approval:plugin/types@0.1.3"));
        assert!(
            served("approval:plugin/host@0.2.0"),
            "refused later, by version"
        );
        assert!(served("wasi:cli/environment@0.2.6"));
        assert!(!served(""));
        assert!(!served("wasi:cli/environment@0.3.0"));
        assert!(!served("evil:net/socket@1.0.0"));
        assert!(!served("unversioned"));
    }
}

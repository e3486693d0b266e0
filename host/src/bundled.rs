//! The example plugins (and test guests) from `plugins/`, built for wasm32-wasip2 by the build
//! and embedded, so `approval-host demo` runs from a fresh clone.

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

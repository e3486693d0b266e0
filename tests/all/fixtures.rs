//! Adversarial plugin components, written as WAT and built into components here with the `wat`
//! and `wit-component` crates, plus the guests the build made from `plugins/`.
//!
//! Every WAT fixture behaves when the tool name is `ok` (answers `allow-once`), and misbehaves
//! otherwise, so a test can show the plugin serving again after a contained failure.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use approval_host::plugin::{LogLevel, LogSink};
use tokio::sync::mpsc;

/// The plugin API 0.1 contract: the WAT fixtures below are 0.1 components.
const WIT_0_1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/approval-0.1.wit");

/// The plugin API 0.2 contract.
const WIT_0_2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/approval-0.2.wit");

/// The core module around `body`, the misbehaviour. `decide` takes the flattened request (12 i32:
/// agent, session, tool-name as ptr/len, then call-id and reason as tag/ptr/len) and returns the
/// decision's discriminant.
fn core_module(imports: &str, body: &str, data: &str) -> String {
    format!(
        r#"(module
  (import "approval:plugin/host@0.1.0" "log" (func $log (param i32 i32 i32)))
  {imports}
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 16) "looping")
  (data (i32.const 32) "\ff\fe\fd")
  {data}
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $ptr i32)
    (local.set $ptr (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $ptr) (local.get 3)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.const 1)))))
    (local.get $ptr))
  (func $recurse (param i32) (result i32)
    (i32.add (call $recurse (i32.add (local.get 0) (i32.const 1))) (local.get 0)))
  (func (export "decide")
    (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
    (if (i32.eq (local.get 5) (i32.const 2)) (then (return (i32.const 0))))
    {body})
)"#
    )
}

fn encode(module: &str, wit: Option<&str>, world: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve.push_path(WIT_0_1).unwrap();
    let main = match wit {
        Some(text) => resolve.push_str("fixture.wit", text).unwrap(),
        None => pkg,
    };
    encode_in(module, &resolve, main, world)
}

/// Embeds `world` of `package` in the core `module` and encodes the component.
fn encode_in(
    module: &str,
    resolve: &wit_parser::Resolve,
    package: wit_parser::PackageId,
    world: &str,
) -> Vec<u8> {
    let mut module = wat::parse_str(module).unwrap();
    let world = resolve.select_world(&[package], Some(world)).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

/// A component of the answerer world that misbehaves with `body`.
pub fn answerer(body: &str) -> Vec<u8> {
    encode(&core_module("", body, ""), None, "answerer")
}

pub fn trap() -> Vec<u8> {
    answerer("unreachable")
}

/// Logs "looping", then spins forever.
pub fn endless_loop() -> Vec<u8> {
    answerer(
        "(call $log (i32.const 2) (i32.const 16) (i32.const 7))
         (loop $spin (br $spin))
         (i32.const 0)",
    )
}

/// Grows memory until the cap stops it (a failed grow that did not trap would spin to the
/// deadline instead, and the test would see `timeout`).
pub fn memory_bomb() -> Vec<u8> {
    answerer(
        "(loop $grow (drop (memory.grow (i32.const 16))) (br $grow))
         (i32.const 0)",
    )
}

pub fn stack_overflow() -> Vec<u8> {
    answerer("(call $recurse (i32.const 0))")
}

pub fn bad_discriminant() -> Vec<u8> {
    answerer("(i32.const 7)")
}

/// Passes the host a string that points past the end of memory.
pub fn out_of_bounds() -> Vec<u8> {
    answerer(
        "(call $log (i32.const 2) (i32.const 65500) (i32.const 4096))
         (i32.const 0)",
    )
}

/// Passes the host bytes that are not UTF-8.
pub fn invalid_utf8() -> Vec<u8> {
    answerer(
        "(call $log (i32.const 2) (i32.const 32) (i32.const 3))
         (i32.const 0)",
    )
}

/// Exports `decide` with another signature than the world's.
pub fn wrong_export_signature() -> Vec<u8> {
    let wit = "package test:wrong;
        world answerer { export decide: func(tool: string) -> u32; }";
    let module = r#"(module
      (memory (export "memory") 1)
      (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
      (func (export "decide") (param i32 i32) (result i32) (i32.const 0)))"#;
    encode(module, Some(wit), "answerer")
}

/// Imports an interface the host does not provide.
pub fn foreign_import() -> Vec<u8> {
    let wit = "package test:fixtures;
        interface socket { connect: func(addr: string); }
        world answerer {
          use approval:plugin/types@0.1.0.{request, decision};
          import approval:plugin/host@0.1.0;
          import socket;
          export decide: func(request: request) -> decision;
        }";
    let module = core_module(
        r#"(import "test:fixtures/socket" "connect" (func $connect (param i32 i32)))"#,
        "(call $connect (i32.const 16) (i32.const 7)) (i32.const 0)",
        "",
    );
    encode(&module, Some(wit), "answerer")
}

/// Writes `bytes` to a file in `dir` and returns its path.
pub fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A log sink that keeps every line and forwards it to a channel.
#[derive(Clone)]
pub struct Captured {
    pub lines: Arc<Mutex<Vec<(String, LogLevel, String)>>>,
    tx: mpsc::UnboundedSender<String>,
}

impl Captured {
    pub fn new() -> (Captured, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Captured {
                lines: Arc::default(),
                tx,
            },
            rx,
        )
    }

    pub fn lines(&self) -> Vec<(String, LogLevel, String)> {
        self.lines.lock().unwrap().clone()
    }
}

impl LogSink for Captured {
    fn log(&self, plugin: &str, level: LogLevel, message: &str) {
        self.lines
            .lock()
            .unwrap()
            .push((plugin.to_owned(), level, message.to_owned()));
        let _ = self.tx.send(message.to_owned());
    }
}

/// A well-behaved answerer built against `approval:plugin@{version}` (the same contract under
/// another version number), answering `allow-once`.
pub fn versioned(version: &str) -> Vec<u8> {
    let wit = std::fs::read_to_string(WIT_0_1).unwrap().replace(
        "approval:plugin@0.1.0",
        &format!("approval:plugin@{version}"),
    );
    let module = core_module("", "(i32.const 0)", "").replace(
        "approval:plugin/host@0.1.0",
        &format!("approval:plugin/host@{version}"),
    );
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("approval.wit", &wit).unwrap();
    encode_in(&module, &resolve, pkg, "answerer")
}

/// A core module of the answerer world (not yet a component) whose `decide` returns `decision`
/// after a WASI preview1 call (`random_get`), as clang with wasi-libc would emit it.
pub fn core_answerer(decision: u32) -> Vec<u8> {
    let module = core_module(
        r#"(import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))"#,
        &format!("(drop (call $random (i32.const 64) (i32.const 8))) (i32.const {decision})"),
        "",
    );
    let mut module = wat::parse_str(module).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve.push_path(WIT_0_1).unwrap();
    let world = resolve.select_world(&[pkg], Some("answerer")).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    module
}

/// Counts to 2^28 (well past the inline budget on any machine) before it answers `allow-once`;
/// answers `allow-once` at once for the tool `ok`.
pub fn slow_then_allows() -> Vec<u8> {
    let body = "(global.set $i (i32.const 0))
         (loop $count
           (global.set $i (i32.add (global.get $i) (i32.const 1)))
           (br_if $count (i32.lt_u (global.get $i) (i32.const 268435456))))
         (i32.const 0)";
    encode(
        &core_module("", body, "(global $i (mut i32) (i32.const 0))"),
        None,
        "answerer",
    )
}

/// A plugin API 0.2 gate written as WAT, misbehaving by the first letter of the tool name:
/// `h` rejects with a 100 MB reason, `u` with a reason that is not UTF-8, `c` with control
/// characters in it, `e` answers `allow-always` with an empty rule, `a` answers `reject-always`
/// with a 2 MB pattern (and the reason `absurd`); anything else is `allow-once`. Its
/// `validate-config` runs `validate` (a body returning the address of a `result<_, string>`; the
/// zeroed area at 2048 reads `ok`).
pub fn v0_2_gate(validate: &str) -> Vec<u8> {
    let module = format!(
        r#"(module
  (import "approval:plugin/host@0.2.0" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 32) "\ff\fe\fd")
  (data (i32.const 48) "no\nway\07")
  (data (i32.const 64) "*")
  (data (i32.const 80) "absurd")
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $ptr i32)
    (local.set $ptr (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $ptr) (local.get 3)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.div_u (local.get 3) (i32.const 65536)) (i32.const 1))))))
    (local.get $ptr))
  ;; 100 MiB of 'a' at 1 MiB, grown on first use.
  (func $big (result i32)
    (if (i32.lt_u (memory.size) (i32.const 1700))
      (then
        (drop (memory.grow (i32.sub (i32.const 1700) (memory.size))))
        (memory.fill (i32.const 1048576) (i32.const 97) (i32.const 104857600))))
    (i32.const 1048576))
  (func (export "validate-config") (param i32 i32) (result i32)
    {validate})
  (func (export "decide") (param $request i32) (result i32)
    (local $first i32)
    (memory.fill (i32.const 1024) (i32.const 0) (i32.const 64))
    ;; tool-name is the fifth field: its pointer at offset 36.
    (local.set $first (i32.load8_u (i32.load offset=36 (local.get $request))))
    (if (i32.eq (local.get $first) (i32.const 104)) ;; h
      (then
        (i32.store8 (i32.const 1024) (i32.const 1))
        (i32.store8 (i32.const 1028) (i32.const 1))
        (i32.store (i32.const 1032) (call $big))
        (i32.store (i32.const 1036) (i32.const 104857600))
        (return (i32.const 1024))))
    (if (i32.eq (local.get $first) (i32.const 117)) ;; u
      (then
        (i32.store8 (i32.const 1024) (i32.const 1))
        (i32.store8 (i32.const 1028) (i32.const 1))
        (i32.store (i32.const 1032) (i32.const 32))
        (i32.store (i32.const 1036) (i32.const 3))
        (return (i32.const 1024))))
    (if (i32.eq (local.get $first) (i32.const 99)) ;; c
      (then
        (i32.store8 (i32.const 1024) (i32.const 1))
        (i32.store8 (i32.const 1028) (i32.const 1))
        (i32.store (i32.const 1032) (i32.const 48))
        (i32.store (i32.const 1036) (i32.const 7))
        (return (i32.const 1024))))
    (if (i32.eq (local.get $first) (i32.const 101)) ;; e: allow-always, every field empty
      (then
        (i32.store8 (i32.const 1024) (i32.const 4))
        (return (i32.const 1024))))
    (if (i32.eq (local.get $first) (i32.const 97)) ;; a: reject-always, a 2 MB pattern
      (then
        (i32.store8 (i32.const 1024) (i32.const 5))
        (i32.store (i32.const 1028) (i32.const 64))
        (i32.store (i32.const 1032) (i32.const 1))
        (i32.store8 (i32.const 1036) (i32.const 1))
        (i32.store (i32.const 1040) (call $big))
        (i32.store (i32.const 1044) (i32.const 2097152))
        (i32.store8 (i32.const 1052) (i32.const 1))
        (i32.store (i32.const 1056) (i32.const 80))
        (i32.store (i32.const 1060) (i32.const 6))
        (return (i32.const 1024))))
    (i32.const 1024))
)"#
    );
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve.push_path(WIT_0_2).unwrap();
    encode_in(&module, &resolve, pkg, "answerer")
}

/// `validate-config` bodies for [`v0_2_gate`].
pub mod validate {
    /// Accepts any config.
    pub const OK: &str = "(i32.const 2048)";
    /// Traps.
    pub const TRAP: &str = "unreachable";
    /// Never returns.
    pub const LOOP: &str = "(loop $spin (br $spin)) (i32.const 2048)";
}

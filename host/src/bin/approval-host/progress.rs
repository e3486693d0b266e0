//! Saying what a command is doing while it compiles a plugin (seconds for Python or JavaScript,
//! otherwise a silent wait): a spinner on a terminal, one line per compile otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::plugin::CompileObserver;

/// The line a compile ends with, on a terminal or not.
pub fn compiled_line(plugin: &str, bytes: usize, ok: bool, took: Duration) -> String {
    let outcome = if ok { "done" } else { "failed" };
    format!(
        "compiling {plugin} ({:.1} MB)… {outcome} in {:.1} s",
        bytes as f64 / 1e6,
        took.as_secs_f64()
    )
}

/// An observer printing compile progress on stderr.
pub fn observer(quiet: bool) -> CompileObserver {
    let terminal = std::io::stderr().is_terminal();
    Arc::new(move |plugin: &str, bytes: usize| -> Box<dyn FnOnce(bool)> {
        if quiet {
            return Box::new(|_| {});
        }
        let started = Instant::now();
        let plugin = plugin.to_owned();
        let spinner = terminal.then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_message(format!(
                "compiling {plugin} ({:.1} MB)…",
                bytes as f64 / 1e6
            ));
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Box::new(move |ok: bool| {
            let line = compiled_line(&plugin, bytes, ok, started.elapsed());
            match spinner {
                Some(bar) => bar.finish_with_message(line),
                None => eprintln!("{line}"),
            }
        })
    })
}

/// The file in a compiled cache whose presence says a hook has already told of a cold cache
/// there: said once per state directory, not at every call of a hook that cannot write its cache.
/// `init` removes it when it compiles ahead.
pub(crate) const COLD_NOTED: &str = "cold-cache-noted";

/// A hook's observer: silent, except that the first compile on the asking path that succeeds in
/// a state directory says on stderr that the cache was cold and what compiles ahead. Parallel
/// hooks race on the marker file; one of them says it.
pub fn cold_cache_observer(state_dir: &std::path::Path, quiet: bool) -> CompileObserver {
    let cache = state_dir.join("cache");
    Arc::new(
        move |plugin: &str, _bytes: usize| -> Box<dyn FnOnce(bool)> {
            if quiet || cache.join(COLD_NOTED).exists() {
                return Box::new(|_| {});
            }
            let started = Instant::now();
            let (plugin, cache) = (plugin.to_owned(), cache.clone());
            Box::new(move |ok: bool| {
                if ok && first_cold(&cache) {
                    eprintln!(
                        "{} {plugin}, so this tool call compiled it first ({:.1} s); `approval-host init` compiles a deployment's plugins ahead (said once for {})",
                        approval_host::plugin::cache::COLD_CACHE,
                        started.elapsed().as_secs_f64(),
                        cache.display()
                    );
                }
            })
        },
    )
}

/// Whether this is the first cold compile said for `cache` (the marker made now).
fn first_cold(cache: &std::path::Path) -> bool {
    let _ = approval_host::private::create_dir_all(cache);
    approval_host::private::open_options()
        .write(true)
        .create_new(true)
        .open(cache.join(COLD_NOTED))
        .is_ok()
}

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

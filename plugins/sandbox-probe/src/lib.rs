//! Test guest: tries one thing the sandbox may or may not allow, chosen by its `probe` config, and
//! answers `allow-once` when it worked and `reject` when it failed, so tests can see what the
//! sandbox let through. Probes: `read` (the file at `path`), `write` (create a file at `path`),
//! `list` (the directory at `path`), `env` (any environment variable or argument), `stdio`
//! (print one line to stdout and one to stderr).

wit_bindgen::generate!({ path: "../../wit/approval-0.1.wit", world: "answerer" });

use approval::plugin::host::{self, Level};

struct Probe;

fn attempt() -> Result<(), String> {
    let path = host::config("path").unwrap_or_default();
    match host::config("probe").as_deref() {
        Some("read") => std::fs::read_to_string(&path)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Some("write") => std::fs::write(&path, b"escaped").map_err(|e| e.to_string()),
        Some("list") => std::fs::read_dir(&path)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Some("env") => {
            let vars = std::env::vars().count();
            let args = std::env::args().count();
            if vars + args > 0 {
                Ok(())
            } else {
                Err("no environment variables and no arguments".to_owned())
            }
        }
        Some("stdio") => {
            println!("probe says hello on stdout");
            eprintln!("probe says hello on stderr");
            Ok(())
        }
        other => Err(format!("unknown probe {other:?}")),
    }
}

impl Guest for Probe {
    fn decide(_request: Request) -> Decision {
        match attempt() {
            Ok(()) => Decision::AllowOnce,
            Err(e) => {
                host::log(Level::Info, &format!("probe failed: {e}"));
                Decision::Reject
            }
        }
    }
}

export!(Probe);

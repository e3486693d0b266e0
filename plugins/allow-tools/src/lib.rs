//! `allow-tools` gate (plugin API 0.2): grants one call of any tool listed in its `tools` config
//! (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else. `tools` is
//! its only config key: any other is refused at load, so a typo cannot go unnoticed.
//!
//! An instance's config never changes (a reload makes new instances), so the list is read from
//! the host once per instance: a warm decision is then one call with no call back into the host.

wit_bindgen::generate!({ path: "../../wit/approval-0.2.wit", world: "answerer" });

use std::sync::OnceLock;

use approval::plugin::host;

struct AllowTools;

/// The config keys this gate reads.
const KEYS: [&str; 1] = ["tools"];

impl Guest for AllowTools {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        match config.iter().find(|(k, _)| !KEYS.contains(&k.as_str())) {
            Some((key, _)) => Err(format!(
                "unknown key {key:?}: allow-tools reads only \"tools\""
            )),
            None => Ok(()),
        }
    }

    fn decide(request: Request) -> Decision {
        if tools().iter().any(|tool| *tool == request.tool_name) {
            Decision::AllowOnce
        } else {
            Decision::Next
        }
    }
}

/// The listed tools, read from the host on the first decision of this instance.
fn tools() -> &'static [String] {
    static TOOLS: OnceLock<Vec<String>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        host::config("tools")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|tool| !tool.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

export!(AllowTools);

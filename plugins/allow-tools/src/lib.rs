//! `allow-tools` gate (plugin API 0.2): grants one call of any tool listed in its `tools` config
//! (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else. `tools` is
//! its only config key: any other is refused at load, so a typo cannot go unnoticed.

wit_bindgen::generate!({ path: "../../wit/approval-0.2.wit", world: "answerer" });

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
        let tools = host::config("tools").unwrap_or_default();
        let listed = tools
            .split(',')
            .map(str::trim)
            .any(|tool| !tool.is_empty() && tool == request.tool_name);
        if listed {
            Decision::AllowOnce
        } else {
            Decision::Next
        }
    }
}

export!(AllowTools);

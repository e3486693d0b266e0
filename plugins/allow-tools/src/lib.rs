//! `allow-tools` gate: grants one call of any tool listed in its `tools` config (comma-separated,
//! e.g. `tools = "read,grep"`), and says `next` for everything else.

wit_bindgen::generate!({ path: "../../wit", world: "answerer" });

use approval::plugin::host;

struct AllowTools;

impl Guest for AllowTools {
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

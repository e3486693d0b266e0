//! Which MCP methods the gateway forwards and how: the closed lists every message from the
//! agent is checked against before anything reaches the server. A method on none of them is
//! refused (a request) or dropped (a notification), whatever it is named: a method the gateway
//! does not know is one whose effect it cannot judge.

/// `initialize`: the handshake of the revisions before 2026-07-28.
pub const INITIALIZE: &str = "initialize";

/// Requests that cannot act on the world: they start the connection, check it is alive, or list
/// what the server offers. Forwarded without a question.
pub const INERT: [&str; 8] = [
    INITIALIZE,
    "server/discover",
    "ping",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "logging/setLevel",
];

/// `tools/call`: asked as `mcp__<server>__<tool>`.
pub const CALL_TOOL: &str = "tools/call";
/// `resources/read`: asked as `mcp__<server>__resources/read` with `{uri}`.
pub const READ_RESOURCE: &str = "resources/read";
/// `resources/subscribe`: asked as `mcp__<server>__resources/subscribe` with `{uri}` (a
/// subscription tells the agent when the resource changes, which is itself a read).
pub const SUBSCRIBE: &str = "resources/subscribe";
/// `resources/unsubscribe`: forwarded unasked (it only stops what a question allowed).
pub const UNSUBSCRIBE: &str = "resources/unsubscribe";
/// `prompts/get`: asked as `mcp__<server>__prompts/get` with `{name, arguments}`.
pub const GET_PROMPT: &str = "prompts/get";
/// `completion/complete`: asked as `mcp__<server>__completion/complete` with `{ref, argument,
/// context}` (a server's completions may read what the referenced resource or prompt holds).
pub const COMPLETE: &str = "completion/complete";

/// Requests that are questions, each under its own rule name.
pub const ASKED: [&str; 5] = [CALL_TOOL, READ_RESOURCE, SUBSCRIBE, GET_PROMPT, COMPLETE];

/// Notifications the gateway understands and forwards: none can act.
pub const NOTIFICATIONS: [&str; 4] = [
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// The server's requests of the agent, recorded and passed unless `[mcp]` refuses them (its
/// pings pass unrecorded; anything else is refused).
pub const SERVER_REQUESTS: [&str; 3] =
    ["sampling/createMessage", "elicitation/create", "roots/list"];

/// The tool-name prefixes the questions of [`ASKED`] methods other than `tools/call` are asked
/// under (`mcp__notes__resources/read`): a tool whose name starts with one is never called or
/// listed, so no tool's rule can be mistaken for a resource's and no resource's for a tool's.
pub const RESERVED_TOOL_PREFIXES: [&str; 3] = ["resources/", "prompts/", "completion/"];

/// How the gateway treats a request of `method` from the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// Forwarded without a question.
    Inert,
    /// Asked first.
    Asked,
    /// Refused: not on any list.
    Unknown,
}

/// The class of a request method.
pub fn request_class(method: &str) -> RequestClass {
    if INERT.contains(&method) || method == UNSUBSCRIBE {
        RequestClass::Inert
    } else if ASKED.contains(&method) {
        RequestClass::Asked
    } else {
        RequestClass::Unknown
    }
}

/// Whether a notification of `method` from the agent is forwarded.
pub fn forwards_notification(method: &str) -> bool {
    NOTIFICATIONS.contains(&method)
}

/// Whether `tool` is a name reserved for the questions of resources, prompts and completion.
pub fn reserved_tool(tool: &str) -> bool {
    RESERVED_TOOL_PREFIXES.iter().any(|p| tool.starts_with(p))
}

/// Why a request was refused because of its method.
pub fn unknown_method(method: &str) -> String {
    format!(
        "the MCP gateway does not forward {method:?}: it is not a method the gateway asks about or knows cannot act"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_has_one_class_and_custom_names_have_none() {
        for m in INERT {
            assert_eq!(request_class(m), RequestClass::Inert, "{m}");
        }
        for m in ASKED {
            assert_eq!(request_class(m), RequestClass::Asked, "{m}");
        }
        for m in [
            "tools/call ",
            "Tools/call",
            "tools/callx",
            "tools/delete",
            "resources/directory/read",
            "subscriptions/listen",
            "tasks/get",
            "skills/get",
            "notifications/initialized",
            "x/custom",
            "",
        ] {
            assert_eq!(request_class(m), RequestClass::Unknown, "{m:?}");
        }
        assert_eq!(request_class("server/discover"), RequestClass::Inert);
        assert!(forwards_notification("notifications/cancelled"));
        assert!(!forwards_notification("notifications/tools/list_changed"));
        assert!(!forwards_notification("tools/call"));
        assert!(reserved_tool("resources/read"));
        assert!(reserved_tool("prompts/x"));
        assert!(!reserved_tool("read_resources"));
        assert!(!reserved_tool("a/resources/read"));
    }
}

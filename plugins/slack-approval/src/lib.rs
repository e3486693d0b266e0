//! Example answerer (plugin API 0.3): asks a person in Slack. Each question is posted to a
//! channel as a message with Allow and Reject buttons, and waits; the button's interaction
//! callback (which Slack sends to `serve --callbacks` at `/plugins/<name>/callback`) settles it
//! with the person's name, or the entry's `wait_ms` runs out and its `on-timeout` settles it.
//!
//! Config: `post-url` (Slack's `https://slack.com/api/chat.postMessage`, or a stand-in),
//! `channel`, and `max-age-s` (how old a callback's timestamp may be, 300 by default).
//! Secrets, which the plugin uses by name and never holds: `token` (the bot token, sent as
//! `Authorization: Bearer {secret:token}`) and `signing` (the app's signing secret, which
//! `host.verify-signature` checks each callback's `X-Slack-Signature` with).
//!
//! The question's text comes from the agent: it is escaped for Slack (`&`, `<`, `>`), so it
//! cannot mention a channel or link elsewhere, and its backticks are replaced, so it cannot
//! close the code block and write a message of its own. Escaped first, then cut to fit; a call
//! too long to show whole is offered only the Reject button, so nobody allows what they did not
//! see. A post that fails (Slack down, a message Slack refuses) rejects: the agent cannot route
//! around the person by making the post fail. Where no callback can reach the host (`can-wait`
//! is false) nothing is posted: the plugin says `next`.

wit_bindgen::generate!({ path: "../../wit/approval-0.3.wit", world: "answerer" });

use approval::plugin::host;
use serde_json::{Value, json};

struct Slack;

const KEYS: [&str; 3] = ["post-url", "channel", "max-age-s"];

/// The buttons' action ids.
const ALLOW: &str = "approval-allow";
const REJECT: &str = "approval-reject";

/// The most of the call's arguments shown, in bytes.
const MAX_SHOWN: usize = 2000;

fn config(key: &str) -> Result<String, String> {
    host::config(key).ok_or_else(|| format!("{key} is not configured"))
}

fn max_age() -> i64 {
    host::config("max-age-s")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// `text` made inert for Slack's mrkdwn: no mentions, links or entities of the agent's making,
/// no backtick to end a code span or block with, no line break to start a block quote with.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "\u{2035}")
        .replace(['\n', '\r'], " ")
}

/// `text` escaped, then cut to at most `max` bytes: whether it was cut, and what is left.
fn shown(text: &str, max: usize) -> (bool, String) {
    let escaped = escape(text);
    if escaped.len() <= max {
        return (false, escaped);
    }
    let mut end = max;
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    // Not in the middle of an entity such as `&lt;`.
    if let Some(amp) = escaped[..end].rfind('&')
        && !escaped[amp..end].contains(';')
    {
        end = amp;
    }
    (true, format!("{}…", &escaped[..end]))
}

/// The message's text, and whether any of the call had to be cut.
fn message(request: &Request) -> (String, bool) {
    let (cut_agent, agent) = shown(&request.agent, 100);
    let (cut_tool, tool) = shown(&request.tool_name, 100);
    let mut cut = cut_agent || cut_tool;
    let mut text = format!("*Approval needed*: agent `{agent}` wants to run *{tool}*");
    if let Some(reason) = &request.reason {
        let (was_cut, reason) = shown(reason, 300);
        cut |= was_cut;
        text.push_str(&format!("\n> {reason}"));
    }
    if let Some(arguments) = &request.arguments {
        let (was_cut, arguments) = shown(arguments, MAX_SHOWN);
        cut |= was_cut;
        text.push_str(&format!("\n```{arguments}```"));
    }
    if let Some(cwd) = &request.cwd {
        let (was_cut, cwd) = shown(cwd, 200);
        cut |= was_cut;
        text.push_str(&format!("\nin `{cwd}`"));
    }
    if cut {
        text.push_str("\n_Too long to show whole here: it can only be rejected._");
    }
    (text, cut)
}

fn post(request: &Request) -> Result<(), String> {
    let url = config("post-url")?;
    let (text, cut) = message(request);
    let button = |label: &str, id: &str, style: &str| {
        json!({"type": "button", "text": {"type": "plain_text", "text": label},
               "action_id": id, "value": request.id, "style": style})
    };
    // Nobody allows what they were not shown whole.
    let buttons = if cut {
        json!([button("Reject", REJECT, "danger")])
    } else {
        json!([
            button("Allow once", ALLOW, "primary"),
            button("Reject", REJECT, "danger")
        ])
    };
    let body = json!({
        "channel": config("channel")?,
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": buttons},
        ],
    });
    let response = outbound::send(
        "POST",
        &url,
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("authorization", "Bearer {secret:token}"),
        ],
        body.to_string().as_bytes(),
    )?;
    let said: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    if response.status != 200 || said.get("ok") != Some(&Value::Bool(true)) {
        return Err(format!(
            "Slack answered {} {}",
            response.status,
            said.get("error").and_then(Value::as_str).unwrap_or("")
        ));
    }
    Ok(())
}

/// Reads an interaction callback: checks its timestamp and signature, then which button whose
/// person pressed for which question.
fn settle(request: &CallbackRequest) -> Result<Settlement, String> {
    let signing = outbound::Signing {
        timestamp: "X-Slack-Request-Timestamp",
        signature: "X-Slack-Signature",
        prefix: "v0=",
        version: "v0:",
        separator: ":",
    };
    // A signed callback replayed later is refused.
    signing.check(
        &request.headers,
        &request.body,
        max_age(),
        |signed, signature| host::verify_signature("signing", signed, signature),
    )?;
    let body = std::str::from_utf8(&request.body).map_err(|_| "the body is not UTF-8")?;
    let payload = outbound::form_value(body, "payload").ok_or("no (single) payload")?;
    let payload: Value = serde_json::from_str(&payload).map_err(|e| format!("payload: {e}"))?;
    if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
        return Err("not a block_actions interaction".to_owned());
    }
    let actions = payload
        .get("actions")
        .and_then(Value::as_array)
        .ok_or("no actions")?;
    let [action] = actions.as_slice() else {
        return Err("not exactly one action".to_owned());
    };
    let correlation = action
        .get("value")
        .and_then(Value::as_str)
        .ok_or("the action has no value")?;
    let user = payload.get("user").ok_or("no user")?;
    // The id is stable; a name can be changed to look like someone else's.
    let id = user
        .get("id")
        .and_then(Value::as_str)
        .ok_or("the user has no id")?;
    let who = match ["username", "name"]
        .iter()
        .find_map(|k| user.get(*k).and_then(Value::as_str))
    {
        Some(name) => format!("{name} ({id})"),
        None => id.to_owned(),
    };
    let decision = match action.get("action_id").and_then(Value::as_str) {
        Some(ALLOW) => Decision::AllowOnce,
        Some(REJECT) => Decision::Reject(Some(format!("rejected in Slack by {who}"))),
        _ => return Err("not one of this plugin's buttons".to_owned()),
    };
    Ok(Settlement {
        correlation: correlation.to_owned(),
        decision,
        by: Some(who),
    })
}

impl Guest for Slack {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        for (key, value) in &config {
            match key.as_str() {
                "post-url" if !(value.starts_with("https://") || value.starts_with("http://")) => {
                    return Err(format!("post-url {value:?} is not an http(s) URL"));
                }
                "channel" if value.is_empty() => return Err("channel is empty".to_owned()),
                "max-age-s" if !value.parse::<u32>().is_ok_and(|s| (1..=3600).contains(&s)) => {
                    return Err(format!("max-age-s {value:?} is not 1 to 3600"));
                }
                k if !KEYS.contains(&k) => return Err(format!("unknown config key {k:?}")),
                _ => {}
            }
        }
        for key in ["post-url", "channel"] {
            if !config.iter().any(|(k, _)| k == key) {
                return Err(format!("{key} is missing"));
            }
        }
        Ok(())
    }

    fn decide(request: Request) -> Decision {
        if !request.can_wait {
            host::log(
                host::Level::Info,
                "no callback can reach the host: nothing posted, the question goes on",
            );
            return Decision::Next;
        }
        match post(&request) {
            Ok(()) => Decision::Pending(request.id),
            Err(why) => {
                host::log(host::Level::Warn, &format!("posting the question: {why}"));
                Decision::Reject(Some(
                    "the question could not be put to a person in Slack".to_owned(),
                ))
            }
        }
    }

    fn callback(request: CallbackRequest) -> Result<Settlement, String> {
        settle(&request)
    }
}

export!(Slack);

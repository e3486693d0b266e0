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
//! cannot mention a channel, link elsewhere or close the code block's formatting into a
//! mention; it is cut to fit a message. Where no callback can reach the host (`can-wait` is
//! false) nothing is posted: the plugin says `next`.

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

/// `text` made inert for Slack's mrkdwn: no mentions, links or entities of the agent's making.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("```", "`\u{200b}``")
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn message(request: &Request) -> String {
    let mut text = format!(
        "*Approval needed*: agent `{}` wants to run *{}*",
        escape(&cut(&request.agent, 100)),
        escape(&cut(&request.tool_name, 100))
    );
    if let Some(reason) = &request.reason {
        text.push_str(&format!("\n> {}", escape(&cut(reason, 300))));
    }
    if let Some(arguments) = &request.arguments {
        text.push_str(&format!(
            "\n```{}```",
            escape(&cut(arguments, MAX_SHOWN))
        ));
    }
    if let Some(cwd) = &request.cwd {
        text.push_str(&format!("\nin `{}`", escape(&cut(cwd, 200))));
    }
    text
}

fn post(request: &Request) -> Result<(), String> {
    let url = config("post-url")?;
    let text = message(request);
    let button = |label: &str, id: &str, style: &str| {
        json!({"type": "button", "text": {"type": "plain_text", "text": label},
               "action_id": id, "value": request.id, "style": style})
    };
    let body = json!({
        "channel": config("channel")?,
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "actions", "elements": [
                button("Allow once", ALLOW, "primary"),
                button("Reject", REJECT, "danger"),
            ]},
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
    let timestamp = outbound::header(&request.headers, "x-slack-request-timestamp")
        .ok_or("no (single) X-Slack-Request-Timestamp")?;
    let signature = outbound::header(&request.headers, "x-slack-signature")
        .ok_or("no (single) X-Slack-Signature")?;
    let at: i64 = timestamp.parse().map_err(|_| "the timestamp is not a number")?;
    // A signed callback replayed later is refused.
    if (outbound::now_s() - at).abs() > max_age() {
        return Err("the timestamp is too old or in the future".to_owned());
    }
    let signature = signature
        .strip_prefix("v0=")
        .and_then(outbound::unhex)
        .ok_or("the signature is not v0=<hex>")?;
    let mut signed = format!("v0:{timestamp}:").into_bytes();
    signed.extend_from_slice(&request.body);
    if !host::verify_signature("signing", &signed, &signature) {
        return Err("the signature does not match".to_owned());
    }
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
    let who = ["username", "name", "id"]
        .iter()
        .find_map(|k| user.get(*k).and_then(Value::as_str))
        .ok_or("the user has no name")?;
    let decision = match action.get("action_id").and_then(Value::as_str) {
        Some(ALLOW) => Decision::AllowOnce,
        Some(REJECT) => Decision::Reject(Some(format!("rejected in Slack by {who}"))),
        _ => return Err("not one of this plugin's buttons".to_owned()),
    };
    Ok(Settlement {
        correlation: correlation.to_owned(),
        decision,
        by: Some(who.to_owned()),
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
                Decision::Next
            }
        }
    }

    fn callback(request: CallbackRequest) -> Result<Settlement, String> {
        settle(&request)
    }
}

export!(Slack);

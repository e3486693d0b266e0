//! Example answerer (plugin API 0.3): asks a team's own service over a webhook. Each question
//! is posted as JSON to `url` with `Authorization: Bearer {secret:token}`. The service answers
//! at once (`200 {"decision": "allow" | "reject" | "next", "reason"?, "by"?}`) or later
//! (`202`): then the question waits until the service posts the answer, signed, to
//! `/plugins/<name>/callback`, or the entry's `wait_ms` runs out.
//!
//! A callback carries `X-Approval-Timestamp` (Unix seconds) and `X-Approval-Signature:
//! sha256=<hex of HMAC-SHA256(signing secret, "<timestamp>.<body>")>`; its body is `{"id":
//! "<question id>", "decision": "allow" | "reject", "reason"?, "by"?}`. The plugin checks the
//! signature with `host.verify-signature` (it never holds the `signing` secret) and refuses a
//! timestamp more than `max-age-s` (300) away from now, so a captured callback cannot be
//! replayed later.
//!
//! What the service is sent: `{"id", "agent", "session", "tool", "callId", "arguments"
//! (the call's JSON, or null), "reason", "cwd", "canWait"}`. A service that cannot be asked
//! (unreachable, not granted, an error status, a call too big to send) means a rejection with
//! `the approval service could not be asked`: the agent cannot route around it.

wit_bindgen::generate!({ path: "../../wit/approval-0.3.wit", world: "answerer" });

use approval::plugin::host;
use serde_json::{Value, json};

struct Webhook;

const KEYS: [&str; 2] = ["url", "max-age-s"];

fn max_age() -> i64 {
    host::config("max-age-s")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// A decision the service spelled: `allow`, `reject` (with its reason) or `next`.
fn decision(said: &Value, who: Option<&str>) -> Result<Decision, String> {
    let reason = said
        .get("reason")
        .and_then(Value::as_str)
        .map(|r| match who {
            Some(who) => format!("{r} ({who})"),
            None => r.to_owned(),
        });
    match said.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(Decision::AllowOnce),
        Some("reject") => Ok(Decision::Reject(reason)),
        Some("next") => Ok(Decision::Next),
        other => Err(format!("decision {other:?} is not allow, reject or next")),
    }
}

fn ask(request: &Request) -> Result<Decision, String> {
    let url = host::config("url").ok_or("url is not configured")?;
    let arguments = request
        .arguments
        .as_deref()
        .and_then(|a| serde_json::from_str::<Value>(a).ok())
        .unwrap_or(Value::Null);
    let body = json!({
        "id": request.id,
        "agent": request.agent,
        "session": request.session,
        "tool": request.tool_name,
        "callId": request.call_id,
        "arguments": arguments,
        "reason": request.reason,
        "cwd": request.cwd,
        "canWait": request.can_wait,
    });
    let response = outbound::send(
        "POST",
        &url,
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer {secret:token}"),
        ],
        body.to_string().as_bytes(),
    )?;
    match response.status {
        200 => {
            let said: Value = serde_json::from_slice(&response.body)
                .map_err(|e| format!("the answer is not JSON: {e}"))?;
            decision(&said, said.get("by").and_then(Value::as_str))
        }
        202 if request.can_wait => Ok(Decision::Pending(request.id.clone())),
        202 => Err("the service will answer later, and no callback can reach the host".to_owned()),
        status => Err(format!("the service answered {status}")),
    }
}

fn settle(request: &CallbackRequest) -> Result<Settlement, String> {
    let signing = outbound::Signing {
        timestamp: "X-Approval-Timestamp",
        signature: "X-Approval-Signature",
        prefix: "sha256=",
        version: "",
        separator: ".",
    };
    signing.check(
        &request.headers,
        &request.body,
        max_age(),
        |signed, signature| host::verify_signature("signing", signed, signature),
    )?;
    let said: Value =
        serde_json::from_slice(&request.body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let correlation = said
        .get("id")
        .and_then(Value::as_str)
        .ok_or("the body names no question id")?;
    let who = said.get("by").and_then(Value::as_str);
    let decision = decision(&said, None)?;
    if matches!(decision, Decision::Next) {
        return Err("a callback settles with allow or reject".to_owned());
    }
    Ok(Settlement {
        correlation: correlation.to_owned(),
        decision,
        by: who.map(str::to_owned),
    })
}

impl Guest for Webhook {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        for (key, value) in &config {
            match key.as_str() {
                "url" if !(value.starts_with("https://") || value.starts_with("http://")) => {
                    return Err(format!("url {value:?} is not an http(s) URL"));
                }
                "max-age-s" if !value.parse::<u32>().is_ok_and(|s| (1..=3600).contains(&s)) => {
                    return Err(format!("max-age-s {value:?} is not 1 to 3600"));
                }
                k if !KEYS.contains(&k) => return Err(format!("unknown config key {k:?}")),
                _ => {}
            }
        }
        if !config.iter().any(|(k, _)| k == "url") {
            return Err("url is missing".to_owned());
        }
        Ok(())
    }

    fn decide(request: Request) -> Decision {
        match ask(&request) {
            Ok(decision) => decision,
            // Not `next`: an agent that can make the request fail (a call too big to send)
            // must not route around the service that should say yes first.
            Err(why) => {
                host::log(host::Level::Warn, &format!("asking the service: {why}"));
                Decision::Reject(Some("the approval service could not be asked".to_owned()))
            }
        }
    }

    fn callback(request: CallbackRequest) -> Result<Settlement, String> {
        settle(&request)
    }
}

export!(Webhook);

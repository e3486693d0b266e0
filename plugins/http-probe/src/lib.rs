//! Test guest (API 0.3): sends one GET to its `url` config through `wasi:http` and answers from
//! the response, so tests can see what the host sent, refused or cut. A `200` whose body is
//! `allow` allows once; a body `reject:<why>` rejects with that reason; a redirect is followed
//! once when `follow` is `yes` (a new request, which the host checks again); anything else, and
//! every error, rejects with a reason saying what happened (`request failed: <error>`).
//! `header` (`name: value`) is sent with the request, so a test can send `{secret:NAME}`;
//! `echo = "yes"` logs the response body and rejects with it as the reason; `verify`
//! (`message|hex signature`) skips the request and answers whether `host.verify-signature` of the
//! `key` secret holds. `pending` answers `pending` at once, under the question's id (`pending =
//! "id"`) or under the value itself; its callback takes `?id=<correlation>&decision=allow|reject
//! [&by=<name>]`, unsigned (a test guest: the examples check signatures).

wit_bindgen::generate!({ path: "../../wit/approval-0.3.wit", world: "answerer" });

use approval::plugin::host;
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, Method, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct Probe;

/// `(status, location, body)` of a GET of `url`.
fn get(url: &str) -> Result<(u16, Option<String>, Vec<u8>), String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return Err(format!("not an http(s) URL: {url}"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    if let Some(header) = host::config("header") {
        let (name, value) = header.split_once(": ").ok_or("header is `name: value`")?;
        headers
            .append(name, value.as_bytes())
            .map_err(|e| format!("header: {e:?}"))?;
    }
    let request = OutgoingRequest::new(headers);
    request.set_method(&Method::Get).map_err(|()| "method")?;
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path")?;
    let pending = outgoing_handler::handle(request, None).map_err(describe)?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "the response was taken twice")?
        .map_err(describe)?;
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no body stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("reading the body: {}", e.to_debug_string()));
            }
        }
    }
    Ok((status, location, bytes))
}

fn describe(e: ErrorCode) -> String {
    format!("{e:?}")
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn answer() -> Result<Decision, String> {
    if let Some(check) = host::config("verify") {
        let (message, signature) = check.split_once('|').ok_or("verify is `message|hex`")?;
        let signature = unhex(signature).ok_or("the signature is not hex")?;
        return Ok(
            if host::verify_signature("key", message.as_bytes(), &signature) {
                Decision::AllowOnce
            } else {
                Decision::Reject(Some("bad signature".to_owned()))
            },
        );
    }
    let url = host::config("url").ok_or("no url configured")?;
    let (mut status, mut location, mut body) = get(&url)?;
    if (300..400).contains(&status) && host::config("follow").as_deref() == Some("yes") {
        let next = location.take().ok_or("a redirect without a location")?;
        (status, location, body) = get(&next)?;
    }
    let _ = location;
    let text = String::from_utf8_lossy(&body);
    if host::config("echo").as_deref() == Some("yes") {
        host::log(host::Level::Info, &format!("the server said: {text}"));
        return Ok(Decision::Reject(Some(format!("the server said: {text}"))));
    }
    if status == 200 && text == "allow" {
        return Ok(Decision::AllowOnce);
    }
    if let Some(why) = text.strip_prefix("reject:") {
        return Ok(Decision::Reject(Some(why.to_owned())));
    }
    Err(format!("status {status}, {} bytes", body.len()))
}

impl Guest for Probe {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        for (key, _) in config {
            if !["url", "follow", "header", "echo", "verify", "pending"].contains(&key.as_str()) {
                return Err(format!("unknown config key {key:?}"));
            }
        }
        Ok(())
    }

    fn decide(request: Request) -> Decision {
        if let Some(correlation) = host::config("pending") {
            return Decision::Pending(if correlation == "id" {
                request.id
            } else {
                correlation
            });
        }
        match answer() {
            Ok(decision) => decision,
            Err(why) => Decision::Reject(Some(format!("request failed: {why}"))),
        }
    }

    fn callback(request: CallbackRequest) -> Result<Settlement, String> {
        let value = |key: &str| {
            request.query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == key).then(|| v.to_owned())
            })
        };
        let correlation = value("id").ok_or("no id")?;
        let decision = match value("decision").as_deref() {
            Some("allow") => Decision::AllowOnce,
            Some("reject") => Decision::Reject(Some("rejected by callback".to_owned())),
            Some("pending") => Decision::Pending(correlation.clone()),
            _ => return Err("decision is allow or reject".to_owned()),
        };
        Ok(Settlement {
            correlation,
            decision,
            by: value("by"),
        })
    }
}

export!(Probe);

//! What the example answerers that reach out share (plugin API 0.3): one HTTP request sent
//! through `wasi:http` (the host sends it, to a granted host only), the check of a signed
//! callback, and the small codecs a callback needs: hex, `application/x-www-form-urlencoded`, a
//! header by name.

use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// The most of a response body read: the host cuts at 4 MiB anyway.
const MAX_BODY: usize = 1 << 20;

/// A response: its status and body.
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body (at most 1 MiB of it).
    pub body: Vec<u8>,
}

/// Sends `body` to `url` with `method` and `headers` (a value may hold `{secret:NAME}`, which
/// the host fills in for a granted host), and reads the response. A redirect is returned as
/// it came, not followed.
pub fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err(format!("not an http(s) URL: {url}"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let fields = Fields::new();
    for (name, value) in headers {
        fields
            .append(name, value.as_bytes())
            .map_err(|e| format!("header {name}: {e:?}"))?;
    }
    let request = OutgoingRequest::new(fields);
    let method = match method {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        other => Method::Other(other.to_owned()),
    };
    request.set_method(&method).map_err(|()| "method")?;
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path")?;
    let outgoing = request.body().map_err(|()| "no request body")?;
    let pending = outgoing_handler::handle(request, None).map_err(describe)?;
    {
        let stream = outgoing.write().map_err(|()| "no request body stream")?;
        for chunk in body.chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the body: {e:?}"))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(describe)?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "the response was taken twice")?
        .map_err(describe)?;
    let status = response.status();
    let incoming = response.consume().map_err(|()| "no body")?;
    let stream = incoming.stream().map_err(|()| "no body stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > MAX_BODY {
                    return Err(format!("the response is over {MAX_BODY} bytes"));
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("reading the body: {}", e.to_debug_string()));
            }
        }
    }
    Ok(Response {
        status,
        body: bytes,
    })
}

fn describe(e: ErrorCode) -> String {
    format!("{e:?}")
}

/// Bytes from lowercase or uppercase hex; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    // `from_str_radix` would take a sign: only digits are hex here.
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The value of the header `name` (lowercase), when it came once and is text.
pub fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a str> {
    let mut found = headers.iter().filter(|(n, _)| n == name);
    let (_, value) = found.next()?;
    // A header given twice is ambiguous: whichever one a check reads, another reader could
    // read the other.
    if found.next().is_some() {
        return None;
    }
    std::str::from_utf8(value).ok()
}

/// The value of `key` in an `application/x-www-form-urlencoded` body, decoded; `None` when it
/// is missing, given twice, or not UTF-8 once decoded.
pub fn form_value(body: &str, key: &str) -> Option<String> {
    let mut found = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| percent_decode(k).as_deref() == Some(key));
    let (_, value) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    percent_decode(value)
}

/// `+` as a space and `%XX` as its byte, the result UTF-8; `None` for a broken escape.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// How a service signs its callbacks: an HMAC-SHA256 over `<timestamp><separator><body>`, its
/// timestamp and signature in two headers (names as written, e.g. `X-Slack-Signature`).
pub struct Signing<'a> {
    /// The timestamp's header (Unix seconds).
    pub timestamp: &'a str,
    /// The signature's header.
    pub signature: &'a str,
    /// What the hex signature follows in its header: `v0=`, `sha256=`.
    pub prefix: &'a str,
    /// What the signed text starts with before the timestamp: `v0:`, or nothing.
    pub version: &'a str,
    /// What separates the timestamp from the body in the signed text: `:`, `.`.
    pub separator: &'a str,
}

impl Signing<'_> {
    /// Whether a callback with `headers` and `body` is signed as this says, at most `max_age`
    /// seconds from now (so a captured one cannot be replayed later); `verify` checks the HMAC
    /// (the host's `verify-signature`, so the key never enters the plugin). Each header must
    /// come once.
    pub fn check(
        &self,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
        max_age: i64,
        verify: impl FnOnce(&[u8], &[u8]) -> bool,
    ) -> Result<(), String> {
        let timestamp = header(headers, &self.timestamp.to_ascii_lowercase())
            .ok_or_else(|| format!("no (single) {}", self.timestamp))?;
        let signature = header(headers, &self.signature.to_ascii_lowercase())
            .ok_or_else(|| format!("no (single) {}", self.signature))?;
        let at: i64 = timestamp
            .parse()
            .map_err(|_| "the timestamp is not a number")?;
        if (now_s() - at).abs() > max_age {
            return Err("the timestamp is too old or in the future".to_owned());
        }
        let signature = signature
            .strip_prefix(self.prefix)
            .and_then(unhex)
            .ok_or_else(|| format!("the signature is not {}<hex>", self.prefix))?;
        let mut signed = format!("{}{timestamp}{}", self.version, self.separator).into_bytes();
        signed.extend_from_slice(body);
        if !verify(&signed, &signature) {
            return Err("the signature does not match".to_owned());
        }
        Ok(())
    }
}

/// Seconds since the Unix epoch, by the wall clock the host lends.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

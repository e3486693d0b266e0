//! Every message from the agent, read once and strictly before the MCP SDK sees it: valid JSON
//! with no key written twice at any depth, one JSON-RPC 2.0 object (no batches), a method on one
//! of the gateway's lists ([`super::methods`]), parameters the SDK reads into the method's own
//! type, and, for a method that is asked, parameters that read back exactly as they were written
//! (nothing the rules would not see reaches the server). What fails is refused (a request, with
//! its id), dropped (a notification) or, when not even its id can be trusted, answered as an
//! invalid request with a null id.
//!
//! The SDK reads a request it cannot type as a "custom" request and would forward it; here such
//! a request never becomes one.

use std::cell::RefCell;
use std::fmt;

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, CustomNotification, CustomRequest,
    ErrorCode, GetMeta, JsonRpcNotification, JsonRpcRequest, JsonRpcVersion2_0, RequestId,
};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::methods::{self, RequestClass};

/// The longest method name recorded as written (longer ones are cut).
pub(crate) const MAX_METHOD: usize = 128;

/// What the gateway does with one message from the agent.
#[derive(Debug)]
pub(crate) enum Screened {
    /// Handed to the SDK as read.
    Pass(Box<ClientJsonRpcMessage>),
    /// A request answered with an error and recorded, never forwarded.
    Refuse {
        /// Its id.
        id: RequestId,
        /// Its method as written.
        method: String,
        /// Why.
        why: String,
        /// Its `_meta`, which the refusal carries on: an agent on MCP 2026-07-28 names its
        /// version and client in every request, and the SDK reads no request without them.
        meta: Option<Box<Value>>,
    },
    /// A notification recorded and not forwarded.
    Drop {
        /// Its method as written.
        method: String,
        /// Why.
        why: String,
    },
    /// Not a message whose id can be trusted: answered with a null id.
    Garbage {
        /// Why.
        why: String,
    },
}

/// The method a refused message reaches the connection under, so that it is recorded in the
/// connection's session and answered there: only the screen makes such a message (one the agent
/// sends itself under this name is refused as an unknown method, like any other).
pub(crate) const REFUSED: &str = "approval-host/refused";

/// A refusal as the connection reads it from a [`REFUSED`] message.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Refusal {
    /// The method as written.
    pub(crate) method: String,
    /// Why.
    pub(crate) why: String,
    /// The JSON-RPC error code to answer with.
    pub(crate) code: i32,
}

/// The longest message the gateway reads from an agent (a line on stdio, a body over HTTP).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

impl Screened {
    /// The message the SDK is handed: the message itself, or a refusal under [`REFUSED`]; for
    /// garbage, the JSON-RPC error to answer with at once, as a line of JSON.
    pub(crate) fn into_message(self) -> Result<ClientJsonRpcMessage, Vec<u8>> {
        match self {
            Screened::Pass(m) => Ok(*m),
            Screened::Refuse {
                id,
                method,
                why,
                meta,
            } => {
                let code = unknown_code(&method, &why);
                let params = serde_json::to_value(Refusal {
                    method,
                    why,
                    code: code.0,
                })
                .ok();
                let mut request = CustomRequest::new(REFUSED, params);
                if let Some(meta) = meta.and_then(|m| serde_json::from_value(*m).ok()) {
                    *request.get_meta_mut() = meta;
                }
                Ok(ClientJsonRpcMessage::Request(JsonRpcRequest::new(
                    id,
                    ClientRequest::CustomRequest(request),
                )))
            }
            Screened::Drop { method, why } => {
                let params = serde_json::to_value(Refusal {
                    method,
                    why,
                    code: ErrorCode::INVALID_REQUEST.0,
                })
                .ok();
                Ok(ClientJsonRpcMessage::Notification(JsonRpcNotification {
                    jsonrpc: JsonRpcVersion2_0,
                    notification: ClientNotification::CustomNotification(CustomNotification::new(
                        REFUSED, params,
                    )),
                }))
            }
            Screened::Garbage { why } => Err(garbage_answer(&why)),
        }
    }
}

/// The code a refusal is answered with: method-not-found for a method on no list, else
/// invalid-request.
fn unknown_code(method: &str, why: &str) -> ErrorCode {
    if why == methods::unknown_method(method) {
        ErrorCode::METHOD_NOT_FOUND
    } else {
        ErrorCode::INVALID_REQUEST
    }
}

/// The answer to a message whose id cannot be trusted: an invalid-request error with a null id.
pub(crate) fn garbage_answer(why: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": ErrorCode::INVALID_REQUEST.0, "message": why},
    }))
    .unwrap_or_default()
}

/// The first key found twice, and where.
#[derive(Default)]
struct Twice {
    first: Option<(usize, String)>,
}

/// A JSON value read with every duplicate key noted (the first occurrence kept).
struct Strict<'a> {
    twice: &'a RefCell<Twice>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict {
            twice: self.twice,
            depth: self.depth + 1,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Strict {
                twice: self.twice,
                depth: self.depth + 1,
            })?;
            if out.contains_key(&key) {
                let mut twice = self.twice.borrow_mut();
                if twice.first.is_none() {
                    twice.first = Some((self.depth, key));
                }
            } else {
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }
}

/// Members of an asked request's parameters that the SDK types but no rule reads: answers to a
/// server's input request and its opaque state (the 2026 revision's multi-round trips, which
/// the gateway does not offer).
const UNREAD_MEMBERS: [&str; 2] = ["inputResponses", "requestState"];

/// The `_meta` member, which carries the request's progress token and other annotations, not
/// its arguments.
const META: &str = "_meta";

/// A request's `_meta`, when it is an object.
fn meta_of(object: &Map<String, Value>) -> Option<Box<Value>> {
    object
        .get("params")
        .and_then(|p| p.get(META))
        .filter(|m| m.is_object())
        .map(|m| Box::new(m.clone()))
}

/// A method name as recorded: as written, cut to [`MAX_METHOD`] characters.
fn recorded(method: &str) -> String {
    method.chars().take(MAX_METHOD).collect()
}

/// Reads one message from the agent.
pub(crate) fn screen(bytes: &[u8]) -> Screened {
    screen_with(bytes, true)
}

/// [`screen`], with the requests [`direct_request`] reads typed directly (`direct`) or all
/// through the SDK's union, as the tests compare.
fn screen_with(bytes: &[u8], direct: bool) -> Screened {
    let twice = RefCell::new(Twice::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Strict {
        twice: &twice,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            return Screened::Garbage {
                why: format!("not valid JSON: {e}"),
            };
        }
    };
    let Value::Object(mut object) = value else {
        return Screened::Garbage {
            why: "not a JSON-RPC message object (batches are not taken)".to_owned(),
        };
    };
    let twice = twice.into_inner().first;
    // A top-level key written twice leaves the message's own identity in doubt.
    if let Some((0, key)) = &twice {
        return Screened::Garbage {
            why: format!("the key {key:?} is written twice"),
        };
    }
    let id = match object.get("id") {
        None => None,
        Some(Value::String(s)) => Some(RequestId::String(s.as_str().into())),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => Some(RequestId::Number(n)),
            None => {
                return Screened::Garbage {
                    why: "the id is neither a string nor an integer".to_owned(),
                };
            }
        },
        Some(_) => {
            return Screened::Garbage {
                why: "the id is neither a string nor an integer".to_owned(),
            };
        }
    };
    let method_owned = match object.get("method") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => {
            return match id {
                Some(id) => Screened::Refuse {
                    id,
                    method: String::new(),
                    why: "the method is not a string".to_owned(),
                    meta: meta_of(&object),
                },
                None => Screened::Garbage {
                    why: "the method is not a string".to_owned(),
                },
            };
        }
    };
    let method = method_owned.as_deref();
    let meta = meta_of(&object);
    let refuse = |why: String| match (&id, method) {
        (Some(id), m) => Screened::Refuse {
            id: id.clone(),
            method: recorded(m.unwrap_or_default()),
            why,
            meta: meta.clone(),
        },
        (None, Some(m)) => Screened::Drop {
            method: recorded(m),
            why,
        },
        (None, None) => Screened::Garbage { why },
    };
    if object.get("jsonrpc") != Some(&Value::String("2.0".to_owned())) {
        return refuse("not a JSON-RPC 2.0 message (\"jsonrpc\": \"2.0\")".to_owned());
    }
    if let Some((_, key)) = twice {
        return refuse(format!("the key {key:?} is written twice"));
    }
    match (method, &id) {
        (Some(m), Some(_)) => {
            if methods::request_class(m) == RequestClass::Unknown {
                return refuse(methods::unknown_method(m));
            }
        }
        (Some(m), None) => {
            if !methods::forwards_notification(m) {
                return refuse(format!(
                    "the MCP gateway does not forward the notification {m:?}"
                ));
            }
        }
        (None, Some(_)) => {
            if !(object.contains_key("result") || object.contains_key("error")) {
                return refuse("neither a request, a notification nor a response".to_owned());
            }
        }
        (None, None) => {
            return Screened::Garbage {
                why: "neither a request, a notification nor a response".to_owned(),
            };
        }
    }
    let params = object.get("params").cloned();
    let direct = if direct {
        direct_request(method, &id, &mut object)
    } else {
        None
    };
    let typed: ClientJsonRpcMessage = match direct {
        Some(typed) => typed,
        None => match serde_json::from_value(Value::Object(object)) {
            Ok(t) => t,
            Err(e) => return refuse(format!("malformed: {e}")),
        },
    };
    // The SDK falls back to a custom request or notification for what it cannot type: for a
    // method on the gateway's lists that means the parameters did not fit.
    match &typed {
        ClientJsonRpcMessage::Request(r) => {
            let m = method.unwrap_or_default();
            if matches!(r.request, ClientRequest::CustomRequest(_)) || r.request.method() != m {
                return refuse(format!("malformed {m} parameters"));
            }
            if methods::request_class(m) == RequestClass::Asked
                && let Some(member) = UNREAD_MEMBERS.iter().find(|k| {
                    params
                        .as_ref()
                        .and_then(|p| p.get(**k))
                        .is_some_and(|v| !v.is_null())
                })
            {
                return refuse(format!(
                    "the {m} parameters carry {member:?}, which no rule reads and this gateway's protocol versions do not use"
                ));
            }
            if methods::request_class(m) == RequestClass::Asked
                && !reads_back(&r.request, params.as_ref())
            {
                return refuse(format!(
                    "the {m} parameters hold members the gateway does not read: only what a rule reads is forwarded"
                ));
            }
        }
        ClientJsonRpcMessage::Notification(n) => {
            let m = method.unwrap_or_default();
            if matches!(n.notification, ClientNotification::CustomNotification(_)) {
                return refuse(format!("malformed {m} parameters"));
            }
        }
        _ => {}
    }
    Screened::Pass(Box::new(typed))
}

/// A request of a method called once per tool call or read, typed straight into its own
/// request type; `None` for any other message, which the SDK's union reads. The union tries each
/// of its twenty-odd request types in turn and builds an error for every miss, which cost more
/// than all the rest of the screen. The result is the union's: a method's own type is the only
/// one its method name fits, and parameters it cannot read make the custom request the union
/// would fall back to (refused as malformed all the same). A message with members beyond a
/// request's (`result`, `error`, anything else), or parameters that are not an object, is left to
/// the union, whose shape checks refuse it.
fn direct_request(
    method: Option<&str>,
    id: &Option<RequestId>,
    object: &mut Map<String, Value>,
) -> Option<ClientJsonRpcMessage> {
    const REQUEST_MEMBERS: [&str; 4] = ["jsonrpc", "id", "method", "params"];
    let (Some(method), Some(id)) = (method, id) else {
        return None;
    };
    if !object.keys().all(|k| REQUEST_MEMBERS.contains(&k.as_str()))
        || object.get("params").is_some_and(|p| !p.is_object())
    {
        return None;
    }
    fn read<T: serde::de::DeserializeOwned>(
        object: &mut Map<String, Value>,
        into: fn(T) -> ClientRequest,
    ) -> ClientRequest {
        let mut body = Map::new();
        for key in ["method", "params"] {
            if let Some(v) = object.remove(key) {
                body.insert(key.to_owned(), v);
            }
        }
        let body = Value::Object(body);
        match T::deserialize(&body) {
            Ok(request) => into(request),
            // What the union falls back to for parameters that do not fit.
            Err(_) => {
                let (method, params) = match body {
                    Value::Object(mut body) => (body.remove("method"), body.remove("params")),
                    _ => (None, None),
                };
                let method = match method {
                    Some(Value::String(m)) => m,
                    _ => String::new(),
                };
                ClientRequest::CustomRequest(CustomRequest::new(method, params))
            }
        }
    }
    let request = match method {
        methods::CALL_TOOL => read(object, ClientRequest::CallToolRequest),
        methods::READ_RESOURCE => read(object, ClientRequest::ReadResourceRequest),
        methods::SUBSCRIBE => read(object, ClientRequest::SubscribeRequest),
        methods::GET_PROMPT => read(object, ClientRequest::GetPromptRequest),
        methods::COMPLETE => read(object, ClientRequest::CompleteRequest),
        "tools/list" => read(object, ClientRequest::ListToolsRequest),
        _ => return None,
    };
    Some(ClientJsonRpcMessage::Request(JsonRpcRequest::new(
        id.clone(),
        request,
    )))
}

/// Whether the typed request's parameters, written out again, are the parameters as sent (both
/// without `_meta`): the SDK ignores members it does not know, so a request that carries more
/// would be read one way by the rules and another by a server that reads it raw.
fn reads_back(request: &ClientRequest, sent: Option<&Value>) -> bool {
    let Ok(Value::Object(mut typed)) = serde_json::to_value(request) else {
        return false;
    };
    let mut typed = match typed.remove("params") {
        Some(Value::Object(p)) => p,
        None => Map::new(),
        Some(_) => return false,
    };
    let mut sent = match sent {
        Some(Value::Object(p)) => p.clone(),
        None => Map::new(),
        Some(_) => return false,
    };
    typed.remove(META);
    sent.remove(META);
    // A member sent as null reads as absent.
    sent.retain(|_, v| !v.is_null());
    typed == sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &str) -> String {
        match screen(line.as_bytes()) {
            Screened::Refuse { why, .. } | Screened::Drop { why, .. } => why,
            Screened::Garbage { why } => format!("garbage: {why}"),
            Screened::Pass(m) => panic!("passed: {line} as {m:?}"),
        }
    }

    #[test]
    fn a_call_as_an_sdk_writes_it_passes() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"w"}}}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":3}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"notes://welcome"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
        ] {
            assert!(
                matches!(screen(line.as_bytes()), Screened::Pass(_)),
                "{line}"
            );
        }
    }

    fn outcome(screened: Screened) -> String {
        match screened {
            Screened::Pass(m) => format!("pass {}", serde_json::to_value(*m).unwrap()),
            Screened::Refuse { why, method, .. } => format!("refuse {method}: {why}"),
            Screened::Drop { why, .. } => format!("drop {why}"),
            Screened::Garbage { why } => format!("garbage {why}"),
        }
    }

    /// Requests of the methods typed directly, well formed and not, with the members an SDK
    /// writes and ones it does not.
    const DIRECT_CORPUS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"w"}}}"#,
        r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":3,"k":[1,2]}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","arguments":{},"argumentz":{"a":1}}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"x","arguments":null}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":null}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":"x"}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"x","arguments":{},"task":{"ttl":5}}}"#,
        r#"{"jsonrpc":"2.0","id":11,"method":"resources/read","params":{"uri":"notes://welcome"}}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":7}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"resources/read","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":14,"method":"resources/subscribe","params":{"uri":"notes://a"}}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"prompts/get","params":{"name":"p","arguments":{"a":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":16,"method":"prompts/get","params":{"name":"p","arguments":{"a":1}}}"#,
        r#"{"jsonrpc":"2.0","id":17,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":18,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"x://y"},"argument":{"name":"a","value":"b"},"context":{"arguments":{"c":"d"}}}}"#,
        r#"{"jsonrpc":"2.0","id":19,"method":"completion/complete","params":{"ref":{"type":"ref/other"},"argument":{"name":"a","value":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":20,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":21,"method":"tools/list","params":{"cursor":"c"}}"#,
        r#"{"jsonrpc":"2.0","id":22,"method":"tools/list","params":null}"#,
        r#"{"jsonrpc":"2.0","id":23,"method":"tools/list","params":{"cursor":1}}"#,
        r#"{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"x","arguments":{}},"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"x","arguments":{}},"extra":1}"#,
        r#"{"jsonrpc":"2.0","id":26,"method":"ping"}"#,
    ];

    #[test]
    fn a_request_typed_directly_reads_as_the_sdk_s_union_reads_it() {
        let mut direct = 0;
        for line in DIRECT_CORPUS {
            let value: Value = serde_json::from_str(line).unwrap();
            let Value::Object(mut object) = value.clone() else {
                panic!("{line}")
            };
            let method = object
                .get("method")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let id = match object.get("id") {
                Some(Value::Number(n)) => n.as_i64().map(RequestId::Number),
                Some(Value::String(s)) => Some(RequestId::String(s.as_str().into())),
                _ => None,
            };
            let Some(typed) = direct_request(method.as_deref(), &id, &mut object) else {
                continue;
            };
            direct += 1;
            let union: ClientJsonRpcMessage = serde_json::from_value(value).unwrap();
            let custom = |m: &ClientJsonRpcMessage| {
                matches!(
                    m,
                    ClientJsonRpcMessage::Request(r)
                        if matches!(r.request, ClientRequest::CustomRequest(_))
                )
            };
            // A custom request is refused whatever it holds; any other is forwarded as read.
            assert_eq!(custom(&typed), custom(&union), "{line}");
            if !custom(&typed) {
                assert_eq!(
                    serde_json::to_value(&typed).unwrap(),
                    serde_json::to_value(&union).unwrap(),
                    "{line}"
                );
            }
            assert_eq!(
                outcome(screen_with(line.as_bytes(), true)),
                outcome(screen_with(line.as_bytes(), false)),
                "{line}"
            );
        }
        // Every line but the three whose parameters are not an object, the two with members
        // beyond a request's, and the ping.
        assert_eq!(direct, DIRECT_CORPUS.len() - 6);
    }

    #[test]
    fn duplicate_keys_at_any_depth_are_refused() {
        assert_eq!(
            refused(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_note","name":"read_note","arguments":{}}}"#
            ),
            "the key \"name\" is written twice"
        );
        assert_eq!(
            refused(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":{"p":1,"p":2}}}}"#
            ),
            "the key \"p\" is written twice"
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#),
            "garbage: the key \"id\" is written twice"
        );
    }

    #[test]
    fn unknown_and_malformed_methods_are_refused() {
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"method":"notes/delete","params":{}}"#),
            methods::unknown_method("notes/delete")
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#),
            "malformed tools/call parameters"
        );
        assert_eq!(
            refused(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"argumentz":{"a":1}}}"#
            ),
            "the tools/call parameters hold members the gateway does not read: only what a rule reads is forwarded"
        );
        assert_eq!(
            refused(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"requestState":"s"}}"#
            ),
            "the tools/call parameters carry \"requestState\", which no rule reads and this gateway's protocol versions do not use"
        );
        assert!(refused(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).starts_with("garbage"));
        assert!(refused(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).contains("2.0"));
        assert!(
            refused(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#).contains("notification")
        );
    }
}

//! `[telemetry]`: where the host's traces go. Off when the section is absent.
//!
//! ```toml
//! [telemetry]
//! otlp-endpoint = "http://127.0.0.1:4318"   # an OpenTelemetry collector's OTLP/HTTP address
//! service-name = "approval-host"            # the traces' service.name (this is the default)
//! ```

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, table, unread};
use super::{ConfigError, Deployment};
use crate::telemetry::TelemetryConfig;

const KEYS: [Key; 2] = [
    Key {
        name: "otlp-endpoint",
        kind: "string (`http://` URL)",
        default: "none (required)",
        meaning: "An OpenTelemetry collector's OTLP/HTTP base URL (`/v1/traces` is added unless given); only `http://`, without credentials, query or fragment: run the collector beside the host.",
    },
    Key {
        name: "service-name",
        kind: "string (1–255 characters)",
        default: r#"`"approval-host"`"#,
        meaning: "The traces' `service.name`; no control characters.",
    },
];

/// `[telemetry]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: PLACE,
    about: "Where the host's traces go: one OpenTelemetry trace per question, exported over OTLP/HTTP. No tracing when the section is absent.",
    keys: &KEYS,
};
const PLACE: &str = "[telemetry]";

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let mut endpoint = None;
    let mut service_name = None;
    for (k, v) in table(ctx, PLACE, value)? {
        match known_key(ctx, PLACE, k, &KEYS)? {
            "otlp-endpoint" => endpoint = Some(string(ctx, PLACE, k, v)?),
            "service-name" => {
                let name = string(ctx, PLACE, k, v)?;
                if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
                    return Err(ctx.err(
                        PLACE,
                        "service-name must be 1 to 255 characters, none of them control characters",
                    ));
                }
                service_name = Some(name);
            }
            other => return Err(unread(ctx, PLACE, other)),
        }
    }
    let endpoint = endpoint.ok_or_else(|| {
        ctx.err(
            PLACE,
            "otlp-endpoint is missing (say otlp-endpoint = \"http://127.0.0.1:4318\")",
        )
    })?;
    d.telemetry = Some(
        TelemetryConfig::new(endpoint, service_name)
            .map_err(|e| ctx.err(PLACE, format!("otlp-endpoint = {e}")))?,
    );
    Ok(())
}

//! `[telemetry]`: where the host's traces go. Off when the section is absent.
//!
//! ```toml
//! [telemetry]
//! otlp-endpoint = "http://127.0.0.1:4318"   # an OpenTelemetry collector's OTLP/HTTP address
//! service-name = "approval-host"            # the traces' service.name (this is the default)
//! ```

use toml::Value;

use super::read::{Ctx, string, table, unknown_key};
use super::{ConfigError, Deployment};
use crate::telemetry::TelemetryConfig;

const KEYS: [&str; 2] = ["otlp-endpoint", "service-name"];
const PLACE: &str = "[telemetry]";

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    let mut endpoint = None;
    let mut service_name = None;
    for (k, v) in table(ctx, PLACE, value)? {
        match k.as_str() {
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
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
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

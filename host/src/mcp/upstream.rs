//! How the gateway reaches its MCP server: a command it starts for each client connection and
//! speaks to over stdio, or a streamable HTTP endpoint.

use rmcp::RoleClient;
use rmcp::service::{RunningService, ServiceExt};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

use super::GatewayError;
use super::relay::Relay;

/// Where the MCP server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A program and its arguments, started per client connection (its stderr is the
    /// gateway's), with variables set in its environment besides the gateway's own.
    Command(Vec<String>, Vec<(String, String)>),
    /// A streamable HTTP endpoint (`http://127.0.0.1:8000/mcp`).
    Url(String),
}

impl Upstream {
    /// A server started by `command`.
    ///
    /// # Errors
    /// [`GatewayError::NoCommand`] for an empty command.
    pub fn command(command: Vec<String>) -> Result<Upstream, GatewayError> {
        if command.first().is_none_or(|p| p.is_empty()) {
            return Err(GatewayError::NoCommand);
        }
        Ok(Upstream::Command(command, Vec::new()))
    }

    /// This server with `env` set in its environment (a server reached by URL has none).
    #[must_use]
    pub fn with_env(self, env: Vec<(String, String)>) -> Upstream {
        match self {
            Upstream::Command(command, _) => Upstream::Command(command, env),
            url => url,
        }
    }

    /// A server at `url`, an `http` or `https` URL.
    ///
    /// # Errors
    /// [`GatewayError::UpstreamUrl`] naming what is wrong.
    pub fn url(url: &str) -> Result<Upstream, GatewayError> {
        let refuse = |why: &str| GatewayError::UpstreamUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let parsed = url::Url::parse(url).map_err(|e| refuse(&e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(refuse("the MCP server's URL must be http or https"));
        }
        if parsed.host().is_none() {
            return Err(refuse("the URL has no host"));
        }
        Ok(Upstream::Url(url.to_owned()))
    }

    /// Connects and initializes the server with the agent's own `initialize` parameters.
    pub(super) async fn connect(
        &self,
        relay: Relay,
    ) -> Result<RunningService<RoleClient, Relay>, String> {
        match self {
            Upstream::Command(command, env) => {
                let mut cmd = tokio::process::Command::new(&command[0]);
                // A plugin's secret is not the server's; what the deployment gives it is.
                crate::plugin::secret::withhold_from(&mut cmd);
                cmd.args(&command[1..])
                    .envs(env.iter().map(|(k, v)| (k, v)));
                let child = TokioChildProcess::new(cmd)
                    .map_err(|e| format!("starting the MCP server {:?}: {e}", command[0]))?;
                relay
                    .serve(child)
                    .await
                    .map_err(|e| format!("initializing the MCP server: {e}"))
            }
            Upstream::Url(url) => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                relay
                    .serve(transport)
                    .await
                    .map_err(|e| format!("initializing the MCP server at {url}: {e}"))
            }
        }
    }
}

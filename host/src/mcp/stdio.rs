//! The agent's side over stdio: newline-delimited JSON-RPC, each line read by the screen
//! ([`super::screen`]) before the SDK sees it. A line the screen cannot give an id to is answered
//! here, at once; every other refusal goes on to the connection, which records it.

use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

use super::screen::{MAX_MESSAGE, garbage_answer, screen};

/// A screened stdio transport over a reader and a writer.
pub(crate) struct Screened<R, W> {
    lines: FramedRead<R, AnyDelimiterCodec>,
    out: Arc<tokio::sync::Mutex<W>>,
}

impl<R: AsyncRead, W> Screened<R, W> {
    pub(crate) fn new(reader: R, writer: W) -> Self {
        let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_MESSAGE);
        Screened {
            lines: FramedRead::new(reader, codec),
            out: Arc::new(tokio::sync::Mutex::new(writer)),
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(
    out: &tokio::sync::Mutex<W>,
    mut line: Vec<u8>,
) -> std::io::Result<()> {
    line.push(b'\n');
    let mut out = out.lock().await;
    out.write_all(&line).await?;
    out.flush().await
}

impl<R, W> Transport<RoleServer> for Screened<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            write_line(&out, line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = match self.lines.next().await? {
                Ok(line) => line,
                Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                    let why = format!("a message longer than {MAX_MESSAGE} bytes");
                    tracing::warn!(why, "refused a message from the MCP client");
                    // Answered, then the connection ends: the framing is lost, and a reader that
                    // guessed where the next message starts could start inside this one.
                    let _ = write_line(&self.out, garbage_answer(&why)).await;
                    return None;
                }
                Err(AnyDelimiterCodecError::Io(_)) => return None,
            };
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match screen(line).into_message() {
                Ok(message) => return Some(message),
                Err(answer) => {
                    tracing::warn!("refused a message from the MCP client that has no usable id");
                    let _ = write_line(&self.out, answer).await;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.out.lock().await.flush().await
    }
}

//! A JSON-lines client of `serve` for the benchmarks: one request at a time, its response read
//! back (notifications skipped), an error response a failed run.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

pub struct Client<S> {
    stream: BufReader<S>,
    next: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(stream: S) -> Self {
        Client {
            stream: BufReader::new(stream),
            next: 1,
        }
    }

    /// Sends a request and returns its response, which must not be an error.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .await
            .unwrap();
        self.stream.get_mut().flush().await.unwrap();
        loop {
            let mut reply = String::new();
            self.stream.read_line(&mut reply).await.unwrap();
            let v: Value = serde_json::from_str(&reply).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{v}");
                return v;
            }
        }
    }
}

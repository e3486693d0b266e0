//! What every store of one plugin shares: its spec, where its log lines go (cut, and with its
//! secrets' values scrubbed), and whether it imports WASI.

use std::sync::Arc;

use super::{LogLevel, LogSink};
use crate::plugin::spec::PluginSpec;

/// Longest log line kept from a guest; the rest is cut, so a chatty guest cannot flood the log.
pub(crate) const MAX_LOG_LINE: usize = 4096;

/// What every store of one plugin shares.
pub(crate) struct Shared {
    pub(crate) spec: PluginSpec,
    pub(crate) sink: Arc<dyn LogSink>,
    /// Whether the component imports any WASI interface.
    pub(crate) imports_wasi: bool,
}

impl Shared {
    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        let message = &*self.scrub(message);
        let cut = if message.len() > MAX_LOG_LINE {
            let mut end = MAX_LOG_LINE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            &message[..end]
        } else {
            message
        };
        self.sink.log(&self.spec.name, level, cut);
    }

    /// `text` with the plugin's secrets' values replaced ([`super::secret::scrub`]).
    pub(crate) fn scrub<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        super::secret::scrub(self.spec.secrets.values(), text)
    }
}

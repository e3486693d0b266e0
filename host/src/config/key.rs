//! One key and one section of the deployment file as its reference documents them: the
//! vocabulary each section's parser declares its keys in, below both the parsers and the
//! reference page that lists them (`keys.rs`).

/// One key of a section, as the reference shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key as written in the file.
    pub name: &'static str,
    /// Its TOML type as a user reads it (`string`, `integer (1–3600)`, `"ask" | "never"`).
    pub kind: &'static str,
    /// What it is when omitted (`none (required)`, `` `300` ``, `unset`).
    pub default: &'static str,
    /// What it does, in a sentence or two.
    pub meaning: &'static str,
}

/// One table of the deployment file and its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// The table as written in the file: `[limits]`, `[[plugin]]`, `[[mcp.server]]`.
    pub shown: &'static str,
    /// What the section is for.
    pub about: &'static str,
    /// Its keys, in the order the unknown-key message lists them.
    pub keys: &'static [Key],
}

impl Section {
    /// Whether the table sits inside another section's (`[[mcp.server]]` inside `[mcp]`).
    pub fn is_nested(&self) -> bool {
        self.shown.trim_matches(['[', ']']).contains('.')
    }
}

//! A call's shell command, read once per decision: its simple commands and what each does
//! ([`super::shell`], [`super::programs`]), or why it cannot be read. Every rule is then matched
//! against this reading, so the parser's cost does not grow with the number of rules.

use super::programs::{self, Reading};
use super::shell::{self, Opaque, Simple};

/// A command as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// Read: its simple commands, in order.
    Read(Vec<Part>),
    /// Not safely readable: no rule that names words may allow it; reject rules look for their
    /// words anywhere in its text.
    Opaque {
        /// The command as given.
        text: &'a str,
        /// Why it cannot be read.
        why: &'static str,
    },
}

/// One simple command and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its words.
    pub simple: Simple,
    /// What its programs do.
    pub reading: Reading,
}

impl Part {
    /// How many words an allow rule must name before it may cover this part: past any
    /// assignment and past a wrapper into what it runs.
    pub fn words_a_rule_must_name(&self) -> usize {
        self.reading
            .wraps_from
            .map_or(0, |at| self.simple.assignments.len() + at + 1)
    }
}

/// Reads `text`.
pub fn read(text: &str) -> Command<'_> {
    let opaque = |Opaque(why)| Command::Opaque { text, why };
    let simples = match shell::parse(text) {
        Ok(simples) => simples,
        Err(e) => return opaque(e),
    };
    let mut parts = Vec::with_capacity(simples.len());
    for simple in simples {
        match programs::read(&simple) {
            Ok(reading) => parts.push(Part { simple, reading }),
            Err(e) => return opaque(e),
        }
    }
    Command::Read(parts)
}

impl Command<'_> {
    /// Whether reject rules must also look for their words anywhere in the text: the command is
    /// opaque, or one of its parts runs something this host cannot read.
    pub fn hides_programs(&self) -> bool {
        match self {
            Command::Opaque { .. } => true,
            Command::Read(parts) => parts.iter().any(|p| p.reading.hidden),
        }
    }
}

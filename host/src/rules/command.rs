//! A call's shell command, read once per decision: its simple commands and what each does
//! ([`super::shell`], [`super::programs`]), or why it cannot be read. Every rule is then matched
//! against this reading, so the parser's cost does not grow with the number of rules. The last
//! reading is kept per thread: the built-in guard and the rule gate ask about the same command
//! one after the other, and it is parsed once.

use std::cell::RefCell;
use std::sync::Arc;

use super::programs::{self, Reading};
use super::shell::{self, Opaque, Simple};

/// A command as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// Read: its simple commands, in order.
    Read(Arc<Vec<Part>>),
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

/// A reading, or why there is none.
type Outcome = Result<Arc<Vec<Part>>, &'static str>;

thread_local! {
    /// The last command read on this thread, and its reading.
    static LAST: RefCell<Option<(String, Outcome)>> = const { RefCell::new(None) };
}

/// Reads `text` (or takes this thread's reading of the same text).
pub fn read(text: &str) -> Command<'_> {
    let cached = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|(t, _)| t == text)
            .map(|(_, outcome)| outcome.clone())
    });
    let outcome = cached.unwrap_or_else(|| {
        let outcome = read_uncached(text);
        LAST.with(|last| *last.borrow_mut() = Some((text.to_owned(), outcome.clone())));
        outcome
    });
    match outcome {
        Ok(parts) => Command::Read(parts),
        Err(why) => Command::Opaque { text, why },
    }
}

/// Forgets this thread's last reading, so the next [`read`] parses (for benchmarks).
pub fn forget() {
    LAST.with(|last| *last.borrow_mut() = None);
}

fn read_uncached(text: &str) -> Outcome {
    let simples = shell::parse(text).map_err(|Opaque(why)| why)?;
    let mut parts = Vec::with_capacity(simples.len());
    for simple in simples {
        let reading = programs::read(&simple).map_err(|Opaque(why)| why)?;
        parts.push(Part { simple, reading });
    }
    Ok(Arc::new(parts))
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

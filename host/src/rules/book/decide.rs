//! Which rule decides a call: a live reject rule matching it (any program of its command), else
//! live allow rules covering it (every part of its command), else none; a broken rules log
//! leaves only the rejects.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::answer::Effect;

use super::super::command::{self, Command};
use super::super::pattern::{ArgumentMatch, Call};
use super::super::rule::Rule;
use super::index::Index;
use super::{Matched, RuleBook};

impl RuleBook {
    /// The rule that decides a call, if any: a live reject rule matching it (any part of its
    /// command), else live allow rules matching it (every part of its command), else none.
    pub fn decide(&self, call: &Call<'_>, session: &str) -> Option<Matched> {
        let now = (self.clock)();
        self.find(call, session).map(|(rule, effect)| {
            rule.used(now);
            Matched { rule, effect }
        })
    }

    /// [`RuleBook::decide`] without counting a use: what would decide `call` now.
    pub fn peek(&self, call: &Call<'_>, session: &str) -> Option<Matched> {
        self.find(call, session)
            .map(|(rule, effect)| Matched { rule, effect })
    }

    /// A live reject rule that refuses every call of `tool`, whatever its arguments (`Tool`
    /// alone, or a tool glob such as `mcp__github__delete_*`): a caller listing tools may leave
    /// `tool` out. Not a decision (no use is counted); the call itself is still asked.
    pub fn rejects_every_call(&self, tool: &str, session: &str) -> Option<Arc<Rule>> {
        let now = (self.clock)();
        let index = self.read();
        index
            .candidates(tool, None)
            .find(|r| {
                r.effect == Effect::Reject
                    && matches!(r.spec.arguments, ArgumentMatch::Any)
                    && r.live(now, session)
            })
            .cloned()
    }

    fn find(&self, call: &Call<'_>, session: &str) -> Option<(Arc<Rule>, Effect)> {
        let found = self.find_any(call, session);
        // A broken rules log: its reject rules (and every other) still apply, no allow does.
        if self.any_broken.load(Ordering::Relaxed)
            && found.as_ref().is_some_and(|(_, e)| *e == Effect::Allow)
        {
            return None;
        }
        found
    }

    fn find_any(&self, call: &Call<'_>, session: &str) -> Option<(Arc<Rule>, Effect)> {
        let now = (self.clock)();
        let index = self.read();
        let live = |r: &&Arc<Rule>| r.live(now, session);
        let found = match call.command() {
            None => {
                let mut allow = None;
                let mut reject = None;
                for rule in index.candidates(call.tool, None).filter(live) {
                    match rule.effect {
                        Effect::Reject if rule.spec.matches_other(call, false) => {
                            reject = Some(rule.clone());
                            break;
                        }
                        Effect::Allow
                            if allow.is_none()
                                && rule.spec.allows_tool(call.tool)
                                && rule.spec.matches_other(call, true) =>
                        {
                            allow = Some(rule.clone());
                        }
                        _ => {}
                    }
                }
                reject
                    .map(|r| (r, Effect::Reject))
                    .or(allow.map(|r| (r, Effect::Allow)))
            }
            Some(text) => Self::find_for_command(&index, call, text, &live),
        };
        drop(index);
        found
    }

    /// The rule that decides a shell command: a reject rule matching any program it runs (or,
    /// when it hides what it runs, whose words appear in its text), else allow rules covering
    /// every part of it. A command that cannot be read, or hides what it runs, is allowed only
    /// by a rule for the whole tool, and only when no reject rule names words for the tool.
    fn find_for_command(
        index: &Index,
        call: &Call<'_>,
        text: &str,
        live: &dyn Fn(&&Arc<Rule>) -> bool,
    ) -> Option<(Arc<Rule>, Effect)> {
        let command = command::read(text);
        if let Command::Read(parts) = &command {
            for part in parts.iter() {
                let keys = part
                    .reading
                    .runs
                    .iter()
                    .filter_map(|run| run.first())
                    .chain(part.simple.words.first())
                    .chain(part.simple.assignments.first());
                for key in keys {
                    let reject = index
                        .candidates(call.tool, Some(key))
                        .filter(live)
                        .find(|r| r.effect == Effect::Reject && r.spec.rejects_part(part));
                    if let Some(rule) = reject {
                        return Some((rule.clone(), Effect::Reject));
                    }
                }
            }
        }
        let hides = command.hides_programs();
        if hides {
            let reject = index
                .all_command_rules(call.tool)
                .chain(index.candidates(call.tool, None))
                .filter(live)
                .find(|r| r.effect == Effect::Reject && r.spec.appears_in(text));
            if let Some(rule) = reject {
                return Some((rule.clone(), Effect::Reject));
            }
        }
        let whole_tool = || {
            index
                .candidates(call.tool, None)
                .filter(live)
                .find(|r| {
                    r.effect == Effect::Allow && matches!(r.spec.arguments, ArgumentMatch::Any)
                })
                .map(|r| (r.clone(), Effect::Allow))
        };
        match &command {
            Command::Read(parts) if !hides && !parts.is_empty() => {
                let mut first = None;
                for part in parts.iter() {
                    let key = part.simple.all_words().next();
                    let rule = index
                        .candidates(call.tool, key.map(String::as_str))
                        .filter(live)
                        .find(|r| r.effect == Effect::Allow && r.spec.covers_part(part))?;
                    first.get_or_insert_with(|| rule.clone());
                }
                first.map(|r| (r, Effect::Allow))
            }
            Command::Read(parts) if parts.is_empty() => whole_tool(),
            // Opaque, or hiding what it runs: it could hold a rejected program.
            _ => {
                let any_reject = index
                    .all_command_rules(call.tool)
                    .chain(index.candidates(call.tool, None))
                    .filter(live)
                    .any(|r| r.effect == Effect::Reject);
                if any_reject { None } else { whole_tool() }
            }
        }
    }
}

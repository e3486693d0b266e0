//! The rule book's index: the active rules by tool and, for command rules, by the first word of
//! the command, so a decision looks up a handful of rules whatever their number.

use std::collections::HashMap;
use std::sync::Arc;

use super::super::pattern::{ArgumentMatch, ToolMatch};
use super::super::rule::Rule;

#[derive(Default)]
pub(super) struct Bucket {
    /// Command rules by the first word of their command.
    pub(super) by_first_word: HashMap<String, Vec<Arc<Rule>>>,
    /// Every other rule of the tool (whole tool, path, domain).
    pub(super) other: Vec<Arc<Rule>>,
}

#[derive(Default)]
pub(super) struct Index {
    pub(super) exact: HashMap<String, Bucket>,
    pub(super) globbed: Vec<Arc<Rule>>,
    pub(super) by_id: HashMap<String, Arc<Rule>>,
}

impl Index {
    pub(super) fn insert(&mut self, rule: Arc<Rule>) {
        // One object per id: a reread that raced an add must not leave two in the buckets.
        if self.by_id.contains_key(&rule.id) {
            self.remove(&rule.id);
        }
        self.by_id.insert(rule.id.clone(), rule.clone());
        let bucket = match &rule.spec.tool {
            ToolMatch::Glob(_) => {
                self.globbed.push(rule);
                return;
            }
            ToolMatch::Exact(tool) => self.exact.entry(tool.clone()).or_default(),
        };
        match &rule.spec.arguments {
            ArgumentMatch::Command { words, .. } => bucket
                .by_first_word
                .entry(words.first().cloned().unwrap_or_default())
                .or_default()
                .push(rule),
            _ => bucket.other.push(rule),
        }
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Arc<Rule>> {
        let rule = self.by_id.remove(id)?;
        let drop_it = |v: &mut Vec<Arc<Rule>>| v.retain(|r| r.id != id);
        drop_it(&mut self.globbed);
        if let ToolMatch::Exact(tool) = &rule.spec.tool
            && let Some(bucket) = self.exact.get_mut(tool)
        {
            drop_it(&mut bucket.other);
            for v in bucket.by_first_word.values_mut() {
                drop_it(v);
            }
        }
        Some(rule)
    }

    /// The rules that could match a call of `tool` whose command's part starts with `first`
    /// (`None` for calls without a command: only non-command rules).
    pub(super) fn candidates<'a>(
        &'a self,
        tool: &'a str,
        first: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        let bucket = self.exact.get(tool);
        let words = first
            .and_then(|w| bucket.and_then(|b| b.by_first_word.get(w)))
            .into_iter()
            .flatten();
        bucket
            .into_iter()
            .flat_map(|b| b.other.iter())
            .chain(words)
            .chain(
                self.globbed
                    .iter()
                    .filter(move |r| r.spec.matches_tool(tool)),
            )
    }

    /// Every command rule of `tool` (for a command that cannot be split).
    pub(super) fn all_command_rules<'a>(
        &'a self,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        self.exact
            .get(tool)
            .into_iter()
            .flat_map(|b| b.by_first_word.values().flatten())
    }
}

//! `[rules]` and `[[rule]]`: whether standing rules are on, the scopes plugins may create, and the
//! deployment's own rules.

use toml::Value;

use super::read::{Ctx, string, table, unknown_key};
use super::{ConfigError, Deployment};
use crate::answer::{Effect, RuleScope, UnknownWord};

/// A deployment's standing-rule settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesConfig {
    /// Whether the file has a `[rules]` table or `[[rule]]` entries (standing rules are then on
    /// even before any rule was added).
    pub declared: bool,
    /// `[rules] plugins-may-create`: the scopes a plugin's `allow-always` / `reject-always`
    /// proposal may create (none by default: such a proposal is the one-shot decision).
    pub plugins_may_create: Vec<crate::answer::RuleScope>,
    /// `[[rule]]` entries: static project rules, in file order.
    pub rules: Vec<StaticRule>,
}

/// A `[[rule]]` entry: `rule = "Bash(npm run test:*)"`, `effect = "allow" | "reject"` (default
/// `allow`), `reason = "..."`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticRule {
    /// `Tool` or `Tool(pattern)`.
    pub rule: String,
    /// Allow or reject.
    pub effect: crate::answer::Effect,
    /// Why.
    pub reason: Option<String>,
}

const KEYS: [&str; 1] = ["plugins-may-create"];

const RULE_KEYS: [&str; 3] = ["rule", "effect", "reason"];

/// `[rules]`.
pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    d.rules.declared = true;
    for (k, v) in table(ctx, "[rules]", value)? {
        match k.as_str() {
            "plugins-may-create" => {
                let list = v.as_array().ok_or_else(|| {
                    ctx.err("[rules]", "plugins-may-create must be a list of scopes")
                })?;
                for s in list {
                    let s = string(ctx, "[rules]", "plugins-may-create", s)?;
                    let scope: RuleScope = s.parse().map_err(|e: UnknownWord| {
                        ctx.err("[rules]", format!("plugins-may-create: {e}"))
                    })?;
                    d.rules.plugins_may_create.push(scope);
                }
            }
            other => return Err(unknown_key(ctx, "[rules]", other, &KEYS)),
        }
    }
    Ok(())
}

/// `[[rule]]`.
pub(super) fn entries(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    d.rules.declared = true;
    let entries = value
        .as_array()
        .ok_or_else(|| ctx.err("rule", "must be an array of [[rule]] tables"))?;
    for (i, entry) in entries.iter().enumerate() {
        let place = format!("[[rule]] #{}", i + 1);
        let mut rule = None;
        let mut effect = Effect::Allow;
        let mut reason = None;
        for (k, v) in table(ctx, &place, entry)? {
            match k.as_str() {
                "rule" => {
                    let text = string(ctx, &place, "rule", v)?;
                    crate::rules::pattern::parse(text)
                        .map_err(|e| ctx.err(&place, e.to_string()))?;
                    rule = Some(text.to_owned());
                }
                "effect" => {
                    effect = string(ctx, &place, "effect", v)?
                        .parse()
                        .map_err(|e: UnknownWord| ctx.err(&place, e.to_string()))?;
                }
                "reason" => reason = Some(string(ctx, &place, "reason", v)?.to_owned()),
                other => return Err(unknown_key(ctx, &place, other, &RULE_KEYS)),
            }
        }
        let rule = rule.ok_or_else(|| ctx.err(&place, "missing key \"rule\""))?;
        d.rules.rules.push(StaticRule {
            rule,
            effect,
            reason,
        });
    }
    Ok(())
}

//! `[rules]` and `[[rule]]`: whether standing rules are on, the scopes plugins may create, and the
//! deployment's own rules.

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, table, unknown_key, unread};
use super::{ConfigError, Deployment};
use crate::answer::{Effect, RuleScope, UnknownWord};
use crate::rules::examples::Examples;

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
    /// `examples.match`, `examples.not-match` and `examples.cwd`: calls the rule must and must
    /// not decide, checked when the file loads.
    pub examples: Examples,
}

const KEYS: [Key; 1] = [Key {
    name: "plugins-may-create",
    kind: r#"list of `"session"` | `"project"` | `"user"`"#,
    default: "`[]` (a plugin's proposal stays one-shot)",
    meaning: "The scopes in which a plugin's `allow-always` / `reject-always` proposal may create a standing rule; any other proposal is only the decision for that call.",
}];

/// `[rules]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[rules]",
    about: "Turns standing rules on (also with no `[[rule]]`), and says which scopes a plugin may create rules in.",
    keys: &KEYS,
};

const RULE_KEYS: [Key; 4] = [
    Key {
        name: "rule",
        kind: "string (`Tool` or `Tool(pattern)`)",
        default: "none (required)",
        meaning: "The rule, as `Bash(npm run test:*)`; one that does not parse refuses the file.",
    },
    Key {
        name: "effect",
        kind: r#"`"allow"` | `"reject"`"#,
        default: r#"`"allow"`"#,
        meaning: "What the rule does to a call it matches; a reject rule outranks every allow rule, at every scope.",
    },
    Key {
        name: "reason",
        kind: "string",
        default: "unset",
        meaning: "Why: the model reads a reject rule's reason when it refuses a call.",
    },
    Key {
        name: "examples",
        kind: "table (`[rule.examples]`)",
        default: "unset (no examples)",
        meaning: "Calls the rule must and must not decide, checked when the file loads.",
    },
];

/// `[[rule]]` in the reference.
pub(super) const RULE_SECTION: Section = Section {
    shown: "[[rule]]",
    about: "The deployment's own standing rules: project rules (ids `deployment-1`, …), removed by editing the file. They also turn standing rules on.",
    keys: &RULE_KEYS,
};

const EXAMPLE_KEYS: [Key; 3] = [
    Key {
        name: "match",
        kind: "list of strings",
        default: "`[]`",
        meaning: "Calls the rule must decide (allow, for an allow rule; reject, for a reject rule), written as the rule reads a call: the command for `Bash(…)`, the path for a path rule, the URL for `domain:`.",
    },
    Key {
        name: "not-match",
        kind: "list of strings",
        default: "`[]`",
        meaning: "Calls the rule must not decide, written the same way.",
    },
    Key {
        name: "cwd",
        kind: "string (absolute path)",
        default: "the deployment file's directory",
        meaning: "The directory relative paths in the examples are read from.",
    },
];

/// A `[[rule]]`'s `examples` in the reference.
pub(super) const EXAMPLES_SECTION: Section = Section {
    shown: "[rule.examples]",
    about: "The examples of the `[[rule]]` above it, also written inside the entry as `examples.match = […]`. A rule whose examples do not hold refuses the file, naming the rule and the example.",
    keys: &EXAMPLE_KEYS,
};

/// `[rules]`.
pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    d.rules.declared = true;
    for (k, v) in table(ctx, "[rules]", value)? {
        match known_key(ctx, "[rules]", k, &KEYS)? {
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
            other => return Err(unread(ctx, "[rules]", other)),
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
        let mut examples = Examples::default();
        for (k, v) in table(ctx, &place, entry)? {
            match known_key(ctx, &place, k, &RULE_KEYS)? {
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
                "examples" => examples = parse_examples(ctx, &place, v)?,
                other => return Err(unread(ctx, &place, other)),
            }
        }
        let rule = rule.ok_or_else(|| ctx.err(&place, "missing key \"rule\""))?;
        if !examples.is_empty() {
            // Relative examples are read from the deployment's directory unless it says.
            if examples.cwd.is_none() {
                let dir = std::fs::canonicalize(ctx.dir).unwrap_or_else(|_| ctx.dir.to_owned());
                examples.cwd = Some(dir.display().to_string());
            }
            let spec =
                crate::rules::pattern::parse(&rule).map_err(|e| ctx.err(&place, e.to_string()))?;
            crate::rules::examples::check(&spec, effect, &examples)
                .map_err(|e| ctx.err(&place, e.to_string()))?;
        }
        d.rules.rules.push(StaticRule {
            rule,
            effect,
            reason,
            examples,
        });
    }
    Ok(())
}

/// A `[[rule]]`'s `examples` table.
fn parse_examples(ctx: &Ctx, place: &str, value: &Value) -> Result<Examples, ConfigError> {
    let mut examples = Examples::default();
    for (k, v) in table(ctx, place, value)? {
        let list = |key: &str| -> Result<Vec<String>, ConfigError> {
            let items = v.as_array().ok_or_else(|| {
                ctx.err(place, format!("examples.{key} must be a list of strings"))
            })?;
            items
                .iter()
                .map(|i| string(ctx, place, &format!("examples.{key}"), i).map(str::to_owned))
                .collect()
        };
        // An unknown key is named as written in the entry: `examples.matches`.
        let Some(key) = EXAMPLE_KEYS.iter().find(|e| e.name == k) else {
            return Err(unknown_key(
                ctx,
                place,
                &format!("examples.{k}"),
                &EXAMPLE_KEYS,
            ));
        };
        match key.name {
            "match" => examples.matching = list("match")?,
            "not-match" => examples.not_matching = list("not-match")?,
            "cwd" => {
                let cwd = string(ctx, place, "examples.cwd", v)?;
                if !std::path::Path::new(cwd).is_absolute() {
                    return Err(ctx.err(place, "examples.cwd must be an absolute path"));
                }
                examples.cwd = Some(cwd.to_owned());
            }
            other => return Err(unread(ctx, place, &format!("examples.{other}"))),
        }
    }
    Ok(examples)
}

//! A rule's own examples: calls it must decide and calls it must not, checked when the rule is
//! made (a `[[rule]]` when the deployment loads, `rules add` before the rule is kept). An example
//! is what the rule reads of a call: the command for a command rule, the URL for a domain rule,
//! the path for a path rule (relative paths from the examples' working directory).

use serde_json::json;

use super::call::Call;
use super::pattern::{ArgumentMatch, Spec, ToolMatch};
use crate::answer::Effect;

/// What a rule's examples say it must and must not decide.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Examples {
    /// Calls the rule must decide (allow, for an allow rule; reject, for a reject rule).
    pub matching: Vec<String>,
    /// Calls it must not.
    pub not_matching: Vec<String>,
    /// The working directory relative paths in the examples (and relative rules) are read from.
    pub cwd: Option<String>,
}

impl Examples {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.matching.is_empty() && self.not_matching.is_empty()
    }
}

/// An example the rule does not bear out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExampleError {
    /// A rule for several tools (a glob) cannot say which tool an example calls.
    #[error("examples need a rule for one tool, not the tool glob of {rule:?}")]
    NoOneTool {
        /// The rule.
        rule: String,
    },
    /// An example the rule should decide and does not.
    #[error("{rule:?} should {verb} {example:?} (examples.match) and does not")]
    Unmatched {
        /// The rule.
        rule: String,
        /// `allow` or `reject`.
        verb: &'static str,
        /// The example.
        example: String,
    },
    /// An example the rule should not decide and does.
    #[error("{rule:?} should not {verb} {example:?} (examples.not-match) and does")]
    Matched {
        /// The rule.
        rule: String,
        /// `allow` or `reject`.
        verb: &'static str,
        /// The example.
        example: String,
    },
}

/// The call an example stands for under `spec`.
fn call_of(spec: &Spec, example: &str) -> serde_json::Value {
    match &spec.arguments {
        ArgumentMatch::Domain { .. } => json!({ "url": example }),
        ArgumentMatch::Path { .. } => json!({ "file_path": example }),
        ArgumentMatch::Subject { .. } => json!({ "uri": example, "name": example }),
        ArgumentMatch::Command { .. } | ArgumentMatch::Any => json!({ "command": example }),
    }
}

/// Whether `spec`, as a rule of `effect`, decides the call `example` stands for.
pub fn decides(spec: &Spec, effect: Effect, example: &str, cwd: Option<&str>) -> Option<bool> {
    let ToolMatch::Exact(tool) = &spec.tool else {
        return None;
    };
    let arguments = call_of(spec, example);
    let call = Call {
        tool,
        arguments: Some(&arguments),
        cwd,
        undeclared: &[],
    };
    Some(match effect {
        Effect::Allow => spec.covers(&call),
        Effect::Reject => spec.rejects(&call),
    })
}

/// Checks every example of a rule; the first that fails is the error.
///
/// # Errors
/// [`ExampleError`] naming the rule and the example.
pub fn check(spec: &Spec, effect: Effect, examples: &Examples) -> Result<(), ExampleError> {
    if examples.is_empty() {
        return Ok(());
    }
    let verb = match effect {
        Effect::Allow => "allow",
        Effect::Reject => "reject",
    };
    let cwd = examples.cwd.as_deref();
    let each = |example: &String, want: bool| match decides(spec, effect, example, cwd) {
        None => Err(ExampleError::NoOneTool {
            rule: spec.text.clone(),
        }),
        Some(got) if got == want => Ok(()),
        Some(_) if want => Err(ExampleError::Unmatched {
            rule: spec.text.clone(),
            verb,
            example: example.clone(),
        }),
        Some(_) => Err(ExampleError::Matched {
            rule: spec.text.clone(),
            verb,
            example: example.clone(),
        }),
    };
    for example in &examples.matching {
        each(example, true)?;
    }
    for example in &examples.not_matching {
        each(example, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::pattern::parse;

    fn examples(matching: &[&str], not_matching: &[&str]) -> Examples {
        Examples {
            matching: matching.iter().map(|s| (*s).to_owned()).collect(),
            not_matching: not_matching.iter().map(|s| (*s).to_owned()).collect(),
            cwd: Some("/".to_owned()),
        }
    }

    #[test]
    fn examples_hold_or_name_the_one_that_does_not() {
        let npm = parse("Bash(npm run test:*)").unwrap();
        let good = examples(
            &["npm run test", "npm run test --watch"],
            &["npm run test; rm -rf ~", "npm run build"],
        );
        assert_eq!(check(&npm, Effect::Allow, &good), Ok(()));
        assert_eq!(
            check(&npm, Effect::Allow, &examples(&["npm test"], &[]))
                .unwrap_err()
                .to_string(),
            "\"Bash(npm run test:*)\" should allow \"npm test\" (examples.match) and does not"
        );
        let push = parse("Bash(git push:*)").unwrap();
        assert_eq!(
            check(
                &push,
                Effect::Reject,
                &examples(&["CI=true git push origin"], &["git status"])
            ),
            Ok(())
        );
        assert_eq!(
            check(&push, Effect::Reject, &examples(&[], &["env git push"]))
                .unwrap_err()
                .to_string(),
            "\"Bash(git push:*)\" should not reject \"env git push\" (examples.not-match) and does"
        );
        let web = parse("WebFetch(domain:example.com)").unwrap();
        assert_eq!(
            check(
                &web,
                Effect::Allow,
                &examples(
                    &["https://example.com/a"],
                    &["https://evil.com\\@example.com/"]
                )
            ),
            Ok(())
        );
        let any = parse("mcp__*").unwrap();
        assert!(matches!(
            check(&any, Effect::Allow, &examples(&["x"], &[])),
            Err(ExampleError::NoOneTool { .. })
        ));
    }
}

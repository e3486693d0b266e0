//! Splitting a shell command into the simple commands a rule is matched against.
//!
//! A prefix rule such as `Bash(npm run test:*)` must never allow `npm run test; rm -rf ~`. The
//! command is read the way a POSIX shell reads it (quotes, backslash escapes, comments, line
//! continuations) and split at every unquoted `;`, `&`, `|`, `&&`, `||` and newline; an allow
//! rule must match every part. A command whose meaning cannot be read off its words is
//! [`Opaque`]: command substitution (`$(...)`, backticks, `<(...)`, `>(...)`), subshells and
//! groups (`(`, `)`, `{`, `}` as words), here-documents, and redirections other than the harmless
//! `N>&M` and `>/dev/null`. No allow rule matches an opaque command; a reject rule still does,
//! by its words appearing anywhere in it.

/// A command no allow rule may match, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque(pub &'static str);

/// The simple commands of `command`, each as its words (quotes removed), or why it cannot be
/// split safely. Empty parts (`a ;; b`, a trailing `;`) are dropped.
pub fn split(command: &str) -> Result<Vec<Vec<String>>, Opaque> {
    let mut parts: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    // Whether `word` holds a word (an empty quoted string is a word too).
    let mut in_word = false;
    let mut chars = command.chars().peekable();

    fn end_word(words: &mut Vec<String>, word: &mut String, in_word: &mut bool) {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    }
    fn end_part(parts: &mut Vec<Vec<String>>, words: &mut Vec<String>) {
        if !words.is_empty() {
            parts.push(std::mem::take(words));
        }
    }

    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(Opaque("an unterminated single quote")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('\n') => {}
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(Opaque("an unterminated double quote")),
                        },
                        Some('`') => return Err(Opaque("command substitution")),
                        Some('$') if chars.peek() == Some(&'(') => {
                            return Err(Opaque("command substitution"));
                        }
                        Some(c) => word.push(c),
                        None => return Err(Opaque("an unterminated double quote")),
                    }
                }
            }
            '\\' => match chars.next() {
                // A line continuation joins the lines.
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err(Opaque("a trailing backslash")),
            },
            '`' => return Err(Opaque("command substitution")),
            '$' if chars.peek() == Some(&'(') => return Err(Opaque("command substitution")),
            '#' if !in_word => {
                // A comment runs to the end of the line.
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            ' ' | '\t' => end_word(&mut words, &mut word, &mut in_word),
            '\n' | ';' | '&' | '|' => {
                end_word(&mut words, &mut word, &mut in_word);
                // `&>` and `|&` are redirections and pipes of stderr: still separators or
                // redirections, never plain words.
                if c == '&' && chars.peek() == Some(&'>') {
                    return Err(Opaque("a redirection"));
                }
                end_part(&mut parts, &mut words);
            }
            '(' | ')' if !in_word || c == ')' => {
                return Err(Opaque("a subshell or process substitution"));
            }
            '{' | '}' if !in_word && chars.peek().is_none_or(|c| c.is_whitespace()) => {
                return Err(Opaque("a command group"));
            }
            '<' | '>' => {
                // `N>&M` (word holds only digits) and `>/dev/null` are harmless; anything else
                // reads or writes a file.
                let fd_prefix = in_word && word.chars().all(|c| c.is_ascii_digit());
                if !in_word || fd_prefix {
                    if c == '<' && chars.peek() == Some(&'(')
                        || c == '>' && chars.peek() == Some(&'(')
                    {
                        return Err(Opaque("process substitution"));
                    }
                    if c == '>' && chars.peek() == Some(&'&') {
                        chars.next();
                        let mut target = String::new();
                        while chars
                            .peek()
                            .is_some_and(|c| c.is_ascii_digit() || *c == '-')
                        {
                            target.push(chars.next().unwrap_or_default());
                        }
                        if target.is_empty() {
                            return Err(Opaque("a redirection"));
                        }
                        word.clear();
                        in_word = false;
                        continue;
                    }
                    if c == '>' {
                        while chars.peek() == Some(&' ') {
                            chars.next();
                        }
                        let rest: String = chars.clone().take(9).collect();
                        if rest == "/dev/null"
                            && chars
                                .clone()
                                .nth(9)
                                .is_none_or(|c| c.is_whitespace() || ";&|".contains(c))
                        {
                            for _ in 0..9 {
                                chars.next();
                            }
                            word.clear();
                            in_word = false;
                            continue;
                        }
                    }
                }
                return Err(Opaque("a redirection"));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    end_part(&mut parts, &mut words);
    Ok(parts)
}

/// The words of a rule's command pattern (a prefix before `:*`, or a whole command): one simple
/// command, or why it is not one.
pub fn pattern_words(pattern: &str) -> Result<Vec<String>, String> {
    match split(pattern) {
        Ok(mut parts) if parts.len() == 1 => Ok(parts.remove(0)),
        Ok(parts) if parts.is_empty() => Err("the command pattern is empty".to_owned()),
        Ok(_) => {
            Err("a command pattern is one simple command: no ';', '&', '|' or newline".to_owned())
        }
        Err(Opaque(why)) => Err(format!("a command pattern cannot hold {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(parts: &[&[&str]]) -> Vec<Vec<String>> {
        parts
            .iter()
            .map(|p| p.iter().map(|w| (*w).to_owned()).collect())
            .collect()
    }

    #[test]
    fn splits_at_every_unquoted_separator() {
        assert_eq!(
            split("npm run test; rm -rf ~").unwrap(),
            words(&[&["npm", "run", "test"], &["rm", "-rf", "~"]])
        );
        assert_eq!(
            split("a && b || c | d & e\nf").unwrap(),
            words(&[&["a"], &["b"], &["c"], &["d"], &["e"], &["f"]])
        );
        assert_eq!(split("   ls   -la  ").unwrap(), words(&[&["ls", "-la"]]));
        assert_eq!(split("a ;; b;").unwrap(), words(&[&["a"], &["b"]]));
    }

    #[test]
    fn quotes_and_escapes_keep_separators_inside_words() {
        assert_eq!(
            split(r#"echo "a; b" 'c && d' e\;f"#).unwrap(),
            words(&[&["echo", "a; b", "c && d", "e;f"]])
        );
        assert_eq!(split("echo ''").unwrap(), words(&[&["echo", ""]]));
        assert_eq!(
            split("npm run \\\ntest").unwrap(),
            words(&[&["npm", "run", "test"]])
        );
        assert_eq!(
            split("npm test # ; rm -rf /\nls").unwrap(),
            words(&[&["npm", "test"], &["ls"]])
        );
        assert_eq!(split("a#b").unwrap(), words(&[&["a#b"]]));
    }

    #[test]
    fn what_cannot_be_read_off_its_words_is_opaque() {
        for command in [
            "echo $(rm -rf ~)",
            "echo `rm -rf ~`",
            "echo \"$(rm -rf ~)\"",
            "diff <(ls a) <(ls b)",
            "(rm -rf ~)",
            "{ rm -rf ~; }",
            "npm test > out.txt",
            "npm test >> out.txt",
            "npm test &> out.txt",
            "cat < secrets",
            "cat <<EOF",
            "echo 'unterminated",
            "echo \"unterminated",
            "trailing \\",
        ] {
            assert!(split(command).is_err(), "{command}");
        }
    }

    #[test]
    fn harmless_redirections_are_not_words() {
        assert_eq!(split("npm test 2>&1").unwrap(), words(&[&["npm", "test"]]));
        assert_eq!(
            split("npm test >/dev/null 2>&1").unwrap(),
            words(&[&["npm", "test"]])
        );
        assert_eq!(
            split("npm test 2> /dev/null").unwrap(),
            words(&[&["npm", "test"]])
        );
        assert!(split("npm test >/dev/nullx").is_err());
    }

    #[test]
    fn env_prefixes_stay_words() {
        assert_eq!(
            split("NODE_ENV=test npm test").unwrap(),
            words(&[&["NODE_ENV=test", "npm", "test"]])
        );
    }
}

//! The hand-written splitter standing rules used before commands were read by a bash parser
//! (`host/src/rules/shell.rs` as of 647aeba), kept only so the `rules` bench can print the
//! parser's cost against it. It is not used by the host: it misread `>&1#`, `"$\<newline>("`,
//! `$'…'` and more (see `tests/all/trust_boundary.rs`).

/// A command no allow rule may match, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque(pub &'static str);

/// The simple commands of `command`, each as its words (quotes removed), or why it cannot be
/// split safely.
#[allow(clippy::too_many_lines)]
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

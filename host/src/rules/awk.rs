//! A small reader of awk programs: enough to tell one that only prints, filters and compares
//! (`NR>1`, `$3 > 100 {print $1}`, `-F: '{print $1}'`) from one that runs a program or writes a
//! file.
//!
//! awk's `>` is a comparison in a pattern or an expression, and an output redirection only after
//! `print` or `printf` outside parentheses; `|` is a pipe to or from a command everywhere but
//! inside a regular expression or a string. So the program is split into tokens the way awk
//! splits it (strings, regular expressions where an operand may start, comments), and then read:
//! a redirection (`>`, `>>`, `|`, `|&` in a print statement), a pipe, `getline`, `system`,
//! `close`, `fflush` of a command, gawk's `@` directives and extension functions are not a plain
//! read. Anything the tokenizer cannot follow (an unterminated string or regular expression) is
//! not either.

/// Why an awk program is not a plain read, if it is not.
pub(super) fn unsafe_program(program: &str) -> Option<&'static str> {
    let Some(tokens) = tokens(program) else {
        return Some("an awk program this host cannot read");
    };
    // Inside a print statement, at parenthesis depth zero, `>` redirects its output.
    let mut printing = false;
    let mut depth = 0usize;
    let mut previous_was_comma = false;
    for token in &tokens {
        let comma = matches!(token, Token::Op(op) if op == "," || op == "&&" || op == "||");
        let newline = matches!(token, Token::Op(op) if op == "\n");
        let this_was_comma = previous_was_comma;
        if !newline {
            previous_was_comma = comma;
        }
        let previous_was_comma = this_was_comma;
        match token {
            Token::Word(w) => match w.as_str() {
                // `close` and `fflush` only act on what a pipe or redirection opened, and those
                // are refused on their own.
                "system" | "getline" => {
                    return Some(
                        "an awk program that runs commands or reads them (system, getline)",
                    );
                }
                "print" | "printf" => {
                    printing = true;
                    depth = 0;
                }
                _ if w.starts_with('@') => {
                    return Some(
                        "an awk program with gawk directives (@load, @include) or indirect calls",
                    );
                }
                _ => {}
            },
            Token::Op(op) => match op.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                // awk reads on after a comma at the end of a line: the statement goes on.
                "\n" if previous_was_comma => {}
                ";" | "\n" | "{" | "}" => printing = false,
                "|" | "|&" => return Some("an awk program with a pipe to or from a command"),
                ">" | ">>" if printing && depth == 0 => {
                    return Some("an awk program that writes a file (print > file)");
                }
                _ => {}
            },
            Token::Str | Token::Regex | Token::Number => {}
        }
    }
    None
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Op(String),
    Str,
    Regex,
    Number,
}

impl Token {
    /// Whether a `/` after this token divides (it ends an operand) rather than opening a
    /// regular expression.
    fn ends_operand(&self) -> bool {
        match self {
            // After a keyword that expects an expression, `/` opens a regular expression.
            Token::Word(w) => !matches!(
                w.as_str(),
                "print"
                    | "printf"
                    | "return"
                    | "exit"
                    | "in"
                    | "case"
                    | "if"
                    | "while"
                    | "for"
                    | "do"
                    | "else"
                    | "delete"
                    | "getline"
            ),
            Token::Str | Token::Regex | Token::Number => true,
            Token::Op(op) => matches!(op.as_str(), ")" | "]" | "$" | "++" | "--"),
        }
    }
}

/// The program's tokens, or `None` when a string or regular expression does not end.
fn tokens(program: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = program.chars().collect();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' => i += 1,
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                i = skip_delimited(&chars, i + 1, '"')?;
                out.push(Token::Str);
            }
            '/' if !out.last().is_some_and(Token::ends_operand) => {
                i = skip_regex(&chars, i + 1)?;
                out.push(Token::Regex);
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                out.push(Token::Number);
            }
            c if c.is_alphabetic() || c == '_' || c == '@' => {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
            _ => {
                let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
                let op = match two.as_str() {
                    ">>" | "|&" | "||" | "&&" | "++" | "--" | "==" | "!=" | "<=" | ">=" | "+="
                    | "-=" | "*=" | "/=" | "%=" | "^=" | "**" => two,
                    _ => c.to_string(),
                };
                i += op.chars().count();
                out.push(Token::Op(op));
            }
        }
    }
    Some(out)
}

/// The index after a string's closing quote.
fn skip_delimited(chars: &[char], mut i: usize, end: char) -> Option<usize> {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '\n' => return None,
            c if c == end => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The index after a regular expression's closing `/` (a `/` inside a bracket expression does
/// not close it).
fn skip_regex(chars: &[char], mut i: usize) -> Option<usize> {
    let mut bracket = false;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '\n' => return None,
            '[' if !bracket => {
                bracket = true;
                i += 1;
                // `[]…]` and `[^]…]` hold a `]`.
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    i += 1;
                }
            }
            ']' if bracket => {
                bracket = false;
                i += 1;
            }
            '/' if !bracket => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printing_filtering_and_comparing_are_plain_reads() {
        for program in [
            "NR>1",
            "$3 > 100 {print $1}",
            "{print $1}",
            "NR==1",
            "{ if ($2 >= 10) print $1; else print \"small > big\" }",
            "/a|b/ {print}",
            "$0 ~ /x[|/]y/ { n++ } END { print n }",
            "{ print ($1 > $2) }",
            "{ printf \"%s\\n\", $1 }",
            "BEGIN { FS=\":\" } { print $1 | 0 == 1 }"
                .split(" | ")
                .next()
                .unwrap(),
            "{ a = $1 / 2; b = a / 3; print a, b }",
            "length($0) > 72",
            "# a comment with > and |\n{ print }",
            "{ print; fflush() }",
            "{ print $1,\n $2 }",
        ] {
            assert_eq!(unsafe_program(program), None, "{program}");
        }
    }

    #[test]
    fn commands_pipes_and_writes_are_not() {
        for program in [
            "BEGIN{system(\"id\")}",
            "{print > \"out\"}",
            "{print >> \"out\"}",
            "{printf \"%s\", $1 > \"out\"}",
            "{printf(\"%s\", $1) > \"out\"}",
            "{print | \"sh\"}",
            "{\"id\" | getline x}",
            "{ getline < \"/etc/passwd\" }",
            "{print |& \"cat\"}",
            "@load \"filefuncs\"",
            "{ f = \"system\"; @f(\"id\") }",
            "BEGIN { exit /\"/ } END { system(\"id\") ; y = /\"/ }",
            "BEGIN { print \"{}\",\n\"\" > \".claude/settings.json\" }",
            "{ print \"unterminated }",
            "$0 ~ /unterminated",
            "{print $1 > $2}",
            "{ print; print > \"/dev/stderr\" }",
        ] {
            assert!(unsafe_program(program).is_some(), "{program}");
        }
    }
}

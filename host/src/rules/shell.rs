//! Reading a shell command the way bash will run it, failing closed.
//!
//! A prefix rule such as `Bash(npm run test:*)` must never allow `npm run test; rm -rf ~`, nor
//! anything else bash would read differently from the rule's words. The command's structure
//! comes from a real bash parser (`brush-parser`, the parser of the brush shell, which is built
//! to read what bash reads); every word it finds is then read again here by a deliberately small
//! quote-removal that accepts only text whose meaning cannot depend on run time. Where the two
//! could disagree, or where bash would produce words or run code while expanding, the command is
//! [`Opaque`] and no allow rule may cover it.
//!
//! What [`parse`] accepts: a list of simple commands joined by `;`, `&`, `&&`, `||`, `|`, `|&`
//! or newlines (a leading `!` and the `time` keyword are allowed), each word a literal after
//! quote removal. Opaque: command, process and arithmetic substitution, backticks, every `$`
//! outside single quotes (parameters, `$'…'`, `$"…"`, `$[…]`), history expansion (`!`), globs
//! (`*`, `?`, `[`) and brace expansion (they produce words at run time), subshells, groups,
//! functions, `if`/`for`/`while`/`case`, `coproc`, `[[ … ]]`, `(( … ))`, here-documents with an
//! unquoted delimiter, and any control character but tab and newline, or any non-ASCII blank or
//! invisible formatting character anywhere in the text (bash reads them as part of a word,
//! other readers as blanks). Redirections are classified ([`Redirect`]); what a command's
//! programs then do is [`super::programs`]' business.

use brush_parser::ast;

/// A command no allow rule may match, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque(pub &'static str);

/// One simple command, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simple {
    /// Assignments in front of the program (`NAME=value`, quotes removed).
    pub assignments: Vec<String>,
    /// The words, quotes removed: the program first.
    pub words: Vec<String>,
    /// Its redirections.
    pub redirects: Vec<Redirect>,
}

/// What a redirection does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// Nothing a rule needs to see: `N>&M`, `N<&M`, `N>&-`, output to or input from exactly
    /// `/dev/null`, a here-string or a here-document whose text is literal.
    Harmless,
    /// Reads this file (`< file`).
    Reads(String),
    /// Writes (creates, truncates or appends to) this file: `>`, `>>`, `>|`, `&>`, `>&file`, `<>`.
    Writes(String),
}

impl Simple {
    /// The words a rule's literal words are matched against: assignments, then the words.
    pub fn all_words(&self) -> impl Iterator<Item = &String> {
        self.assignments.iter().chain(self.words.iter())
    }
}

/// The simple commands of `command`, in order, or why it cannot be read safely.
///
/// # Errors
/// [`Opaque`] with the reason, for anything outside the accepted subset (see the module doc).
pub fn parse(command: &str) -> Result<Vec<Simple>, Opaque> {
    if let Some(why) = unsafe_character(command) {
        return Err(Opaque(why));
    }
    // The parser and the walk below recurse once per nesting level: a command nested deeper than
    // any person writes would exhaust the stack, which no caller can catch.
    if openers(command) > MAX_OPENERS {
        return Err(Opaque("more nesting than this reader follows"));
    }
    let options = parser_options();
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(command.as_bytes()), &options);
    let program = parser
        .parse_program()
        .map_err(|_| Opaque("a command the shell parser cannot read"))?;
    let mut out = Vec::new();
    for complete in &program.complete_commands {
        list(complete, &mut out)?;
    }
    Ok(out)
}

/// The most places a command may open a nested construct. Every level of nesting opens at
/// least one, so this bounds the recursion far below what a 2 MiB thread holds.
pub const MAX_OPENERS: usize = 256;

/// How many places `command` may open a nested construct: each `(`, `{`, `[` and backquote, and
/// each word that begins a compound command. Counted generously: more only makes a command
/// opaque.
fn openers(command: &str) -> usize {
    const KEYWORDS: [&str; 7] = ["if", "case", "while", "until", "for", "select", "function"];
    let brackets = command
        .bytes()
        .filter(|b| matches!(b, b'(' | b'{' | b'[' | b'`'))
        .count();
    let keywords = command
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| KEYWORDS.contains(w))
        .count();
    brackets + keywords
}

fn parser_options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions {
        // bash runs a non-interactive `-c` command with extglob off; off here too, so `@(…)`
        // stays a syntax the word check refuses rather than a pattern the parser accepts.
        enable_extended_globbing: false,
        posix_mode: false,
        sh_mode: false,
        tilde_expansion_at_word_start: true,
        tilde_expansion_after_colon: false,
        ..brush_parser::ParserOptions::default()
    }
}

/// A character bash reads as part of a word but another reader might take for a blank, or one
/// a person cannot see: anywhere in the text, it makes the command opaque.
fn unsafe_character(command: &str) -> Option<&'static str> {
    for c in command.chars() {
        if c == '\n' || c == '\t' {
            continue;
        }
        if c.is_control() {
            return Some("a control character (only tab and newline are read as bash reads them)");
        }
        if !c.is_ascii() && (c.is_whitespace() || is_invisible(c)) {
            return Some("a non-ASCII blank or invisible character");
        }
    }
    None
}

/// Zero-width and bidirectional formatting characters: they change what a person reads, not
/// what bash runs.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFF8}' | '\u{E0000}'..='\u{E007F}')
}

fn list(items: &ast::CompoundList, out: &mut Vec<Simple>) -> Result<(), Opaque> {
    for ast::CompoundListItem(and_or, _separator) in &items.0 {
        pipeline(&and_or.first, out)?;
        for next in &and_or.additional {
            match next {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => pipeline(p, out)?,
            }
        }
    }
    Ok(())
}

fn pipeline(pipeline: &ast::Pipeline, out: &mut Vec<Simple>) -> Result<(), Opaque> {
    // `!` and the `time` keyword change how the result is reported, not what runs.
    for command in &pipeline.seq {
        match command {
            ast::Command::Simple(simple) => out.push(simple_command(simple)?),
            ast::Command::Compound(compound, _) => return Err(Opaque(compound_kind(compound))),
            ast::Command::Function(_) => return Err(Opaque("a function definition")),
            ast::Command::ExtendedTest(..) => return Err(Opaque("a [[ … ]] test")),
        }
    }
    Ok(())
}

fn compound_kind(compound: &ast::CompoundCommand) -> &'static str {
    match compound {
        ast::CompoundCommand::Arithmetic(_) | ast::CompoundCommand::ArithmeticForClause(_) => {
            "arithmetic evaluation"
        }
        ast::CompoundCommand::BraceGroup(_) => "a command group",
        ast::CompoundCommand::Subshell(_) => "a subshell",
        ast::CompoundCommand::Coprocess(_) => "a coprocess",
        _ => "a compound command (if, for, while, until or case)",
    }
}

fn simple_command(command: &ast::SimpleCommand) -> Result<Simple, Opaque> {
    let mut simple = Simple::default();
    for item in command.prefix.iter().flat_map(|p| p.0.iter()) {
        match item {
            ast::CommandPrefixOrSuffixItem::AssignmentWord(_, word) => {
                simple.assignments.push(literal(&word.value)?);
            }
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => simple.redirects.push(redirect(r)?),
            ast::CommandPrefixOrSuffixItem::Word(word) => simple.words.push(literal(&word.value)?),
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(..) => {
                return Err(Opaque("process substitution"));
            }
        }
    }
    if let Some(word) = &command.word_or_name {
        simple.words.push(literal(&word.value)?);
    }
    for item in command.suffix.iter().flat_map(|s| s.0.iter()) {
        match item {
            // After the program, `NAME=value` is an argument (to `export`, `env`, `make`…).
            ast::CommandPrefixOrSuffixItem::AssignmentWord(_, word)
            | ast::CommandPrefixOrSuffixItem::Word(word) => {
                simple.words.push(literal(&word.value)?)
            }
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => simple.redirects.push(redirect(r)?),
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(..) => {
                return Err(Opaque("process substitution"));
            }
        }
    }
    Ok(simple)
}

/// The file a redirection names, as a literal.
fn target(word: &ast::Word) -> Result<String, Opaque> {
    literal(&word.value)
}

/// The one file every rule may leave a redirection to: nothing is written or read.
const DEV_NULL: &str = "/dev/null";

fn is_fd(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())
}

fn redirect(r: &ast::IoRedirect) -> Result<Redirect, Opaque> {
    use ast::{IoFileRedirectKind as Kind, IoFileRedirectTarget as Target};
    Ok(match r {
        ast::IoRedirect::File(_, kind, target_) => match (kind, target_) {
            (_, Target::ProcessSubstitution(..)) => return Err(Opaque("process substitution")),
            (_, Target::Fd(_)) => Redirect::Harmless,
            (Kind::DuplicateOutput | Kind::DuplicateInput, Target::Duplicate(word)) => {
                let word = target(word)?;
                if is_fd(&word) || word == "-" {
                    Redirect::Harmless
                } else if matches!(kind, Kind::DuplicateOutput) {
                    // `>&name` writes standard output and error to the file `name`.
                    if word == DEV_NULL {
                        Redirect::Harmless
                    } else {
                        Redirect::Writes(word)
                    }
                } else {
                    return Err(Opaque(
                        "an input duplication from something not a descriptor",
                    ));
                }
            }
            (Kind::Read, Target::Filename(word) | Target::Duplicate(word)) => {
                let word = target(word)?;
                if word == DEV_NULL {
                    Redirect::Harmless
                } else {
                    Redirect::Reads(word)
                }
            }
            (
                Kind::Write | Kind::Append | Kind::Clobber | Kind::ReadAndWrite,
                Target::Filename(word) | Target::Duplicate(word),
            ) => {
                let word = target(word)?;
                if word == DEV_NULL {
                    Redirect::Harmless
                } else {
                    Redirect::Writes(word)
                }
            }
            (Kind::DuplicateOutput | Kind::DuplicateInput, Target::Filename(word)) => {
                Redirect::Writes(target(word)?)
            }
        },
        ast::IoRedirect::OutputAndError(word, _append) => {
            let word = target(word)?;
            if word == DEV_NULL {
                Redirect::Harmless
            } else {
                Redirect::Writes(word)
            }
        }
        ast::IoRedirect::HereString(_, word) => {
            literal(&word.value)?;
            Redirect::Harmless
        }
        ast::IoRedirect::HereDocument(_, doc) => {
            // Only a quoted delimiter keeps the body from being expanded (and run).
            if !doc.here_end.value.contains(['\'', '"', '\\']) || doc.requires_expansion {
                return Err(Opaque("a here-document with an unquoted delimiter"));
            }
            Redirect::Harmless
        }
    })
}

/// Unquoted characters that stand for themselves.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./:=,+@%^~".contains(c) || (!c.is_ascii() && !c.is_whitespace())
}

/// The literal a shell word stands for after quote removal, when it stands for one whatever the
/// environment: `npm`, `'a b'`, `"x y"`, `a\ b`, `--flag=value`. Anything that expands (`$`,
/// backticks, globs, braces, `!`) is refused, even inside double quotes.
///
/// # Errors
/// [`Opaque`] naming what the word holds.
pub fn literal(raw: &str) -> Result<String, Opaque> {
    if raw == "{}" {
        // `find -exec … {} ;`: bash passes a bare `{}` through unchanged.
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let braces_expand = brace_expands(raw);
    let mut chars = raw.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => out.push(c),
                    None => return Err(Opaque("an unterminated single quote")),
                }
            },
            '"' => loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c @ ('"' | '\\' | '$' | '`')) => out.push(c),
                        Some('\n') => return Err(Opaque("a line continuation inside quotes")),
                        Some(c) => {
                            out.push('\\');
                            out.push(c);
                        }
                        None => return Err(Opaque("an unterminated double quote")),
                    },
                    // `"…$"`: a `$` before the closing quote stands for itself.
                    Some('$') if chars.peek() == Some(&'"') => out.push('$'),
                    Some('$') => {
                        return Err(Opaque(match chars.peek() {
                            Some('(') => "command substitution",
                            Some('{') => "a parameter expansion",
                            _ => "an expansion ($) inside double quotes",
                        }));
                    }
                    Some('`') => return Err(Opaque("command substitution")),
                    // Before the closing quote, `!` is never expanded.
                    Some('!') if chars.peek() == Some(&'"') => out.push('!'),
                    Some('!') => return Err(Opaque("history expansion (!)")),
                    Some(c) => out.push(c),
                    None => return Err(Opaque("an unterminated double quote")),
                }
            },
            '\\' => match chars.next() {
                // A line continuation inside a word joins it.
                Some('\n') => {}
                Some(c) => out.push(c),
                None => return Err(Opaque("a trailing backslash")),
            },
            // A `$` that ends the word stands for itself.
            '$' if chars.peek().is_none() => out.push('$'),
            '$' => {
                return Err(Opaque(match chars.peek() {
                    Some('(') => "command substitution",
                    Some('{') => "a parameter expansion",
                    Some('[') => "arithmetic expansion",
                    Some('\'') => "ANSI-C quoting ($'…')",
                    Some('"') => "locale quoting ($\"…\")",
                    _ => "an expansion ($)",
                }));
            }
            '`' => return Err(Opaque("command substitution")),
            '*' | '?' => return Err(Opaque("a glob (*, ? or [)")),
            // `[` opens a bracket expression only when a `]` follows in the word; alone (the
            // `[` command) or unmatched it stands for itself, and so does a `]`.
            '[' if raw_has_after(&chars, ']') => return Err(Opaque("a glob (*, ? or [)")),
            '[' | ']' => out.push(c),
            '{' | '}' if braces_expand => return Err(Opaque("brace expansion")),
            '{' | '}' => out.push(c),
            // A `!` that ends the word is never expanded (`find . ! -name x`, `done!`).
            '!' if chars.peek().is_none() => out.push('!'),
            '!' => return Err(Opaque("history expansion (!)")),
            '#' if !first => out.push(c),
            c if plain(c) => out.push(c),
            _ => return Err(Opaque("a character the shell treats specially")),
        }
        first = false;
    }
    Ok(out)
}

/// Whether `c` appears unquoted in what is left of a word (quotes are skipped over, so a
/// quoted `]` does not close a bracket expression; counted generously).
fn raw_has_after(rest: &std::iter::Peekable<std::str::Chars<'_>>, c: char) -> bool {
    rest.clone().any(|x| x == c)
}

/// Whether bash would expand braces in the raw word: an unquoted `{` closed by an unquoted `}`
/// with an unquoted `,` or `..` between them (`{a,b}`, `{1..3}`, `a{,}`). `{}`, `{x}` and
/// `HEAD@{1}` stand for themselves.
fn brace_expands(raw: &str) -> bool {
    let chars: Vec<char> = raw.chars().collect();
    let mut open: Vec<bool> = Vec::new();
    let mut i = 0;
    let (mut single, mut double) = (false, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if !single => i += 1,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            _ if single || double => {}
            '{' => open.push(false),
            ',' => {
                if let Some(top) = open.last_mut() {
                    *top = true;
                }
            }
            '.' if chars.get(i + 1) == Some(&'.') => {
                if let Some(top) = open.last_mut() {
                    *top = true;
                }
            }
            '}' if open.pop() == Some(true) => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// The words of a rule's command pattern (a prefix before `:*`, or a whole command): one simple
/// command of literal words, or why it is not one.
///
/// # Errors
/// Why the pattern is not one simple command of literal words.
pub fn pattern_words(pattern: &str) -> Result<Vec<String>, String> {
    match parse(pattern) {
        Ok(mut parts) if parts.len() == 1 => {
            let part = parts.remove(0);
            if !part.redirects.is_empty() {
                return Err("a command pattern cannot hold a redirection".to_owned());
            }
            Ok(part.all_words().cloned().collect())
        }
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

    fn words(command: &str) -> Vec<Vec<String>> {
        parse(command)
            .unwrap_or_else(|e| panic!("{command:?}: {e:?}"))
            .into_iter()
            .map(|s| s.all_words().cloned().collect())
            .collect()
    }

    fn w(parts: &[&[&str]]) -> Vec<Vec<String>> {
        parts
            .iter()
            .map(|p| p.iter().map(|w| (*w).to_owned()).collect())
            .collect()
    }

    #[test]
    fn nesting_deeper_than_the_reader_follows_is_opaque_not_a_crash() {
        // Deep enough to overflow a thread's stack in the parser, were it let through.
        for (open, close) in [
            ("if true; then ", "; fi"),
            ("$(", ")"),
            ("{ ", "; }"),
            ("(", ")"),
        ] {
            let deep = format!("{}echo x{}", open.repeat(5000), close.repeat(5000));
            assert_eq!(
                parse(&deep),
                Err(Opaque("more nesting than this reader follows")),
                "{open}"
            );
        }
        // Ordinary commands, brackets and all, are read.
        assert!(parse("cargo test -- --nocapture 2>&1 | tee out.log").is_ok());
        assert_eq!(openers("if [ -f a ]; then (cd b && make); fi"), 3);
    }

    #[test]
    fn splits_at_every_separator() {
        assert_eq!(
            words("npm run test; rm -rf ~"),
            w(&[&["npm", "run", "test"], &["rm", "-rf", "~"]])
        );
        assert_eq!(
            words("a && b || c | d & e\nf |& g"),
            w(&[&["a"], &["b"], &["c"], &["d"], &["e"], &["f"], &["g"]])
        );
        assert_eq!(words("   ls   -la  "), w(&[&["ls", "-la"]]));
        assert_eq!(words("! grep x; time ls"), w(&[&["grep", "x"], &["ls"]]));
    }

    #[test]
    fn quotes_and_escapes_are_removed() {
        assert_eq!(
            words(r#"echo "a; b" 'c && d' e\;f 'a'"b"\c"#),
            w(&[&["echo", "a; b", "c && d", "e;f", "abc"]])
        );
        assert_eq!(words("echo ''"), w(&[&["echo", ""]]));
        assert_eq!(words("npm run \\\ntest"), w(&[&["npm", "run", "test"]]));
        assert_eq!(
            words("npm test # ; rm -rf /\nls"),
            w(&[&["npm", "test"], &["ls"]])
        );
        assert_eq!(words("a#b"), w(&[&["a#b"]]));
        assert_eq!(words(r#"echo "say \"hi\"""#), w(&[&["echo", "say \"hi\""]]));
    }

    #[test]
    fn what_expands_or_runs_code_is_opaque() {
        for command in [
            "echo $(rm -rf ~)",
            "echo `rm -rf ~`",
            "echo \"$(rm -rf ~)\"",
            "echo \"$\\\n(rm -rf ~)\"",
            "echo $HOME",
            "echo \"${_@P}\"",
            "echo $'\\x41'",
            "echo $[1+1]",
            "echo *.rs",
            "echo {a,b}",
            "echo !!",
            "diff <(ls a) <(ls b)",
            "(rm -rf ~)",
            "{ rm -rf ~; }",
            "f() { ls; }",
            "if true; then ls; fi",
            "for x in a; do ls; done",
            "[[ -f x ]]",
            "(( x = 1 ))",
            "cat <<EOF\nhi\nEOF",
            "echo 'unterminated",
            "echo \"unterminated",
            "coproc ls",
            "ls\u{a0}-la",
            "ls\r",
            "ls \u{200b}",
            "ls \u{202e}",
        ] {
            assert!(parse(command).is_err(), "{command:?}");
        }
    }

    #[test]
    fn redirections_are_classified() {
        let redirects = |c: &str| parse(c).unwrap().remove(0).redirects;
        assert_eq!(
            redirects("npm test 2>&1 >&- 2<&0"),
            vec![Redirect::Harmless; 3]
        );
        assert_eq!(
            redirects("npm test >/dev/null 2> /dev/null &>/dev/null"),
            vec![Redirect::Harmless; 3]
        );
        assert_eq!(
            redirects("npm test >&1#"),
            vec![Redirect::Writes("1#".into())]
        );
        assert_eq!(
            redirects("npm test >&1out.txt"),
            vec![Redirect::Writes("1out.txt".into())]
        );
        assert_eq!(
            redirects("npm test >&1-2"),
            vec![Redirect::Writes("1-2".into())]
        );
        assert_eq!(
            redirects("npm test >>o"),
            vec![Redirect::Writes("o".into())]
        );
        assert_eq!(
            redirects("npm test >|o"),
            vec![Redirect::Writes("o".into())]
        );
        assert_eq!(
            redirects("npm test &>o"),
            vec![Redirect::Writes("o".into())]
        );
        assert_eq!(redirects("sort <in"), vec![Redirect::Reads("in".into())]);
        assert_eq!(redirects("cat <<< 'x'"), vec![Redirect::Harmless]);
        assert_eq!(redirects("cat <<'E'\n$x\nE"), vec![Redirect::Harmless]);
        assert_eq!(
            redirects("git status \"1\">/dev/null"),
            vec![Redirect::Harmless]
        );
        assert_eq!(
            parse("git status \"1\">/dev/null").unwrap()[0].words,
            vec!["git", "status", "1"]
        );
    }

    #[test]
    fn assignments_stay_apart_from_the_program() {
        let simple = parse("NODE_ENV=test npm test X=1").unwrap().remove(0);
        assert_eq!(simple.assignments, vec!["NODE_ENV=test"]);
        assert_eq!(simple.words, vec!["npm", "test", "X=1"]);
    }

    #[test]
    fn patterns_are_one_simple_command() {
        assert_eq!(
            pattern_words("npm run test").unwrap(),
            vec!["npm", "run", "test"]
        );
        assert!(
            pattern_words("a; b")
                .unwrap_err()
                .contains("one simple command")
        );
        assert!(pattern_words("$(x)").unwrap_err().contains("cannot hold"));
        assert!(
            pattern_words("npm > x")
                .unwrap_err()
                .contains("redirection")
        );
    }
}

//! One reader for command-line options, the way the programs themselves read them.
//!
//! GNU `getopt_long` (coreutils, sed, grep, tar's argp) and git's parse-options agree on what
//! matters here: options may come after operands (permutation) until `--`; one-letter options
//! bundle (`-qD` is `-q -D`); a required value is attached (`-oFILE`, `--output=FILE`) or the
//! next word; an optional value only attached (`-O'cmd'`, `--color=always`); a long option may
//! be shortened to any prefix no other option shares (`--out` is `--output`, `--del` is
//! `--delete`), an exact name always winning. [`read`] does the same against a program's
//! [`Table`] and fails closed: an option the table does not know, an ambiguous or unresolvable
//! abbreviation, or a value where none is taken makes the whole reading [`Unknown`]. Only a
//! table that holds the program's every long option (checked against the installed program by
//! the tests) resolves abbreviations; with any other, an abbreviation is unknown, since the
//! option it really names may be missing from the table.

use std::collections::HashMap;

/// What an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    /// Nothing.
    Nothing,
    /// A value, attached or the next word.
    Value,
    /// A value only when attached.
    Optional,
}

/// One option: its names and whether it is safe for a rule written because the program reads.
#[derive(Debug)]
pub(super) struct Opt {
    /// The name it is reported by: its first long name, else its letter.
    pub name: &'static str,
    /// What it takes.
    pub takes: Takes,
    /// Why it writes a file or runs a program, if it does.
    pub unsafe_because: Option<&'static str>,
}

/// A program's options.
#[derive(Debug)]
pub(super) struct Table {
    opts: Vec<Opt>,
    shorts: HashMap<char, usize>,
    longs: Vec<(&'static str, usize)>,
    /// The long names are all the program has: abbreviations may be resolved.
    complete: bool,
    /// The first operand ends the options (awk, find's starting points, git's global options).
    stops_at_operand: bool,
    /// `-<digits>` is an option (`git log -5`, `grep -3`).
    numeric: bool,
}

/// The reason given for an option marked `!` without one of its own.
const WRITES_OR_RUNS: &str = "an option that writes files or runs programs";

impl Table {
    /// Builds a table from one line per option: its names (`-o --output=`, `=` for a value,
    /// `[=]` for an optional one; a name without either takes what the others on its line
    /// take), then `! reason` when it writes files or runs programs.
    /// Lines starting with `#` are comments.
    pub fn parse(spec: &'static str, complete: bool) -> Table {
        let mut table = Table {
            opts: Vec::new(),
            shorts: HashMap::new(),
            longs: Vec::new(),
            complete,
            stops_at_operand: false,
            numeric: false,
        };
        for line in spec.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (names, why) = match line.split_once('!') {
                Some((names, why)) => {
                    let why = why.trim();
                    (
                        names,
                        Some(if why.is_empty() { WRITES_OR_RUNS } else { why }),
                    )
                }
                None => (line, None),
            };
            let index = table.opts.len();
            let mut takes = Takes::Nothing;
            let (mut name, mut long_name) = (None, None);
            for word in names.split_whitespace() {
                let (bare, t) = if let Some(b) = word.strip_suffix("[=]") {
                    (b, Takes::Optional)
                } else if let Some(b) = word.strip_suffix('=') {
                    (b, Takes::Value)
                } else {
                    (word, Takes::Nothing)
                };
                // A name without a marker takes what the others on its line take.
                if t != Takes::Nothing {
                    assert!(
                        takes == Takes::Nothing || takes == t,
                        "the names of one option take the same: {line}"
                    );
                    takes = t;
                }
                if let Some(long) = bare.strip_prefix("--") {
                    table.longs.push((long, index));
                    long_name.get_or_insert(long);
                    name.get_or_insert(long);
                } else if let Some(short) = bare.strip_prefix('-') {
                    let mut chars = short.chars();
                    let letter = chars.next().expect("an option letter");
                    assert!(chars.next().is_none(), "one letter: {word}");
                    table.shorts.insert(letter, index);
                    name.get_or_insert(short);
                } else {
                    panic!("an option starts with '-': {word}");
                }
            }
            table.opts.push(Opt {
                name: long_name.or(name).expect("an option has a name"),
                takes,
                unsafe_because: why,
            });
        }
        table
    }

    /// The first operand ends the options.
    pub fn stopping_at_operand(mut self) -> Table {
        self.stops_at_operand = true;
        self
    }

    /// `-<digits>` is an option.
    pub fn with_numbers(mut self) -> Table {
        self.numeric = true;
        self
    }

    /// The long names, for the tests that hold a table against the installed program.
    #[cfg(test)]
    pub fn long_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.longs.iter().map(|(n, _)| *n)
    }

    /// The option a long name (without `--`) names: exact, else a unique abbreviation when the
    /// table is complete. Several names of one option (`--color`, `--colour`) are not ambiguous.
    fn long(&self, name: &str) -> Option<&Opt> {
        if let Some((_, i)) = self.longs.iter().find(|(n, _)| *n == name) {
            return Some(&self.opts[*i]);
        }
        if !self.complete || name.is_empty() {
            return None;
        }
        let mut found = None;
        for (n, i) in &self.longs {
            if n.starts_with(name) {
                match found {
                    None => found = Some(*i),
                    Some(f) if f == *i => {}
                    Some(_) => return None,
                }
            }
        }
        found.map(|i| &self.opts[i])
    }
}

/// A word that reads as an option. Where a value may be the next word, one that looks like an
/// option is not taken as it: some programs (git's revision options) take a value only when
/// attached, and read the next word as an option of its own (`git log -U --output=F`).
fn looks_like_option(word: &str) -> bool {
    word.starts_with('-') && word != "-"
}

/// An option the table does not know (or cannot resolve), as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unknown(pub String);

/// A command's arguments, read.
#[derive(Debug, Default)]
pub(super) struct Parsed<'t, 'a> {
    /// Each option given, with its value.
    pub options: Vec<(&'t Opt, Option<&'a str>)>,
    /// The operands, in order.
    pub operands: Vec<&'a str>,
}

impl<'t> Parsed<'t, '_> {
    /// The first option given that writes files or runs programs.
    pub fn first_unsafe(&self) -> Option<&'static str> {
        self.options.iter().find_map(|(o, _)| o.unsafe_because)
    }

    /// Whether an option of this name was given.
    pub fn has(&self, name: &str) -> bool {
        self.options.iter().any(|(o, _)| o.name == name)
    }

    /// The values given to the option of this name.
    pub fn values(&self, name: &str) -> impl Iterator<Item = &str> + '_ {
        let name = name.to_owned();
        self.options
            .iter()
            .filter(move |(o, _)| o.name == name)
            .filter_map(|(_, v)| *v)
    }
}

/// Reads `args` by `table`.
///
/// # Errors
/// [`Unknown`] naming the first option the table does not know, or cannot tell apart.
pub(super) fn read<'t, 'a>(
    table: &'t Table,
    args: &'a [String],
) -> Result<Parsed<'t, 'a>, Unknown> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    let unknown = |a: &str| Err(Unknown(a.to_owned()));
    while i < args.len() {
        let a = args[i].as_str();
        i += 1;
        if a == "--" {
            parsed.operands.extend(args[i..].iter().map(String::as_str));
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let Some(opt) = table.long(name) else {
                return unknown(a);
            };
            let value = match (opt.takes, attached) {
                (Takes::Nothing, Some(_)) => return unknown(a),
                (Takes::Nothing, None) | (Takes::Optional, None) => None,
                (_, Some(v)) => Some(v),
                (Takes::Value, None) => match args.get(i) {
                    Some(v) if !looks_like_option(v) => {
                        i += 1;
                        Some(v.as_str())
                    }
                    _ => return unknown(a),
                },
            };
            parsed.options.push((opt, value));
            continue;
        }
        let bundle = match a.strip_prefix('-') {
            Some(b) if !b.is_empty() => b,
            _ => {
                parsed.operands.push(a);
                if table.stops_at_operand {
                    parsed.operands.extend(args[i..].iter().map(String::as_str));
                    break;
                }
                continue;
            }
        };
        if table.numeric && bundle.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for (at, letter) in bundle.char_indices() {
            let Some(&index) = table.shorts.get(&letter) else {
                return unknown(a);
            };
            let opt = &table.opts[index];
            let rest = &bundle[at + letter.len_utf8()..];
            match opt.takes {
                Takes::Nothing => parsed.options.push((opt, None)),
                Takes::Optional => {
                    parsed
                        .options
                        .push((opt, (!rest.is_empty()).then_some(rest)));
                    break;
                }
                Takes::Value if !rest.is_empty() => {
                    parsed.options.push((opt, Some(rest)));
                    break;
                }
                Takes::Value => match args.get(i) {
                    Some(v) if !looks_like_option(v) => {
                        i += 1;
                        parsed.options.push((opt, Some(v.as_str())));
                        break;
                    }
                    _ => return unknown(a),
                },
            }
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    const SPEC: &str = "
        -o --output= ! writes a file
        -k --key=
        -u --unique
        --color[=] --colour[=]
        -O[=] ! runs a pager
        --out-of-band
        --debug
        --delete ! deletes
    ";

    #[test]
    fn options_read_as_getopt_long_reads_them() {
        let complete = Table::parse(SPEC, true);
        let read_ = |s: &str| {
            let args = words(s);
            read(&complete, &args)
                .map(|p| {
                    (
                        p.options
                            .iter()
                            .map(|(o, v)| format!("{}={}", o.name, v.unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(" "),
                        p.operands.join(" "),
                    )
                })
                .map_err(|e| e.0)
        };
        assert_eq!(read_("-uk2 f"), Ok(("unique= key=2".into(), "f".into())));
        assert_eq!(read_("f -k 2 g"), Ok(("key=2".into(), "f g".into())));
        assert_eq!(read_("-uoF x"), Ok(("unique= output=F".into(), "x".into())));
        assert_eq!(read_("--outp=F"), Ok(("output=F".into(), "".into())));
        assert_eq!(read_("--del x"), Ok(("delete=".into(), "x".into())));
        assert_eq!(read_("--colo"), Ok(("color=".into(), "".into())));
        assert_eq!(read_("-O x"), Ok(("O=".into(), "x".into())));
        assert_eq!(read_("-Ocmd x"), Ok(("O=cmd".into(), "x".into())));
        assert_eq!(read_("-- -o x"), Ok(("".into(), "-o x".into())));
        // `--out` is `--output` and `--out-of-band`; `--d` is `--debug` and `--delete`.
        assert_eq!(read_("--out=F"), Err("--out=F".into()));
        assert_eq!(read_("--d"), Err("--d".into()));
        assert_eq!(read_("-x"), Err("-x".into()));
        assert_eq!(read_("--unique=1"), Err("--unique=1".into()));
        assert_eq!(read_("-k"), Err("-k".into()));
        // Without the whole list, an abbreviation may name an option the table lacks.
        let partial = Table::parse(SPEC, false);
        let args = words("--outp=F");
        assert_eq!(
            read(&partial, &args).unwrap_err(),
            Unknown("--outp=F".into())
        );
    }
}

//! Where in a deployment file an error is: the line and column of the key (or the table) it is
//! about, found from the spans of a second, span-keeping parse of the same text, so every error
//! reads `deploy.toml:12:1: plugin "deny-commands": unknown key "comand" ...`.

use toml::de::{DeTable, DeValue};

/// A 1-based line and column, or nothing when the place cannot be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Location(pub Option<(usize, usize)>);

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some((line, column)) => write!(f, ":{line}:{column}"),
            None => Ok(()),
        }
    }
}

/// The line and column (1-based, in characters) of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> Location {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    Location(Some((line, column)))
}

/// Finds places in one deployment file's text.
pub struct Locator<'a> {
    text: &'a str,
    doc: Option<DeTable<'a>>,
}

impl<'a> Locator<'a> {
    /// A locator over `text` (which has already parsed as TOML).
    pub fn new(text: &'a str) -> Self {
        Locator {
            text,
            doc: DeTable::parse(text).ok().map(toml::Spanned::into_inner),
        }
    }

    fn line_column(&self, offset: usize) -> Location {
        line_column(self.text, offset)
    }

    /// The table an error `place` names, and the offset of its header.
    fn table(&self, place: &str) -> Option<(Option<&DeTable<'a>>, usize)> {
        let doc = self.doc.as_ref()?;
        let top = |key: &str| doc.iter().find(|(k, _)| k.get_ref().as_ref() == key);
        let entry = |array: &str, pick: &dyn Fn(usize, &DeTable<'a>) -> bool| {
            let (_, value) = top(array)?;
            let DeValue::Array(items) = value.get_ref() else {
                return None;
            };
            items
                .iter()
                .enumerate()
                .find_map(|(i, item)| match item.get_ref() {
                    DeValue::Table(t) if pick(i, t) => Some((Some(t), item.span().start)),
                    _ => None,
                })
        };
        let numbered = |prefix: &str| {
            place
                .strip_prefix(prefix)
                .and_then(|n| n.parse::<usize>().ok())
        };
        // `[[mcp.server]] #2`, `[[mcp.server]] "notes"`: an entry of `[mcp]`'s `server` list.
        if let Some(rest) = place.strip_prefix("[[mcp.server]] ") {
            let (_, mcp) = top("mcp")?;
            let DeValue::Table(mcp) = mcp.get_ref() else {
                return None;
            };
            let (_, servers) = mcp.iter().find(|(k, _)| k.get_ref().as_ref() == "server")?;
            let DeValue::Array(items) = servers.get_ref() else {
                return None;
            };
            let number = rest.strip_prefix('#').and_then(|n| n.parse::<usize>().ok());
            let name = rest.strip_prefix('"').and_then(|p| p.strip_suffix('"'));
            return items.iter().enumerate().find_map(|(i, item)| match item.get_ref() {
                DeValue::Table(t)
                    if number == Some(i + 1)
                        || t.iter().any(|(k, v)| {
                            k.get_ref().as_ref() == "name"
                                && matches!(v.get_ref(), DeValue::String(s) if Some(s.as_ref()) == name)
                        }) =>
                {
                    Some((Some(t), item.span().start))
                }
                _ => None,
            });
        }
        if let Some(table) = place
            .strip_prefix('[')
            .and_then(|p| p.strip_suffix(']'))
            .filter(|p| !p.starts_with('['))
        {
            let (key, value) = top(table)?;
            let t = match value.get_ref() {
                DeValue::Table(t) => Some(t),
                _ => None,
            };
            return Some((t, key.span().start));
        }
        for (prefix, array) in [
            ("plugin #", "plugin"),
            ("hook #", "hook"),
            ("[[rule]] #", "rule"),
        ] {
            if let Some(n) = numbered(prefix) {
                return entry(array, &|i, _| i + 1 == n);
            }
        }
        if let Some(name) = place
            .strip_prefix("plugin \"")
            .and_then(|p| p.strip_suffix('"'))
        {
            return entry("plugin", &|_, t| {
                t.iter().any(|(k, v)| {
                    k.get_ref().as_ref() == "name"
                        && matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == name)
                })
            });
        }
        let key = match place {
            "plugin" | "hook" | "rule" => Some(place),
            _ => None,
        };
        key.and_then(top).map(|(k, _)| (Some(doc), k.span().start))
    }

    /// Where the error `message` about `place` is: the line of the key the message is about
    /// when it names one of the table's keys, else the table's header.
    pub fn locate(&self, place: &str, message: &str) -> Location {
        let (table, header) = match place {
            "top level" => (self.doc.as_ref(), 0),
            _ => match self.table(place) {
                Some(found) => found,
                None => return Location(None),
            },
        };
        let named = message
            .split_once("unknown key \"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(key, _)| key)
            .or_else(|| {
                message
                    .split([' ', '.', '=', ':'])
                    .next()
                    .filter(|w| !w.is_empty())
            });
        let at = named
            .and_then(|key| {
                let (k, v) = table?.iter().find(|(k, _)| k.get_ref().as_ref() == key)?;
                // `config.n ...`, `files."/r" ...`: the key inside the sub-table when found.
                let inner = message
                    .strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|rest| match rest.strip_prefix('"') {
                        Some(quoted) => quoted.split_once('"').map(|(k, _)| k),
                        None => rest.split([' ', '=', ':', '.']).next(),
                    })
                    .and_then(|sub| match v.get_ref() {
                        DeValue::Table(t) => t
                            .iter()
                            .find(|(k, _)| k.get_ref().as_ref() == sub)
                            .map(|(k, _)| k.span().start),
                        _ => None,
                    });
                Some(inner.unwrap_or(k.span().start))
            })
            .unwrap_or(header);
        if place == "top level" && at == 0 && table.is_none() {
            return Location(None);
        }
        self.line_column(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "[approval]\npolicy = \"ask\"\n\n[[plugin]]\nname = \"a\"\npath = \"a.wasm\"\n\n[[plugin]]\nname = \"deny\"\n  comand = 1\n";

    #[test]
    fn finds_the_key_a_message_names_or_the_table() {
        let l = Locator::new(TEXT);
        assert_eq!(
            l.locate("plugin \"deny\"", "unknown key \"comand\" (expected ...)")
                .to_string(),
            ":10:3"
        );
        assert_eq!(l.locate("plugin #2", "name is missing").to_string(), ":9:1");
        assert_eq!(
            l.locate("[approval]", "policy must be a string")
                .to_string(),
            ":2:1"
        );
        assert_eq!(
            l.locate("top level", "unknown key \"approval\"")
                .to_string(),
            ":1:2"
        );
        assert_eq!(l.locate("[sandbox]", "x").to_string(), "");
    }
}

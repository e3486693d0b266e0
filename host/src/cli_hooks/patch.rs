//! Codex's `apply_patch` body read the way Codex reads it (codex-rs `apply-patch`'s parser),
//! so the files the host judges are the files Codex writes.
//!
//! Codex trims the whole body with Rust's `trim` (Unicode white space), splits it with `lines`
//! (a `\n`, with one `\r` before it dropped), and compares the first and last lines, trimmed,
//! with `*** Begin Patch` and `*** End Patch`; failing that it accepts the same wrapped in a
//! here-document (`<<EOF` … `EOF`). A file header is found on a trimmed line outside an update
//! hunk, and on a line trimmed only at its end inside one; the path is the rest of the line after
//! the marker and one space, leading blanks kept. `*** Environment ID:` changes the directory
//! the paths are read from. This reader is a superset: every line that is a header once trimmed
//! names a file, and a path with leading blanks is named both as Codex writes it and trimmed,
//! so a patch never touches a file the host did not see. A body it cannot read names none.

/// The headers that name a file, and whether the file is created.
const HEADERS: [(&str, bool); 4] = [
    ("*** Add File: ", true),
    ("*** Update File: ", false),
    ("*** Delete File: ", false),
    ("*** Move to: ", true),
];

/// What a patch does to which files.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Patch {
    /// Every file it may add, change, delete or move to, once each, in order.
    pub paths: Vec<String>,
    /// It adds a file (a `Write`, not an `Edit`).
    pub adds: bool,
}

/// Why a patch body cannot be read as Codex reads it.
pub(super) type Unreadable = &'static str;

/// The files `body` touches, or why it cannot be read.
pub(super) fn read(body: &str) -> Result<Patch, Unreadable> {
    let lines: Vec<&str> = body.trim().lines().collect();
    let inner = framed(&lines)
        .or_else(|| {
            // Codex's lenient form: the patch inside a here-document.
            let heredoc = lines.len() >= 4
                && matches!(lines[0], "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                && lines[lines.len() - 1].ends_with("EOF");
            heredoc
                .then(|| framed(&lines[1..lines.len() - 1]))
                .flatten()
        })
        .ok_or("a patch without *** Begin Patch and *** End Patch lines, as Codex reads them")?;
    let mut patch = Patch::default();
    for line in inner {
        let trimmed = line.trim();
        if trimmed.starts_with("*** Environment ID:") {
            return Err("a patch that names the environment its paths are read in");
        }
        for (marker, adds) in HEADERS {
            // Inside an update hunk Codex trims only the end; elsewhere both ends. Either way,
            // a line that is a header once trimmed is taken as one.
            let Some(rest) = line.trim_end().trim_start().strip_prefix(marker) else {
                continue;
            };
            if rest.trim().is_empty() {
                return Err("a patch header that names no file");
            }
            patch.adds |= adds;
            for path in [rest, rest.trim()] {
                if !patch.paths.iter().any(|p| p == path) {
                    patch.paths.push(path.to_owned());
                }
            }
        }
    }
    if patch.paths.is_empty() {
        return Err("a patch that names no file");
    }
    Ok(patch)
}

/// The lines between `*** Begin Patch` and `*** End Patch` (both compared trimmed).
fn framed<'a>(lines: &'a [&'a str]) -> Option<&'a [&'a str]> {
    let (first, last) = (lines.first()?, lines.last()?);
    (lines.len() >= 2 && first.trim() == "*** Begin Patch" && last.trim() == "*** End Patch")
        .then(|| &lines[1..lines.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(body: &str) -> Vec<String> {
        read(body).map(|p| p.paths).unwrap_or_default()
    }

    #[test]
    fn headers_are_found_where_codex_finds_them() {
        // A header with leading blanks (ASCII or Unicode) is still one to Codex.
        let body = "*** Begin Patch\n*** Update File: docs/a.md\n@@\n-a\n+b\n \u{3000}*** Add File: .codex/hooks.json\n+{}\n*** End Patch";
        assert_eq!(paths(body), ["docs/a.md", ".codex/hooks.json"]);
        let body = "  *** Begin Patch\r\n *** Update File: .codex/hooks.json\r\n@@\r\n-a\r\n+b\r\n*** End Patch  ";
        assert_eq!(paths(body), [".codex/hooks.json"]);
        // Codex keeps blanks after the marker: both spellings are named.
        let body = "*** Begin Patch\n*** Add File:  x\n+a\n*** End Patch";
        assert_eq!(paths(body), [" x", "x"]);
        let body = "<<'EOF'\n*** Begin Patch\n*** Delete File: ~/.bashrc\n*** End Patch\nfooEOF";
        assert_eq!(paths(body), ["~/.bashrc"]);
        let moved = read("*** Begin Patch\n*** Update File: a\n*** Move to: .claude/settings.json\n@@\n-a\n+b\n*** End Patch").unwrap();
        assert_eq!(moved.paths, ["a", ".claude/settings.json"]);
        assert!(moved.adds);
    }

    #[test]
    fn a_body_codex_would_not_read_as_the_host_does_names_no_file() {
        for body in [
            "not a patch",
            "*** Begin Patch\n*** End Patch",
            "*** Begin Patch\n*** Add File: \n+a\n*** End Patch",
            "*** Begin Patch\n*** Environment ID: other\n*** Add File: a\n+a\n*** End Patch",
            "*** Begin Patch\u{2028}*** Add File: a\u{2028}*** End Patch",
        ] {
            assert!(read(body).is_err(), "{body:?}");
        }
    }
}

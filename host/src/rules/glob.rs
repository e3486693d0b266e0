//! A rule's path pattern as a glob for one working directory: the directory in front of the
//! rule's own text (the working directory, the home, its literal leading directories) resolved
//! through symlinks and escaped, so only the part the rule wrote as a glob is one.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

use super::paths;

/// What a path rule matches for one working directory: its glob and, for a glob ending in
/// `/**`, the directory itself (`Glob(./src/**)` covers searching `src`).
pub(super) struct PathMatcher {
    glob: GlobMatcher,
    dir: Option<GlobMatcher>,
}

impl PathMatcher {
    pub(super) fn is_match(&self, path: &Path) -> bool {
        self.glob.is_match(path) || self.dir.as_ref().is_some_and(|d| d.is_match(path))
    }
}

pub(super) fn path_matcher(pattern: &str, cwd: &Path) -> Result<PathMatcher, globset::Error> {
    let text = path_glob_text(pattern, cwd);
    let dir = match text.strip_suffix("/**") {
        Some(dir) if !dir.is_empty() => Some(compile(dir)?),
        _ => None,
    };
    Ok(PathMatcher {
        glob: compile(&text)?,
        dir,
    })
}

fn compile(text: &str) -> Result<GlobMatcher, globset::Error> {
    GlobBuilder::new(text)
        .literal_separator(true)
        // A backslash in a directory name is a character, never an escape.
        .backslash_escape(false)
        .build()
        .map(|g| g.compile_matcher())
}

pub(super) fn path_glob(pattern: &str, cwd: &Path) -> Result<GlobMatcher, globset::Error> {
    compile(&path_glob_text(pattern, cwd))
}

/// The glob `pattern` means for a call whose working directory is `cwd`: the directory in front
/// of the rule's own text (the working directory, the home, the rule's literal leading
/// directories) resolved and escaped, the rest as written.
fn path_glob_text(pattern: &str, cwd: &Path) -> String {
    let (base, rest): (PathBuf, &str) = if let Some(abs) = pattern.strip_prefix("//") {
        (PathBuf::from("/"), abs)
    } else if let Some(rest) = pattern.strip_prefix("~/") {
        (
            paths::home().unwrap_or_else(|| PathBuf::from("/nonexistent-home")),
            rest,
        )
    } else {
        (
            cwd.to_owned(),
            pattern.strip_prefix("./").unwrap_or(pattern),
        )
    };
    let is_glob = |c: &str| c.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let components: Vec<&str> = rest.split('/').filter(|c| !c.is_empty()).collect();
    let literal = components.iter().take_while(|c| !is_glob(c)).count();
    let mut literal_path = base;
    for c in &components[..literal] {
        literal_path.push(c);
    }
    let literal_path = paths::real_dir(&literal_path);
    let mut text = globset::escape(&literal_path.to_string_lossy());
    for c in &components[literal..] {
        if !text.ends_with('/') {
            text.push('/');
        }
        text.push_str(c);
    }
    if rest.ends_with('/') && !text.ends_with('/') {
        text.push_str("/**");
    }
    text
}

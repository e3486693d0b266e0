//! Paths resolved the way the tool that opens them will resolve them.
//!
//! A rule such as `Read(./src/**)` is about the file that will be read, not about the text of
//! the argument: `src/l/passwd` is `/etc/passwd` when `src/l` is a symlink to `/etc`. A call's
//! path is made absolute against the call's working directory (`~` is the host user's home),
//! then every existing prefix is resolved through its symlinks, as the kernel will; a file that
//! does not exist yet resolves through its nearest existing parent. A path with `..` is resolved
//! both ways a tool may read it (folding `..` first, as path libraries do, and following the
//! symlinks first, as the kernel does); a rule must cover both. A path that cannot be resolved
//! (a symlink loop, a directory this process may not read) is not covered.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// How many symlinks one resolution follows, as Linux does (`ELOOP` past 40).
const MAX_LINKS: usize = 40;

/// The host user's home, for `~`.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The home's real path, remembered per thread while `HOME` stays the same (it is asked for on
/// every decision the protections make).
pub fn real_home() -> Option<PathBuf> {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<Option<(OsString, PathBuf)>> = const { RefCell::new(None) };
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((h, real)) = last.as_ref()
            && *h == home
        {
            return Some(real.clone());
        }
        let real = real_dir(Path::new(&home));
        *last = Some((home, real.clone()));
        Some(real)
    })
}

/// The path a `file:` URL names (curl, Wget and MCP servers read them), decoded as the URL
/// parser decodes it.
pub(crate) fn file_url(word: &str) -> Option<String> {
    if !word
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("file:"))
    {
        return None;
    }
    let url = url::Url::parse(word).ok()?;
    url.to_file_path().ok().map(|p| p.display().to_string())
}

/// `path` made absolute: `~` and `~/…` under the home, a relative path under `cwd`. `None` when
/// it needs a working directory or home that is not known, or uses another user's `~name`.
pub fn absolute(path: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    if path == "~" {
        return home();
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return Some(home()?.join(rest));
    }
    if path.starts_with('~') {
        return None;
    }
    let path = Path::new(path);
    if path.is_absolute() {
        Some(path.to_owned())
    } else {
        let cwd = cwd?;
        cwd.is_absolute().then(|| cwd.join(path))
    }
}

/// Folds `.` and `..` without touching the filesystem (`/a/b/../c` is `/a/c`; `..` at the root
/// stays at the root).
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The real path the kernel opens for the absolute `path`: every existing prefix resolved
/// through its symlinks, the rest appended. `None` on a loop or an unreadable prefix.
pub fn real(path: &Path) -> Option<PathBuf> {
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_components(&mut pending, path, false);
    let mut out = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            out.pop();
            continue;
        }
        if part == "." {
            continue;
        }
        out.push(&part);
        match std::fs::symlink_metadata(&out) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                let target = std::fs::read_link(&out).ok()?;
                out.pop();
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_components(&mut pending, &target, true);
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Not a directory (a file used as one) cannot be opened either; anything else
            // (permission denied) leaves the real path unknown.
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {}
            Err(_) => return None,
        }
    }
    Some(out)
}

fn push_components(pending: &mut VecDeque<OsString>, path: &Path, front: bool) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for p in parts.into_iter().rev() {
            pending.push_front(p);
        }
    } else {
        pending.extend(parts);
    }
}

/// Every file a tool may open for `path` from `cwd`: one real path, or two when `..` makes the
/// kernel's reading and a path library's differ. Empty when it cannot be resolved.
pub fn resolve(path: &str, cwd: Option<&Path>) -> Vec<PathBuf> {
    let Some(absolute) = absolute(path, cwd) else {
        return Vec::new();
    };
    let kernel = real(&absolute);
    let has_parent = absolute
        .components()
        .any(|c| matches!(c, Component::ParentDir));
    let mut out: Vec<PathBuf> = kernel.into_iter().collect();
    if has_parent {
        match real(&normalise(&absolute)) {
            Some(folded) if !out.contains(&folded) => out.push(folded),
            Some(_) => {}
            None => return Vec::new(),
        }
    }
    if out.is_empty() {
        return Vec::new();
    }
    out
}

/// `dir`'s real path when it resolves, else `dir` folded.
pub fn real_dir(dir: &Path) -> PathBuf {
    real(dir).unwrap_or_else(|| normalise(dir))
}

/// Whether the real path `path` is `area` or inside it.
pub fn within(path: &Path, area: &Path) -> bool {
    path.starts_with(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_are_followed_and_missing_files_resolve_through_their_parent() {
        let dir = tempfile::tempdir().unwrap();
        let root = real_dir(dir.path());
        std::fs::create_dir_all(root.join("w/src")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::os::unix::fs::symlink(root.join("etc"), root.join("w/src/l")).unwrap();
        std::os::unix::fs::symlink("../..", root.join("w/src/up")).unwrap();
        let w = root.join("w");
        assert_eq!(
            resolve("src/l/passwd", Some(&w)),
            vec![root.join("etc/passwd")]
        );
        assert_eq!(resolve("src/up/etc/x", Some(&w)), vec![root.join("etc/x")]);
        assert_eq!(
            resolve("src/new/file", Some(&w)),
            vec![w.join("src/new/file")]
        );
        // The kernel reads l/.. as /etc/..; a path library folds it to src.
        assert_eq!(
            resolve("src/l/../x", Some(&w)),
            vec![root.join("x"), w.join("src/x")]
        );
        // Folding first finds the symlink that the kernel's reading never reaches.
        assert_eq!(
            resolve("src/nope/../l/passwd", Some(&w)),
            vec![root.join("etc/passwd")]
        );
        assert!(resolve("rel", None).is_empty());
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(resolve(root.join("loop/x").to_str().unwrap(), None).is_empty());
    }
}

//! Files only the host's user may read: directories made `0700`, files `0600`, whatever the
//! process umask. Session logs hold tool arguments (commands, paths, file contents), so another
//! user on the machine must not read them; the mode is given when the file or directory is
//! created, so there is no moment when it is open to others.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The mode of a directory the host creates.
pub const DIR_MODE: u32 = 0o700;

/// The mode of a file the host creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents, each `0700`. Directories that exist keep their mode.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Options that create a file `0600` (an existing file keeps its mode); the caller adds how it
/// opens it.
pub fn open_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

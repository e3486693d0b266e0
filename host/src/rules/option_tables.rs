//! The option tables of the programs people allow because they read: every option each one has
//! (for the GNU programs, checked against the installed program's `--help` by the tests, so
//! abbreviations resolve as the program resolves them) or the options known safe (an allow-list:
//! anything else, abbreviations included, is unknown). An option marked `!` writes files, runs
//! programs, or sends what it reads; the reason after it is what the rules chapter's table (docs/rules.md) says.
//!
//! Written against the versions Debian 12 ships: GNU coreutils 9.1 (`sort`, `uniq`), GNU sed 4.9,
//! GNU grep 3.8, GNU tar 1.34, curl 7.88, GNU Wget 1.21, mawk 1.3.4, and git 2.39 to 2.47; ripgrep
//! and fd by their documented options.

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock};

use super::grammar::Table;

const SORT: &str = "
    -b --ignore-leading-blanks
    -d --dictionary-order
    -f --ignore-case
    -g --general-numeric-sort
    -i --ignore-nonprinting
    -M --month-sort
    -h --human-numeric-sort
    -n --numeric-sort
    -R --random-sort
    --random-source=
    -r --reverse
    --sort=
    -V --version-sort
    --batch-size=
    -c
    --check[=]
    -C
    --compress-program= ! sort --compress-program runs a program
    --debug
    --files0-from=
    -k= --key=
    -m --merge
    -o= --output= ! sort -o writes a file
    -s --stable
    -S= --buffer-size=
    -t= --field-separator=
    -T= --temporary-directory=
    --parallel=
    -u --unique
    -z --zero-terminated
    -y
    --help
    --version
";

const UNIQ: &str = "
    -c --count
    -d --repeated
    -D
    --all-repeated[=]
    -f= --skip-fields=
    --group[=]
    -i --ignore-case
    -s= --skip-chars=
    -u --unique
    -z --zero-terminated
    -w= --check-chars=
    --help
    --version
";

const SED: &str = "
    -n --quiet --silent
    --debug
    -e= --expression=
    -f= --file= ! sed -f runs a script file this host cannot read
    --follow-symlinks
    -i[=] --in-place[=] ! sed -i writes the files it reads
    -l= --line-length=
    --posix
    -E -r --regexp-extended
    -s --separate
    --sandbox
    -u --unbuffered
    -z --null-data --zero-terminated
    -b --binary
    --help
    --version
";

const GREP: &str = "
    -E --extended-regexp
    -F --fixed-strings
    -G --basic-regexp
    -P --perl-regexp
    -e= --regexp=
    -f= --file=
    -i -y --ignore-case
    --no-ignore-case
    -w --word-regexp
    -x --line-regexp
    -z --null-data
    -s --no-messages
    -v --invert-match
    -V --version
    --help
    -m= --max-count=
    -b --byte-offset
    -n --line-number
    --line-buffered
    -H --with-filename
    -h --no-filename
    --label=
    -o --only-matching
    -q --quiet --silent
    --binary-files=
    -a --text
    -I
    -d= --directories=
    -D= --devices=
    -r --recursive
    -R --dereference-recursive
    --include=
    --exclude=
    --exclude-from=
    --exclude-dir=
    -L --files-without-match
    -l --files-with-matches
    -c --count
    -T --initial-tab
    -Z --null
    -B= --before-context=
    -A= --after-context=
    -C= --context=
    --group-separator=
    --no-group-separator
    --color[=] --colour[=]
    -U --binary
";

/// tar lists safely; everything that extracts, creates, runs or writes is marked.
const TAR: &str = "
    -t --list
    -x --extract --get ! tar -x extracts files
    -c --create ! tar -c creates an archive
    -r --append ! tar -r changes an archive
    -u --update ! tar -u changes an archive
    -A --catenate --concatenate ! tar -A changes an archive
    --delete ! tar --delete changes an archive
    -d --diff --compare
    --test-label
    -f= --file=
    -v --verbose
    -z --gzip --gunzip --ungzip
    -j --bzip2
    -J --xz
    --lzip
    --lzma
    --lzop
    --zstd
    -Z --compress --uncompress
    -a --auto-compress
    --no-auto-compress
    -I= --use-compress-program= ! tar -I runs a program
    --to-command= ! tar --to-command runs a program
    --checkpoint-action= ! tar --checkpoint-action runs a program
    -F= --info-script= --new-volume-script= ! tar -F runs a script
    --rsh-command= ! tar --rsh-command runs a program
    --rmt-command= ! tar --rmt-command runs a program
    --index-file= ! tar --index-file writes a file
    -g= --listed-incremental= ! tar -g writes a snapshot file
    --volno-file= ! tar --volno-file writes a file
    -M --multi-volume ! tar -M asks for volumes and runs scripts
    -O --to-stdout
    --checkpoint[=]
    --totals[=]
    -C= --directory=
    --exclude=
    -X= --exclude-from=
    -T= --files-from=
    --exclude-vcs
    --exclude-vcs-ignores
    --exclude-backups
    --exclude-caches
    --exclude-caches-all
    --exclude-caches-under
    --exclude-tag=
    --exclude-tag-all=
    --exclude-tag-under=
    --anchored
    --no-anchored
    --ignore-case
    --no-ignore-case
    --wildcards
    --no-wildcards
    --wildcards-match-slash
    --no-wildcards-match-slash
    --null
    --no-null
    --unquote
    --no-unquote
    --verbatim-files-from
    --no-verbatim-files-from
    --recursion
    --no-recursion
    --numeric-owner
    --utc
    --full-time
    --quoting-style=
    --quote-chars=
    --no-quote-chars=
    --show-transformed-names
    --show-stored-names
    -R --block-number
    --occurrence[=]
    -b= --blocking-factor=
    --record-size=
    -B --read-full-records
    -i --ignore-zeros
    --force-local
    --strip-components=
    --transform= --xform=
    --warning=
    -K= --starting-file=
    -N= --newer= --after-date=
    --newer-mtime=
    -H= --format=
    -V= --label=
    -P --absolute-names
    --one-file-system
    -h --dereference
    --hard-dereference
";

/// curl: the options that only fetch and show, and the ones that write or upload.
const CURL: &str = "
    -s --silent
    -S --show-error
    -L --location
    --location-trusted
    -I --head
    -i --include
    -v --verbose
    -H= --header=
    -A= --user-agent=
    -e= --referer=
    -f --fail
    --fail-with-body
    -k --insecure
    --compressed
    -m= --max-time=
    --connect-timeout=
    --retry=
    --retry-delay=
    --retry-max-time=
    --retry-all-errors
    --retry-connrefused
    -X= --request=
    -u= --user=
    -0 --http1.0
    --http1.1
    --http2
    -4 --ipv4
    -6 --ipv6
    -N --no-buffer
    -g --globoff
    -# --progress-bar
    --no-progress-meter
    --max-redirs=
    -r= --range=
    --url=
    --proto=
    --proto-redir=
    --tlsv1.2
    --tlsv1.3
    --cacert=
    --capath=
    -b= --cookie=
    -G --get
    -q --disable
    --raw
    --path-as-is
    --noproxy=
    -x= --proxy=
    --resolve=
    --connect-to=
    --etag-compare=
    -z= --time-cond=
    -j --junk-session-cookies
    --limit-rate=
    -w= --write-out=
    -o= --output=
    -D= --dump-header=
    --trace= --trace-ascii= --stderr=
    -O --remote-name --remote-name-all ! curl -O writes the files it fetches
    -J --remote-header-name ! curl -J writes a file the server names
    --output-dir= --create-dirs ! curl --output-dir writes files
    -K= --config= ! curl -K reads options from a file
    -c= --cookie-jar= ! curl -c writes a file
    --etag-save= ! curl --etag-save writes a file
    --libcurl= ! curl --libcurl writes a file
    --hsts= --alt-svc= ! curl --hsts writes a cache file
    -T= --upload-file= ! curl -T uploads a file
    -d= --data= --data-ascii= --data-binary= --data-raw= --data-urlencode= --json= ! curl -d sends data (and files named with @)
    -F= --form= --form-string= ! curl -F uploads a form (and files named with @)
";

/// Wget: fetching to standard output; the rest writes, uploads or runs wgetrc commands.
const WGET: &str = "
    -q --quiet
    -v --verbose
    -n=
    --no-verbose
    -O= --output-document=
    -S --server-response
    --spider
    -T= --timeout=
    --read-timeout=
    --connect-timeout=
    --dns-timeout=
    -t= --tries=
    --header=
    -U= --user-agent=
    --referer=
    --max-redirect=
    --no-check-certificate
    --https-only
    -4 --inet4-only
    -6 --inet6-only
    --user=
    --password=
    --http-user=
    --http-password=
    --compression=
    --show-progress
    --progress=
    --no-cache
    --no-cookies
    --no-config
    --no-hsts
    --content-on-error
    --limit-rate=
    --wait=
    -i= --input-file=
    -e= --execute= ! wget -e runs wgetrc commands
    -o= --output-file= ! wget -o writes a log file
    -a= --append-output= ! wget -a writes a log file
    --post-file= --body-file= ! wget --post-file uploads a file
    --post-data= --body-data= ! wget --post-data sends data
    --save-cookies= ! wget --save-cookies writes a file
    --config= ! wget --config reads commands from a file
";

/// awk (mawk, and gawk's long forms that matter): the program is the first operand.
const AWK: &str = "
    -F= --field-separator=
    -v= --assign=
    -W=
    -f= --file= ! awk -f runs a program file this host cannot read
    -E= --exec= ! awk -E runs a program file this host cannot read
    -i= --include= ! awk -i loads a program file
    -l= --load= ! awk -l loads a library
    --source=
";

const RG: &str = "
    -n --line-number
    -N --no-line-number
    -i --ignore-case
    -S --smart-case
    -s --case-sensitive
    -w --word-regexp
    -x --line-regexp
    -v --invert-match
    -l --files-with-matches
    --files-without-match
    -c --count
    --count-matches
    -o --only-matching
    -F --fixed-strings
    -e= --regexp=
    -f= --file=
    -g= --glob=
    --iglob=
    -t= --type=
    -T= --type-not=
    --type-list
    --files
    --hidden
    --no-ignore
    --no-ignore-vcs
    -u --unrestricted
    -A= --after-context=
    -B= --before-context=
    -C= --context=
    --json
    -j= --threads=
    --color=
    --colors=
    --vimgrep
    --heading
    --no-heading
    -H --with-filename
    -I --no-filename
    -M= --max-columns=
    -m= --max-count=
    -d= --max-depth=
    --sort=
    --sortr=
    --stats
    -L --follow
    -p --pretty
    --column
    -U --multiline
    --multiline-dotall
    -0 --null
    --trim
    -r= --replace=
    --passthru
    --no-messages
    -P --pcre2
    -a --text
    -q --quiet
    --debug
    --pre= ! rg --pre runs a program on every file
    --hostname-bin= ! rg --hostname-bin runs a program
    -z --search-zip ! rg -z runs decompression programs
";

const FD: &str = "
    -H --hidden
    -I --no-ignore
    -u --unrestricted
    -s --case-sensitive
    -i --ignore-case
    -g --glob
    --regex
    -F --fixed-strings
    -a --absolute-path
    -l --list-details
    -L --follow
    -p --full-path
    -0 --print0
    -d= --max-depth=
    --min-depth=
    --exact-depth=
    -t= --type=
    -e= --extension=
    -E= --exclude=
    -S= --size=
    --changed-within=
    --changed-before=
    -o= --owner=
    -c= --color=
    -j= --threads=
    --max-results=
    -1
    -q --quiet
    --show-errors
    --strip-cwd-prefix
    -x= --exec= ! fd -x runs a program for every file
    -X= --exec-batch= ! fd -X runs a program
";

/// Options git's log, show, diff and their kin read the same way (revisions, then diffs).
const GIT_DIFF: &str = "
    -p -u --patch
    -s --no-patch
    -U= --unified=
    --raw
    --patch-with-raw
    --patch-with-stat
    --stat[=]
    --stat-width=
    --stat-name-width=
    --stat-graph-width=
    --stat-count=
    --remerge-diff
    -I= --ignore-matching-lines=
    --numstat
    --shortstat
    --dirstat[=]
    --summary
    --name-only
    --name-status
    --compact-summary
    --color[=]
    --no-color
    --color-words[=]
    --color-moved[=]
    --word-diff[=]
    --word-diff-regex=
    -z
    --abbrev[=]
    --no-abbrev
    --full-index
    --binary
    -M[=] --find-renames[=]
    --no-renames
    -C[=] --find-copies[=]
    --find-copies-harder
    -B[=] --break-rewrites[=]
    -D --irreversible-delete
    -l=
    --diff-filter=
    -S=
    -G=
    --pickaxe-all
    --pickaxe-regex
    -R
    --relative[=]
    --no-relative
    -a --text
    -w --ignore-all-space
    -b --ignore-space-change
    --ignore-space-at-eol
    --ignore-blank-lines
    --ignore-cr-at-eol
    -W --function-context
    --exit-code
    --quiet
    --check
    --no-ext-diff
    --no-textconv
    --ignore-submodules[=]
    --submodule[=]
    --src-prefix=
    --dst-prefix=
    --no-prefix
    --default-prefix
    --line-prefix=
    --minimal
    --patience
    --histogram
    --diff-algorithm=
    --indent-heuristic
    --no-indent-heuristic
    --cached --staged
    --merge-base
    --no-index
    --ext-diff ! git --ext-diff runs the configured diff program
    --textconv ! git --textconv runs the configured converters
    --output= ! git --output writes a file
";

/// Revision options of log, show, shortlog and rev-list.
const GIT_REVS: &str = "
    -n= --max-count=
    --skip=
    --since= --after=
    --until= --before=
    --author=
    --committer=
    --grep=
    --all-match
    --invert-grep
    -i --regexp-ignore-case
    -E --extended-regexp
    -F --fixed-strings
    -P --perl-regexp
    --merges
    --no-merges
    --min-parents=
    --max-parents=
    --first-parent
    --not
    --all
    --branches[=]
    --tags[=]
    --remotes[=]
    --glob=
    --exclude=
    --reflog
    --cherry-mark
    --cherry-pick
    --left-only
    --right-only
    --cherry
    -g --walk-reflogs
    --merge
    --boundary
    --simplify-by-decoration
    --full-history
    --dense
    --sparse
    --simplify-merges
    --ancestry-path[=]
    --date-order
    --author-date-order
    --topo-order
    --reverse
    --no-walk[=]
    --do-walk
    --pretty[=]
    --format=
    --oneline
    --encoding=
    --expand-tabs[=]
    --no-expand-tabs
    --notes[=]
    --no-notes
    --relative-date
    --date=
    --parents
    --children
    --left-right
    --graph
    --decorate[=]
    --no-decorate
    --decorate-refs=
    --decorate-refs-exclude=
    --clear-decorations
    --source
    --use-mailmap --mailmap
    --no-mailmap
    --full-diff
    --log-size
    --abbrev-commit
    --no-abbrev-commit
    --follow
    -L=
    -m
    -c
    --cc
    --dd
    --diff-merges=
    --no-diff-merges
    --combined-all-paths
    -t
    --count
    --objects
    --objects-edge
    --in-commit-order
    --show-signature ! git --show-signature runs gpg
";

const GIT_SHORTLOG: &str = "
    -s --summary
    -n --numbered
    -e --email
    --committer
    --group=
";

const GIT_STATUS: &str = "
    -s --short
    -b --branch
    --show-stash
    --porcelain[=]
    --long
    -v --verbose
    -u[=] --untracked-files[=]
    --ignored[=]
    --ignore-submodules[=]
    -z
    --column[=]
    --no-column
    --ahead-behind
    --no-ahead-behind
    --renames
    --no-renames
    --find-renames[=]
";

const GIT_BRANCH: &str = "
    -a --all
    -r --remotes
    -v --verbose
    -q --quiet
    -l --list
    --contains[=]
    --no-contains[=]
    --merged[=]
    --no-merged[=]
    --points-at=
    --sort=
    --format=
    --color[=]
    --no-color
    --column[=]
    --no-column
    --abbrev[=]
    --no-abbrev
    -i --ignore-case
    --omit-empty
    --show-current
    -d --delete ! git branch -d deletes a branch
    -D ! git branch -D deletes a branch
    -m --move ! git branch -m renames a branch
    -M ! git branch -M renames a branch
    -c --copy ! git branch -c copies a branch
    -C ! git branch -C copies a branch
    -f --force ! git branch -f moves a branch
    --edit-description ! git branch --edit-description runs an editor
    -u= --set-upstream-to= ! git branch -u changes configuration
    --unset-upstream ! git branch --unset-upstream changes configuration
    -t[=] --track[=] ! git branch --track changes configuration
";

const GIT_TAG: &str = "
    -l --list
    -n[=]
    --sort=
    --contains[=]
    --no-contains[=]
    --merged[=]
    --no-merged[=]
    --points-at=
    --format=
    --color[=]
    --column[=]
    --no-column
    -i --ignore-case
    --omit-empty
    -d --delete ! git tag -d deletes a tag
    -f --force ! git tag -f moves a tag
    -v --verify ! git tag -v runs gpg
    -s --sign ! git tag -s runs gpg
    -u= --local-user= ! git tag -u runs gpg
    -e --edit ! git tag -e runs an editor
";

const GIT_GREP: &str = "
    --cached
    --no-index
    --untracked
    --exclude-standard
    --no-exclude-standard
    --recurse-submodules
    -v --invert-match
    -i --ignore-case
    -w --word-regexp
    -x --line-regexp
    -a --text
    -I
    -r --recursive
    --no-recursive
    --max-depth=
    -E --extended-regexp
    -G --basic-regexp
    -F --fixed-strings
    -P --perl-regexp
    -n --line-number
    --column
    --full-name
    -l --files-with-matches --name-only
    -L --files-without-match
    -z --null
    -o --only-matching
    -c --count
    --color[=]
    --no-color
    --break
    --heading
    -C= --context=
    -A= --after-context=
    -B= --before-context=
    --threads=
    -p --show-function
    -W --function-context
    -e=
    -f=
    --and
    --or
    --not
    --all-match
    -q --quiet
    -m= --max-count=
    -h
    -H
    --textconv ! git grep --textconv runs the configured converters
    -O[=] --open-files-in-pager[=] ! git grep -O runs a pager
    --ext-grep ! git grep --ext-grep runs a program
";

const GIT_BLAME: &str = "
    -L=
    -w
    -M[=]
    -C[=]
    -p --porcelain
    --line-porcelain
    -e --show-email
    -s
    -l
    -t
    -b
    -c
    -f --show-name
    -n --show-number
    --root
    --show-stats
    --date=
    --since=
    --abbrev=
    --incremental
    --color-lines
    --color-by-age
    --first-parent
    --reverse=
    --ignore-rev=
    --ignore-revs-file=
";

const GIT_LS_FILES: &str = "
    -c --cached
    -d --deleted
    -m --modified
    -o --others
    -i --ignored
    -s --stage
    -u --unmerged
    -k --killed
    -z
    -t
    -v
    -f
    --directory
    --no-empty-directory
    --eol
    --deduplicate
    -x= --exclude=
    -X= --exclude-from=
    --exclude-per-directory=
    --exclude-standard
    --error-unmatch
    --full-name
    --recurse-submodules
    --abbrev[=]
    --format=
    --debug
    --sparse
";

const GIT_FETCH: &str = "
    --all
    -a --append
    --atomic
    --depth=
    --deepen=
    --shallow-since=
    --shallow-exclude=
    --unshallow
    --update-shallow
    --dry-run
    -f --force
    -k --keep
    --multiple
    --auto-maintenance
    --no-auto-maintenance
    --auto-gc
    --no-auto-gc
    --write-commit-graph
    --no-write-commit-graph
    --prefetch
    -p --prune
    -P --prune-tags
    -n --no-tags
    -t --tags
    --refetch
    --recurse-submodules[=]
    --no-recurse-submodules
    -j= --jobs=
    --set-upstream
    --progress
    --no-progress
    -o= --server-option=
    --show-forced-updates
    --no-show-forced-updates
    -4 --ipv4
    -6 --ipv6
    -q --quiet
    -v --verbose
    --upload-pack= ! git fetch --upload-pack runs a program
    --negotiation-tip=
";

const GIT_REV_PARSE: &str = "
    --show-toplevel
    --show-prefix
    --show-cdup
    --show-superproject-working-tree
    --git-dir
    --absolute-git-dir
    --git-common-dir
    --is-inside-work-tree
    --is-inside-git-dir
    --is-bare-repository
    --is-shallow-repository
    --abbrev-ref[=]
    --short[=]
    --symbolic
    --symbolic-full-name
    --verify
    -q --quiet
    --all
    --branches[=]
    --tags[=]
    --remotes[=]
    --default=
    --sq
    --path-format=
    --git-path=
    --show-object-format[=]
    --local-env-vars
";

const GIT_SHOW_REF: &str = "
    --head
    --heads --branches
    --tags
    -d --dereference
    -s[=] --hash[=]
    --abbrev[=]
    --verify
    --exists
    -q --quiet
";

const GIT_DESCRIBE: &str = "
    --all
    --tags
    --contains
    --abbrev=
    --candidates=
    --exact-match
    --debug
    --long
    --match=
    --exclude=
    --always
    --first-parent
    --dirty[=]
    --broken[=]
";

const GIT_LS_TREE: &str = "
    -d
    -r
    -t
    -l --long
    -z
    --name-only --name-status
    --object-only
    --full-name
    --full-tree
    --abbrev[=]
    --format=
";

const GIT_CAT_FILE: &str = "
    -t
    -s
    -e
    -p
    --textconv ! git cat-file --textconv runs the configured converters
    --filters ! git cat-file --filters runs the configured filters
    --batch[=]
    --batch-check[=]
    --batch-command[=]
    --batch-all-objects
    --buffer
    --unordered
    --follow-symlinks
    -Z
    --use-mailmap --mailmap
    --no-mailmap
";

/// How each table is built, by program name (or `git <subcommand>`).
type Build = fn() -> Table;

/// Tables that share parts are built from their joined text, which lives as long as the process
/// (leaked once per table built: the same as a static).
fn joined(parts: &[&'static str]) -> &'static str {
    Box::leak(parts.concat().into_boxed_str())
}

fn git(spec: &'static str) -> Table {
    Table::parse(spec, false)
}

fn git_log() -> Table {
    git(joined(&[GIT_REVS, GIT_DIFF])).with_numbers()
}

/// The builders, by program name (or `git <subcommand>`).
const BUILDS: &[(&str, Build)] = &[
    ("sort", || Table::parse(SORT, true)),
    ("uniq", || Table::parse(UNIQ, true).with_numbers()),
    ("sed", || Table::parse(SED, true)),
    ("grep", || Table::parse(GREP, true).with_numbers()),
    ("egrep", || Table::parse(GREP, true).with_numbers()),
    ("fgrep", || Table::parse(GREP, true).with_numbers()),
    ("tar", || Table::parse(TAR, false)),
    ("curl", || Table::parse(CURL, false)),
    ("wget", || Table::parse(WGET, false)),
    ("awk", || Table::parse(AWK, false).stopping_at_operand()),
    ("mawk", || Table::parse(AWK, false).stopping_at_operand()),
    ("gawk", || Table::parse(AWK, false).stopping_at_operand()),
    ("nawk", || Table::parse(AWK, false).stopping_at_operand()),
    ("rg", || Table::parse(RG, false)),
    ("fd", || Table::parse(FD, false)),
    ("fdfind", || Table::parse(FD, false)),
    ("git log", git_log),
    ("git show", git_log),
    ("git whatchanged", git_log),
    ("git rev-list", git_log),
    ("git diff", || git(GIT_DIFF)),
    ("git shortlog", || {
        git(joined(&[GIT_REVS, GIT_SHORTLOG])).with_numbers()
    }),
    ("git status", || git(GIT_STATUS)),
    ("git branch", || git(GIT_BRANCH)),
    ("git tag", || git(GIT_TAG)),
    ("git grep", || git(GIT_GREP).with_numbers()),
    ("git blame", || git(GIT_BLAME)),
    ("git ls-files", || git(GIT_LS_FILES)),
    ("git fetch", || git(GIT_FETCH)),
    ("git rev-parse", || git(GIT_REV_PARSE)),
    ("git show-ref", || git(GIT_SHOW_REF)),
    ("git describe", || git(GIT_DESCRIBE)),
    ("git ls-tree", || git(GIT_LS_TREE)),
    ("git cat-file", || git(GIT_CAT_FILE)),
];

/// The tables, by name, each parsed at its first use: a hook process reads one command and
/// needs one or two tables, not all thirty-four.
static TABLES: LazyLock<HashMap<&'static str, (Build, OnceLock<Table>)>> = LazyLock::new(|| {
    BUILDS
        .iter()
        .map(|&(name, build)| (name, (build, OnceLock::new())))
        .collect()
});

/// The table of `program` (a base name, or `git <subcommand>`).
pub(super) fn table(program: &str) -> Option<&'static Table> {
    let (build, table) = TABLES.get(program)?;
    Some(table.get_or_init(build))
}

/// The programs and git subcommands with a table, for the rules chapter's list and the tests.
pub fn known() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = TABLES.keys().copied().collect();
    names.sort_unstable();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The long options an installed GNU program's `--help` names.
    fn help_longs(program: &str) -> Option<Vec<String>> {
        let out = std::process::Command::new(program)
            .arg("--help")
            .env("LC_ALL", "C")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut names: Vec<String> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter_map(|w| w.strip_prefix("--"))
            .filter(|w| w.len() > 1 && w.starts_with(|c: char| c.is_ascii_alphabetic()))
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        Some(names)
    }

    #[test]
    fn complete_tables_hold_every_long_option_the_installed_program_has() {
        // A table that resolves abbreviations must know every option: one it lacked could be
        // what an abbreviation really names.
        let mut checked = 0;
        for program in ["sort", "uniq", "sed", "grep"] {
            let Some(names) = help_longs(program) else {
                continue;
            };
            let table = table(program).unwrap();
            let known: Vec<&str> = table.long_names().collect();
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !known.contains(&n.as_str()))
                .collect();
            assert!(missing.is_empty(), "{program} --help names {missing:?}");
            checked += 1;
        }
        assert!(
            checked > 0 || std::env::var_os("CI").is_none(),
            "no GNU program to check"
        );
    }

    #[test]
    fn every_table_parses() {
        assert!(known().len() > 20);
        for name in known() {
            assert!(table(name).is_some());
        }
    }
}

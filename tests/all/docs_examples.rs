//! The README and the book are tested: every command they show runs against the built binary,
//! its output checked where the page shows output, and every relative link (and its `#anchor`)
//! leads somewhere.
//!
//! A page's fenced blocks are read with pulldown-cmark. The info string's first word is the
//! language; the words after it are attributes:
//! - ` ```sh `: a script, run with `bash -e` (its output is not checked).
//! - ` ```console `: `$ command` lines (`> ` continues one), each followed by the output it must
//!   print, stdout and stderr together, matched by snapbox (`...` is any lines, `[..]` any text
//!   in a line). A `? N` line after a command is the exit status it must end with (else 0).
//! - `no-run="why"`: shown, not run; only for what needs root, the network, an account or is
//!   this very check. At most one command in ten may be so.
//! - `run-by="module::test"`: another test runs it (that test must exist).
//! - `file=NAME` on any other block: written into the sandbox's project before later blocks run.
//!
//! A page runs in a sandbox of its own: a fresh home and a fresh git project as the working
//! directory, the built `approval-host` first on PATH, then the agent CLIs and MCP servers the
//! set-up installed. Its blocks run in order in that sandbox, so a page can build on what it showed;
//! anything a block leaves running in the background is stopped when the page ends. A rule id a
//! console block shows (12 hex digits, fresh on every run) stands for the one the command
//! printed there, in the commands and output that follow.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// The languages whose blocks are commands.
const COMMAND_LANGS: [&str; 2] = ["sh", "console"];

/// The attributes a block may carry.
const ATTRS: [&str; 3] = ["no-run", "run-by", "file"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every page of the README and the book, relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned(), "CHANGELOG.md".to_owned()];
    for dir in ["docs", "docs/reference"] {
        let mut found: Vec<String> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        found.sort();
        pages.extend(found);
    }
    pages
}

#[derive(Debug)]
pub(crate) struct Block {
    line: usize,
    lang: String,
    pub(crate) attrs: BTreeMap<String, String>,
    pub(crate) text: String,
}

impl Block {
    fn is_command(&self) -> bool {
        COMMAND_LANGS.contains(&self.lang.as_str())
    }

    /// The commands it shows: a console block's `$` lines, a script's lines that are not
    /// comments or blank (a line ending in `\` joins the next).
    fn commands(&self) -> Vec<String> {
        if self.lang == "console" {
            return console_steps(&self.text)
                .into_iter()
                .map(|s| s.command)
                .collect();
        }
        let mut out = Vec::new();
        let mut joined = String::new();
        for line in self.text.lines() {
            let t = line.trim();
            if joined.is_empty() && (t.is_empty() || t.starts_with('#')) {
                continue;
            }
            joined.push_str(t.trim_end_matches('\\'));
            if !t.ends_with('\\') {
                out.push(std::mem::take(&mut joined));
            }
        }
        out
    }
}

/// `lang key="value" key=value key` → the language and the attributes.
fn parse_info(info: &str) -> (String, BTreeMap<String, String>) {
    let info = info.trim();
    let (lang, mut rest) = info.split_once(' ').unwrap_or((info, ""));
    let mut attrs = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let key_end = rest.find(['=', ' ']).unwrap_or(rest.len());
        let key = rest[..key_end].to_owned();
        rest = &rest[key_end..];
        let value = if let Some(after) = rest.strip_prefix("=\"") {
            let end = after.find('"').expect("an attribute's quote is closed");
            let v = after[..end].to_owned();
            rest = &after[end + 1..];
            v
        } else if let Some(after) = rest.strip_prefix('=') {
            let end = after.find(' ').unwrap_or(after.len());
            let v = after[..end].to_owned();
            rest = &after[end..];
            v
        } else {
            String::new()
        };
        attrs.insert(key, value);
    }
    (lang.to_owned(), attrs)
}

/// A page's fenced blocks, its relative links and its headings' anchors.
pub(crate) struct Page {
    pub(crate) blocks: Vec<Block>,
    links: Vec<(usize, String)>,
    anchors: Vec<String>,
}

pub(crate) fn read_page(text: &str) -> Page {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut page = Page {
        blocks: Vec::new(),
        links: Vec::new(),
        anchors: Vec::new(),
    };
    let mut block: Option<Block> = None;
    let mut heading: Option<String> = None;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let (lang, attrs) = parse_info(&info);
                block = Some(Block {
                    line: line_of(range.start),
                    lang,
                    attrs,
                    text: String::new(),
                });
            }
            Event::End(TagEnd::CodeBlock) => page.blocks.extend(block.take()),
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let slug = github_slug(&heading.take().unwrap_or_default());
                // GitHub numbers a repeated heading's anchor: `x`, `x-1`, `x-2`.
                let n = seen.entry(slug.clone()).or_insert(0);
                page.anchors.push(if *n == 0 {
                    slug.clone()
                } else {
                    format!("{slug}-{n}")
                });
                *n += 1;
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(b) = block.as_mut() {
                    b.text.push_str(&t);
                } else if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links
                    .push((line_of(range.start), dest_url.to_string()));
            }
            _ => {}
        }
    }
    page
}

/// The anchor GitHub gives a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as hyphens.
fn github_slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

pub(crate) struct Step {
    pub(crate) command: String,
    status: i32,
    pub(crate) expected: String,
}

pub(crate) fn console_steps(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in text.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: cmd.to_owned(),
                status: 0,
                expected: String::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            if let Some(more) = line.strip_prefix("> ") {
                step.command.push('\n');
                step.command.push_str(more);
            } else if let Some(code) = line.strip_prefix("? ")
                && step.expected.is_empty()
            {
                step.status = code.trim().parse().expect("`? N` is an exit status");
            } else {
                step.expected.push_str(line);
                step.expected.push('\n');
            }
        }
    }
    steps
}

/// The programs of the agent CLIs and MCP servers the set-up installed (`.ci/agent-clis`,
/// `.ci/mcp-servers`), which a page names as a reader who installed them would.
fn installed_tools() -> Vec<PathBuf> {
    let target = repo().join("target");
    let place = |var: &str, default: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| target.join(default))
    };
    let mut dirs = Vec::new();
    for root in [
        place("APPROVAL_HOST_AGENT_CLIS", "agent-clis"),
        place("APPROVAL_HOST_MCP_SERVERS", "mcp-servers"),
    ] {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .map(|e| e.unwrap().path().join("node_modules/.bin"))
            .filter(|p| p.is_dir())
            .collect();
        found.sort();
        dirs.extend(found);
    }
    dirs
}

/// One page's sandbox: a home and a git project, and what was left running.
struct Sandbox {
    _dir: tempfile::TempDir,
    /// What the page's test sets up for it (its database).
    env: Vec<(String, String)>,
    home: PathBuf,
    project: PathBuf,
    /// The built binary, the installed tools, then the caller's PATH.
    path: std::ffi::OsString,
    groups: Vec<u32>,
}

impl Sandbox {
    fn new(env: &[(&str, String)]) -> Sandbox {
        let (dir, home, project) = crate::support::home_and_git_project();
        let bin = Path::new(env!("CARGO_BIN_EXE_approval-host"))
            .parent()
            .unwrap()
            .to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin)
                .chain(installed_tools())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
        )
        .unwrap();
        Sandbox {
            path,
            _dir: dir,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            home,
            project,
            groups: Vec::new(),
        }
    }

    /// `script` in bash, stdout and stderr into one file (a pipe would wait for whatever the
    /// script leaves running in the background), in a process group of its own.
    fn run(&mut self, script: &str) -> (i32, String) {
        let out_path = self.home.join(".docs-example-output");
        let out = std::fs::File::create(&out_path).unwrap();
        let mut command = Command::new("bash");
        command
            .args(["-e", "-o", "pipefail", "-c", script])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .env("USER", "me")
            .env("LOGNAME", "me")
            .env("RUST_BACKTRACE", "0")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.project);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().unwrap();
        self.groups.push(child.id());
        let status = child.wait().unwrap();
        let output = std::fs::read_to_string(&out_path).unwrap();
        (status.code().unwrap_or(-1), output)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for group in &self.groups {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory involved.
            unsafe { libc::kill(-(*group as i32), libc::SIGKILL) };
        }
    }
}

/// Runs one page's blocks; returns every failure, each naming its page and line.
fn run_page(name: &str, env: &[(&str, String)]) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(name)).unwrap();
    let page = read_page(&text);
    let mut failures = Vec::new();
    let mut sandbox = Sandbox::new(env);
    let mut ids = Ids::default();
    for block in &page.blocks {
        let at = format!("{name}:{}", block.line);
        if let Some(file) = block.attrs.get("file") {
            let path = sandbox.project.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, &block.text).unwrap();
            continue;
        }
        if !block.is_command()
            || block.attrs.contains_key("no-run")
            || block.attrs.contains_key("run-by")
        {
            continue;
        }
        if block.lang == "sh" {
            let (status, output) = sandbox.run(&block.text);
            if status != 0 {
                failures.push(format!("{at}: the block exited {status}:\n{output}"));
            }
            continue;
        }
        for step in console_steps(&block.text) {
            let command = ids.apply(&step.command);
            let expected = ids.apply(&step.expected);
            let (status, output) = sandbox.run(&command);
            ids.learn(&expected, &output);
            let expected = ids.apply(&expected);
            if status != step.status {
                failures.push(format!(
                    "{at}: `{}` exited {status}, not {}:\n{output}",
                    step.command, step.status
                ));
                continue;
            }
            // Paths are not normalised: that would turn the `\` of a JSON escape into `/`.
            let checked = snapbox::Assert::new().normalize_paths(false).try_eq(
                None,
                snapbox::Data::text(output.clone()),
                snapbox::Data::text(expected),
            );
            if checked.is_err() {
                failures.push(format!(
                    "{at}: `{}` printed\n{output}\nwhere the page shows\n{}",
                    step.command, step.expected
                ));
            }
        }
    }
    failures
}

/// The rule ids a page shows, each mapped to the one its command printed in this run.
#[derive(Default)]
struct Ids(BTreeMap<String, String>);

impl Ids {
    fn id() -> &'static regex::Regex {
        static ID: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        ID.get_or_init(|| regex::Regex::new(r"\b[0-9a-f]{12}\b").unwrap())
    }

    fn apply(&self, text: &str) -> String {
        Self::id()
            .replace_all(text, |c: &regex::Captures| {
                self.0
                    .get(&c[0])
                    .cloned()
                    .unwrap_or_else(|| c[0].to_owned())
            })
            .into_owned()
    }

    /// Each expected line that shows an id not yet known is read as a pattern (the id a
    /// capture, `[..]` any text) against the output's lines.
    fn learn(&mut self, expected: &str, output: &str) {
        for line in expected.lines() {
            let shown: Vec<String> = Self::id()
                .find_iter(line)
                .map(|m| m.as_str().to_owned())
                .collect();
            let known = |id: &String| self.0.values().any(|v| v == id);
            if shown.iter().all(known) {
                continue;
            }
            let mut pattern = String::from("^");
            let mut rest = line;
            while let Some(m) = Self::id().find(rest) {
                pattern.push_str(&regex::escape(&rest[..m.start()]).replace(r"\[\.\.\]", ".*?"));
                pattern.push_str("([0-9a-f]{12})");
                rest = &rest[m.end()..];
            }
            pattern.push_str(&regex::escape(rest).replace(r"\[\.\.\]", ".*?"));
            pattern.push('$');
            let re = regex::Regex::new(&pattern).unwrap();
            if let Some(c) = output.lines().find_map(|l| re.captures(l)) {
                for (i, id) in shown.iter().enumerate() {
                    if !self.0.values().any(|v| v == id) {
                        self.0.insert(id.clone(), c[i + 1].to_owned());
                    }
                }
            }
        }
    }
}

/// The PostgreSQL chapter's database: a fresh schema of the throwaway cluster `.ci/with-postgres`
/// starts, as `STORE` (what the chapter's first, unrun, block has the reader set).
fn postgres_store() -> Vec<(&'static str, String)> {
    vec![("STORE", crate::support::pg::fresh_schema())]
}

macro_rules! page_tests {
    ($($test:ident => $page:literal $(with $env:path)?,)*) => {
        $(
            #[test]
            fn $test() {
                #[allow(unused_mut)]
                let mut env: Vec<(&str, String)> = Vec::new();
                $(env.extend($env());)?
                let failures = run_page($page, &env);
                assert!(failures.is_empty(), "{}", failures.join("\n\n"));
            }
        )*

        /// Every page has its test above, so a new chapter cannot go untested.
        #[test]
        fn every_page_of_the_readme_and_the_book_has_its_test() {
            let listed: Vec<&str> = vec![$($page),*];
            let missing: Vec<String> =
                pages().into_iter().filter(|p| !listed.contains(&p.as_str())).collect();
            assert!(missing.is_empty(), "pages with no test in docs_examples.rs: {missing:?}");
        }
    };
}

page_tests! {
    the_readme_s_commands_run_as_shown => "README.md",
    the_changelog_s_commands_run_as_shown => "CHANGELOG.md",
    the_book_s_index_commands_run_as_shown => "docs/README.md",
    the_acp_chapter_s_commands_run_as_shown => "docs/acp.md",
    the_architecture_chapter_s_commands_run_as_shown => "docs/architecture.md",
    the_askers_chapter_s_commands_run_as_shown => "docs/askers.md",
    the_audit_chapter_s_commands_run_as_shown => "docs/audit.md",
    the_benchmarks_chapter_s_commands_run_as_shown => "docs/benchmarks.md",
    the_changing_policy_chapter_s_commands_run_as_shown => "docs/changing-policy.md",
    the_claude_code_chapter_s_commands_run_as_shown => "docs/claude-code.md",
    the_other_clis_chapter_s_commands_run_as_shown => "docs/codex-gemini-copilot.md",
    the_command_line_chapter_s_commands_run_as_shown => "docs/command-line.md",
    the_dependencies_chapter_s_commands_run_as_shown => "docs/dependencies.md",
    the_how_it_decides_chapter_s_commands_run_as_shown => "docs/how-it-decides.md",
    the_mcp_gateway_chapter_s_commands_run_as_shown => "docs/mcp-gateway.md",
    the_operating_chapter_s_commands_run_as_shown => "docs/operating.md",
    the_plugin_authors_guide_s_commands_run_as_shown => "docs/plugin-authors.md",
    the_plugins_chapter_s_commands_run_as_shown => "docs/plugins.md",
    the_postgres_chapter_s_commands_run_as_shown => "docs/postgres.md" with postgres_store,
    the_rules_chapter_s_commands_run_as_shown => "docs/rules.md",
    the_security_model_chapter_s_commands_run_as_shown => "docs/security-model.md",
    the_serve_chapter_s_commands_run_as_shown => "docs/serve.md",
    the_cli_reference_s_commands_run_as_shown => "docs/reference/cli.md",
    the_deployment_reference_s_commands_run_as_shown => "docs/reference/deployment.md",
}

/// Every command block is run here, run by a named test that exists, or says why it is not run;
/// no more than one command in ten is not run; attributes are known ones.
#[test]
fn every_command_in_the_readme_and_the_book_is_run_or_says_why_not() {
    let mut problems = Vec::new();
    let (mut run, mut run_by, mut not_run) = (0usize, 0usize, Vec::new());
    for name in pages() {
        let text = std::fs::read_to_string(repo().join(&name)).unwrap();
        let blocks = read_page(&text).blocks;
        // A fence CommonMark does not read as one (a backtick in its info string) would hide its
        // block, and everything after it, from these checks.
        let fences = text
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .count();
        if fences != 2 * blocks.len() {
            problems.push(format!(
                "{name}: {fences} fence lines, but {} fenced blocks read (a backtick in an info \
                 string?)",
                blocks.len()
            ));
        }
        for block in blocks {
            let at = format!("{name}:{}", block.line);
            for key in block.attrs.keys() {
                if !ATTRS.contains(&key.as_str()) {
                    problems.push(format!(
                        "{at}: unknown attribute `{key}` (known: {ATTRS:?})"
                    ));
                }
            }
            if !block.is_command() {
                // A command shown as plain text would go unrun: it belongs in a console block.
                if block.text.lines().any(|l| l.starts_with("$ ")) {
                    problems.push(format!(
                        "{at}: a `{}` block shows a command (`$ `): make it a console block",
                        block.lang
                    ));
                }
                continue;
            }
            let commands = block.commands().len();
            if commands == 0 {
                problems.push(format!("{at}: a command block with no command"));
            }
            if let Some(why) = block.attrs.get("no-run") {
                if why.trim().is_empty() {
                    problems.push(format!("{at}: `no-run` must say why"));
                }
                not_run.push((at, commands, why.clone()));
                continue;
            }
            if let Some(test) = block.attrs.get("run-by") {
                let (module, function) = test.split_once("::").unwrap_or(("", test));
                let source = std::fs::read_to_string(repo().join(format!("tests/all/{module}.rs")))
                    .unwrap_or_default();
                if !source.contains(&format!("fn {function}(")) {
                    problems.push(format!("{at}: run-by names no test: {test}"));
                }
                run_by += commands;
                continue;
            }
            run += commands;
        }
    }
    let not_run_count: usize = not_run.iter().map(|(_, n, _)| n).sum();
    let total = run + run_by + not_run_count;
    let mut summary = String::new();
    writeln!(
        summary,
        "{total} commands: {run} run here, {run_by} run by other tests, {not_run_count} not run"
    )
    .unwrap();
    for (at, n, why) in &not_run {
        writeln!(summary, "  not run: {at}: {n} ({why})").unwrap();
    }
    eprint!("{summary}");
    if not_run_count * 10 > total {
        problems.push(format!(
            "more than one command in ten is not run:\n{summary}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every relative link in the README and the book leads to a file that exists, and its
/// `#anchor` to a heading there.
#[test]
fn every_link_in_the_readme_and_the_book_leads_somewhere() {
    let mut broken = Vec::new();
    let mut anchors_of: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for name in pages() {
        let path = repo().join(&name);
        let page = read_page(&std::fs::read_to_string(&path).unwrap());
        for (line, url) in &page.links {
            if url.contains("://") || url.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = url.split_once('#').unwrap_or((url, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{name}:{line}: {url}: no such file"));
                continue;
            }
            if anchor.is_empty() || target.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let anchors = anchors_of
                .entry(target.clone())
                .or_insert_with(|| read_page(&std::fs::read_to_string(&target).unwrap()).anchors);
            if !anchors.iter().any(|a| a == anchor) {
                broken.push(format!(
                    "{name}:{line}: {url}: no heading with that anchor (it has {})",
                    anchors.join(" ")
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn an_example_s_info_string_reads_as_its_language_and_attributes() {
    let (lang, attrs) = parse_info(r#"sh no-run="needs root: apt" file=a.toml flag"#);
    assert_eq!(lang, "sh");
    assert_eq!(attrs["no-run"], "needs root: apt");
    assert_eq!(attrs["file"], "a.toml");
    assert_eq!(attrs["flag"], "");
    let steps = console_steps("$ a\none\n$ b \\\n> c\n? 2\ntwo\n");
    assert_eq!(steps.len(), 2);
    assert_eq!(
        (steps[0].command.as_str(), steps[0].expected.as_str()),
        ("a", "one\n")
    );
    assert_eq!(steps[1].command, "b \\\nc");
    assert_eq!((steps[1].status, steps[1].expected.as_str()), (2, "two\n"));
    assert_eq!(github_slug("Codex (0.169.0)"), "codex-01690");
    assert_eq!(
        github_slug("`approval-host serve`: the host"),
        "approval-host-serve-the-host"
    );
}

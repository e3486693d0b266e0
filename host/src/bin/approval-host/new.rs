//! `approval-host new`: a plugin skeleton in Rust, Python, JavaScript or C, with its build
//! script, the WIT contract, a sample deployment and sample conformance cases, so an author gets
//! from nothing to a loaded, tested plugin in a few commands.
//!
//! Skeletons target plugin API 0.2. A gate skeleton rejects the tools listed in its `deny_tools`
//! config, saying why, and passes everything else on (`next`); an answerer skeleton grants the
//! tools in `allow_tools` once and rejects the rest, as a terminal answerer must always decide.
//! Both refuse a config key they do not read (`validate-config`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::ValueEnum;

use crate::UsageError;

/// The plugin contract every skeleton builds against: the newest served version.
const WIT: &str = include_str!("../../../../wit/approval-0.2.wit");

/// A skeleton's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust with wit-bindgen, built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
    /// C with wasi-libc, `wit-bindgen c` and `approval-host componentize`.
    C,
}

/// What the plugin is in the waterfall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Decides some questions and passes the rest on.
    Gate,
    /// The terminal answerer: decides whatever reaches it.
    Answerer,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Gate => "gate",
            Role::Answerer => "answerer",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Role::Gate => "deny_tools",
            Role::Answerer => "allow_tools",
        }
    }
}

/// Why a name cannot be a plugin's.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "plugin name {name:?}: use lowercase letters, digits and '-', starting with a letter (at most 64)"
        ))
    }
}

/// The Rust skeleton's `src/lib.rs`.
const RUST_LIB: &str = r#"//! `{name}` ({role}, plugin API 0.2): {what}.

wit_bindgen::generate!({ path: "wit", world: "answerer" });

use approval::plugin::host;

struct Plugin;

/// The config keys this plugin reads. Any other is refused at load, so a typo cannot go unnoticed.
const KEYS: [&str; 1] = ["{key}"];

impl Guest for Plugin {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        match config.iter().find(|(k, _)| !KEYS.contains(&k.as_str())) {
            Some((k, _)) => Err(format!("unknown key \"{k}\": {name} reads only \"{key}\"")),
            None => Ok(()),
        }
    }

    fn decide(request: Request) -> Decision {
        let listed = host::config("{key}").unwrap_or_default();
        let hit = listed
            .split(',')
            .map(str::trim)
            .any(|tool| !tool.is_empty() && tool == request.tool_name);
        if hit { {rust_listed} } else { {rust_otherwise} }
    }
}

export!(Plugin);
"#;

/// The Python skeleton's `app.py`.
const PYTHON_APP: &str = r#""""{name} ({role}, plugin API 0.2): {what}."""

from typing import List, Tuple

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.imports import host
from wit_world.imports.types import Decision, Decision_AllowOnce, Decision_Next, Decision_Reject, Request

# The config keys this plugin reads. Any other is refused at load, so a typo cannot go unnoticed.
KEYS = ("{key}",)


class WitWorld(World):
    def validate_config(self, config: List[Tuple[str, str]]) -> None:
        for k, _ in config:
            if k not in KEYS:
                raise Err(f'unknown key "{k}": {name} reads only "{key}"')

    def decide(self, request: Request) -> Decision:
        listed = (host.config("{key}") or "").split(",")
        hit = any(t.strip() and t.strip() == request.tool_name for t in listed)
        return {python_listed} if hit else {python_otherwise}
"#;

/// The JavaScript skeleton.
const JS_SOURCE: &str = r#"// {name} ({role}, plugin API 0.2): {what}.
import { config } from 'approval:plugin/host@0.2.0';

// The config keys this plugin reads. Any other is refused at load, so a typo cannot go unnoticed.
const KEYS = ['{key}'];

export function validateConfig(entries) {
  for (const [k] of entries) {
    if (!KEYS.includes(k)) throw `unknown key "${k}": {name} reads only "{key}"`;
  }
}

export function decide(request) {
  const listed = (config('{key}') ?? '').split(',').map((t) => t.trim());
  const hit = listed.some((t) => t !== '' && t === request.toolName);
  return hit ? {js_listed} : {js_otherwise};
}
"#;

/// The C skeleton.
const C_SOURCE: &str = r#"/* {name} ({role}, plugin API 0.2): {what}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answerer.h"

/* The one config key this plugin reads. Any other is refused at load, so a typo cannot go
 * unnoticed. */
static const char KEY[] = "{key}";

bool exports_answerer_validate_config(answerer_list_tuple2_string_string_t *config,
                                      answerer_string_t *err) {
  bool ok = true;
  for (size_t i = 0; ok && i < config->len; i++) {
    answerer_string_t *k = &config->ptr[i].f0;
    if (k->len == strlen(KEY) && memcmp(k->ptr, KEY, k->len) == 0) continue;
    const char *format = "unknown key \"%.*s\": {name} reads only \"%s\"";
    int n = snprintf(NULL, 0, format, (int)k->len, (const char *)k->ptr, KEY);
    char *text = malloc((size_t)n + 1);
    snprintf(text, (size_t)n + 1, format, (int)k->len, (const char *)k->ptr, KEY);
    err->ptr = (uint8_t *)text;
    err->len = (size_t)n;
    ok = false;
  }
  answerer_list_tuple2_string_string_free(config);
  return ok;
}

/* Whether `tool` is one of the comma-separated, trimmed entries of `list`. */
static int listed(answerer_string_t *list, answerer_string_t *tool) {
  const char *p = (const char *)list->ptr, *end = p + list->len;
  while (p <= end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *a = p, *b = comma ? comma : end;
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    if (b > a && (size_t)(b - a) == tool->len && memcmp(a, tool->ptr, tool->len) == 0) return 1;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

/* Sets `ret` to a rejection carrying `reason` (copied: the host frees it after the call). */
static void reject(answerer_decision_t *ret, const char *reason) {
  ret->tag = APPROVAL_PLUGIN_TYPES_DECISION_REJECT;
  ret->val.reject.is_some = true;
  answerer_string_dup(&ret->val.reject.val, reason);
}

void exports_answerer_decide(answerer_request_t *request, answerer_decision_t *ret) {
  answerer_string_t key, value;
  int hit = 0;
  answerer_string_set(&key, KEY);
  if (approval_plugin_host_config(&key, &value)) {
    hit = listed(&value, &request->tool_name);
    answerer_string_free(&value);
  }
  answerer_request_free(request);
  if (hit) {
    {c_listed};
  } else {
    {c_otherwise};
  }
}
"#;

/// The files of a skeleton, relative to its directory.
pub fn files(name: &str, lang: Lang, role: Role) -> Vec<(PathBuf, String, bool)> {
    let snake = name.replace('-', "_");
    let key = role.key();
    let (listed, otherwise, sample_tool) = match role {
        Role::Gate => ("reject", "next", "bash"),
        Role::Answerer => ("allow-once", "reject", "read"),
    };
    // Each language's spelling of the two answers; the rejection's reason is the same in all.
    let reason = match role {
        Role::Gate => format!("this tool is listed in {key}"),
        Role::Answerer => format!("this tool is not listed in {key}"),
    };
    let rust_reject = format!("Decision::Reject(Some(\"{reason}\".to_owned()))");
    let python_reject = format!("Decision_Reject(\"{reason}\")");
    let js_reject = format!("{{ tag: 'reject', val: '{reason}' }}");
    let c_reject = format!("reject(ret, \"{reason}\")");
    let (rust, python, js, c) = match role {
        Role::Gate => (
            (rust_reject, "Decision::Next".to_owned()),
            (python_reject, "Decision_Next()".to_owned()),
            (js_reject, "{ tag: 'next' }".to_owned()),
            (
                c_reject,
                "ret->tag = APPROVAL_PLUGIN_TYPES_DECISION_NEXT".to_owned(),
            ),
        ),
        Role::Answerer => (
            ("Decision::AllowOnce".to_owned(), rust_reject),
            ("Decision_AllowOnce()".to_owned(), python_reject),
            ("{ tag: 'allow-once' }".to_owned(), js_reject),
            (
                "ret->tag = APPROVAL_PLUGIN_TYPES_DECISION_ALLOW_ONCE".to_owned(),
                c_reject,
            ),
        ),
    };
    let what = match role {
        Role::Gate => format!(
            "rejects the tools listed in its `{key}` config (comma-separated), saying why, and passes every other question on"
        ),
        Role::Answerer => format!(
            "grants one call of the tools listed in its `{key}` config (comma-separated) and rejects everything else, saying why"
        ),
    };
    let fill = |text: &str| {
        text.replace("{rust_listed}", &rust.0)
            .replace("{rust_otherwise}", &rust.1)
            .replace("{python_listed}", &python.0)
            .replace("{python_otherwise}", &python.1)
            .replace("{js_listed}", &js.0)
            .replace("{js_otherwise}", &js.1)
            .replace("{c_listed}", &c.0)
            .replace("{c_otherwise}", &c.1)
            .replace("{what}", &what)
            .replace("{name}", name)
            .replace("{snake}", &snake)
            .replace("{role}", role.as_str())
            .replace("{key}", key)
    };
    let deployment = fill(&format!(
        "# A deployment with this plugin alone; try it with\n\
         #   approval-host ask --config deployment.toml --session s1 --agent a1 --tool {sample_tool}\n\
         [approval]\npolicy = \"ask\"\n\n\
         [[plugin]]\nname = \"{{name}}\"\npath = \"{{name}}.wasm\"\nrole = \"{{role}}\"\n\
         timeout_ms = 1000\nmemory_mb = 64\n\n\
         [plugin.config]\n{{key}} = \"{sample_tool}\"\n"
    ));
    let other = if sample_tool == "bash" {
        "read"
    } else {
        "bash"
    };
    // The rejecting case pins the reason; the last case shows a misspelt key refused at load.
    let (listed_reason, other_reason) = match role {
        Role::Gate => (format!(", \"reason\": \"{reason}\""), String::new()),
        Role::Answerer => (String::new(), format!(", \"reason\": \"{reason}\"")),
    };
    let cases = fill(&format!(
        "{{\n  \"about\": \"What {{name}} must answer; run with: approval-host conform {{name}}.wasm --cases cases.json\",\n  \"cases\": [\n    \
         {{\"name\": \"a listed tool\", \"config\": {{\"{{key}}\": \"{sample_tool}\"}}, \"tool\": \"{sample_tool}\", \"expect\": \"{listed}\"{listed_reason}}},\n    \
         {{\"name\": \"another tool\", \"config\": {{\"{{key}}\": \"{sample_tool}\"}}, \"tool\": \"{other}\", \"expect\": \"{otherwise}\"{other_reason}}},\n    \
         {{\"name\": \"no config\", \"tool\": \"{sample_tool}\", \"expect\": \"{otherwise}\"}},\n    \
         {{\"name\": \"a misspelt key is refused at load\", \"config\": {{\"{{key}}s\": \"{sample_tool}\"}}, \"tool\": \"{sample_tool}\", \"expect\": \"refused\", \
         \"reason\": \"unknown key \\\"{{key}}s\\\": {{name}} reads only \\\"{{key}}\\\"\"}}\n  ]\n}}\n"
    ));
    let mut out = vec![
        (PathBuf::from("wit/approval.wit"), WIT.to_owned(), false),
        (PathBuf::from("deployment.toml"), deployment, false),
        (PathBuf::from("cases.json"), cases, false),
    ];
    let test_steps = fill(
        "# Then: approval-host check {name}.wasm\n\
         #       approval-host conform {name}.wasm --cases cases.json\n\
         #       approval-host ask --config deployment.toml --session s1 --agent a1 --tool bash\n",
    );
    match lang {
        Lang::Rust => {
            out.push((
                PathBuf::from("Cargo.toml"),
                fill(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
                     [lib]\ncrate-type = [\"cdylib\"]\n\n\
                     [dependencies]\nwit-bindgen = { version = \"0.63\", default-features = false, features = [\"macros\", \"realloc\"] }\n\n\
                     [profile.release]\nopt-level = \"s\"\nlto = true\ncodegen-units = 1\nstrip = true\npanic = \"abort\"\n\n\
                     # A workspace of its own, even inside another one.\n[workspace]\n",
                ),
                false,
            ));
            out.push((PathBuf::from("src/lib.rs"), fill(RUST_LIB), false));
            out.push((
                PathBuf::from("build.sh"),
                fill(&format!(
                    "#!/usr/bin/env bash\n# Builds {{name}}.wasm (needs: rustup target add wasm32-wasip2).\n{test_steps}\
                     set -euo pipefail\ncd \"$(dirname \"$0\")\"\n\
                     cargo build --release --target wasm32-wasip2\n\
                     cp \"${{CARGO_TARGET_DIR:-target}}/wasm32-wasip2/release/{{snake}}.wasm\" {{name}}.wasm\n"
                )),
                true,
            ));
        }
        Lang::Python => {
            out.push((PathBuf::from("app.py"), fill(PYTHON_APP), false));
            out.push((
                PathBuf::from("build.sh"),
                fill(&format!(
                    "#!/usr/bin/env bash\n# Builds {{name}}.wasm (needs: pip install componentize-py==0.25.1).\n{test_steps}\
                     set -euo pipefail\ncd \"$(dirname \"$0\")\"\n\
                     componentize-py -d wit -w answerer componentize app -o {{name}}.wasm\n"
                )),
                true,
            ));
        }
        Lang::Js => {
            out.push((PathBuf::from(format!("{name}.js")), fill(JS_SOURCE), false));
            out.push((
                PathBuf::from("package.json"),
                fill(
                    "{\n  \"name\": \"{name}\",\n  \"private\": true,\n  \"type\": \"module\",\n  \
                     \"devDependencies\": {\n    \"@bytecodealliance/componentize-js\": \"0.23.0\",\n    \
                     \"@bytecodealliance/preview2-shim\": \"0.25.0\"\n  }\n}\n",
                ),
                false,
            ));
            out.push((
                PathBuf::from("build.sh"),
                fill(&format!(
                    "#!/usr/bin/env bash\n# Builds {{name}}.wasm (needs: Node.js and npm).\n{test_steps}\
                     set -euo pipefail\ncd \"$(dirname \"$0\")\"\n\
                     [ -x node_modules/.bin/componentize-js ] || npm install --no-audit --no-fund\n\
                     # `-d http fetch-event`: a plugin serves no HTTP, so it does not import wasi:http.\n\
                     node_modules/.bin/componentize-js {{name}}.js --wit wit -n answerer -d http fetch-event -o {{name}}.wasm\n"
                )),
                true,
            ));
        }
        Lang::C => {
            out.push((PathBuf::from(format!("{snake}.c")), fill(C_SOURCE), false));
            out.push((
                PathBuf::from("build.sh"),
                fill(&format!(
                    "#!/usr/bin/env bash\n# Builds {{name}}.wasm (needs: Debian's clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc,\n\
                     # and cargo install wit-bindgen-cli --version 0.63.0).\n{test_steps}\
                     set -euo pipefail\ncd \"$(dirname \"$0\")\"\n\
                     wit-bindgen c wit --world answerer --out-dir bindings\n\
                     clang-19 --target=wasm32-wasi --sysroot=/usr -mexec-model=reactor -O2 -Wall -Wextra -Ibindings \\\n  \
                     -o {{name}}.core.wasm {{snake}}.c bindings/answerer.c bindings/answerer_component_type.o\n\
                     \"${{APPROVAL_HOST:-approval-host}}\" componentize {{name}}.core.wasm -o {{name}}.wasm\n"
                )),
                true,
            ));
        }
    }
    out
}

/// Writes a skeleton into `dir`, which must not exist yet; returns the files written.
pub fn write(dir: &Path, name: &str, lang: Lang, role: Role) -> Result<Vec<PathBuf>> {
    if dir.exists() {
        anyhow::bail!(
            "{} already exists; `new` writes only into a new directory",
            dir.display()
        );
    }
    // Write into a sibling first, so a failure leaves nothing half-made at `dir`.
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    let staging = tempfile::Builder::new()
        .prefix(".approval-host-new-")
        .tempdir_in(parent.unwrap_or(Path::new(".")))
        .context("creating the skeleton's directory")?;
    let mut written = Vec::new();
    for (path, text, executable) in files(name, lang, role) {
        let full = staging.path().join(&path);
        if let Some(p) = full.parent() {
            std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
        }
        std::fs::write(&full, text).with_context(|| format!("writing {}", full.display()))?;
        if executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o755))?;
        }
        written.push(dir.join(path));
    }
    let staged = staging.keep();
    std::fs::rename(&staged, dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(written)
}

/// The arguments of `new`.
#[derive(clap::Args, Debug)]
pub(crate) struct NewArgs {
    /// The plugin's name (lowercase letters, digits and '-').
    pub(crate) name: String,
    /// The language.
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
    /// What the plugin is in the waterfall.
    #[arg(long, value_enum, default_value = "gate")]
    pub(crate) role: Role,
    /// Where to write it [default: ./NAME].
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// (No state directory: this command neither reads nor writes one.)
    #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
    pub(crate) no_state_dir: Option<PathBuf>,
    /// (No store: this command opens no log.)
    #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
    pub(crate) no_store: Option<String>,
}

/// Runs `new`.
pub(crate) fn run(args: NewArgs) -> Result<ExitCode> {
    let NewArgs {
        name,
        lang,
        role,
        dir,
        ..
    } = args;
    check_name(&name).map_err(UsageError)?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    if dir.exists() {
        return Err(UsageError(format!(
            "{} already exists; `new` writes only into a new directory",
            dir.display()
        ))
        .into());
    }
    // The sample deployment's sample question: a gate rejects `bash`, an answerer
    // grants `read` once.
    let tool = match role {
        Role::Gate => "bash",
        Role::Answerer => "read",
    };
    for file in write(&dir, &name, lang, role)? {
        println!("{}", file.display());
    }
    println!(
        "next: approval-host test {}, then approval-host ask --session s1 --agent a1 --tool {tool} --config {0}/deployment.toml",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

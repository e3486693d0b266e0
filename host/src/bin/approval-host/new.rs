//! `approval-host new`: a plugin skeleton in Rust, Python, JavaScript or C, with its build
//! script, the WIT contract, a sample deployment and sample conformance cases, so an author gets
//! from nothing to a loaded, tested plugin in a few commands.
//!
//! A gate skeleton rejects the tools listed in its `deny_tools` config and passes everything else
//! on (`next`); an answerer skeleton grants the tools in `allow_tools` once and rejects the rest,
//! as a terminal answerer must always decide.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::ValueEnum;

/// The plugin contract every skeleton builds against.
const WIT: &str = include_str!("../../../../wit/approval.wit");

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

/// The files of a skeleton, relative to its directory.
pub fn files(name: &str, lang: Lang, role: Role) -> Vec<(PathBuf, String, bool)> {
    let snake = name.replace('-', "_");
    let key = role.key();
    let fill = |text: &str| {
        text.replace("{name}", name)
            .replace("{snake}", &snake)
            .replace("{role}", role.as_str())
            .replace("{key}", key)
    };
    let (listed, otherwise, sample_tool) = match role {
        Role::Gate => ("reject", "next", "bash"),
        Role::Answerer => ("allow-once", "reject", "read"),
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
    let cases = fill(&format!(
        "{{\n  \"about\": \"What {{name}} must answer; run with: approval-host conform {{name}}.wasm --cases cases.json\",\n  \"cases\": [\n    \
         {{\"name\": \"a listed tool\", \"config\": {{\"{{key}}\": \"{sample_tool}\"}}, \"tool\": \"{sample_tool}\", \"expect\": \"{listed}\"}},\n    \
         {{\"name\": \"another tool\", \"config\": {{\"{{key}}\": \"{sample_tool}\"}}, \"tool\": \"{other}\", \"expect\": \"{otherwise}\"}},\n    \
         {{\"name\": \"no config\", \"tool\": \"{sample_tool}\", \"expect\": \"{otherwise}\"}}\n  ]\n}}\n"
    ));
    let (listed_rust, otherwise_rust) = match role {
        Role::Gate => ("Decision::Reject", "Decision::Next"),
        Role::Answerer => ("Decision::AllowOnce", "Decision::Reject"),
    };
    let (listed_py, otherwise_py) = match role {
        Role::Gate => ("Decision.REJECT", "Decision.NEXT"),
        Role::Answerer => ("Decision.ALLOW_ONCE", "Decision.REJECT"),
    };
    let (listed_c, otherwise_c) = match role {
        Role::Gate => (
            "APPROVAL_PLUGIN_TYPES_DECISION_REJECT",
            "APPROVAL_PLUGIN_TYPES_DECISION_NEXT",
        ),
        Role::Answerer => (
            "APPROVAL_PLUGIN_TYPES_DECISION_ALLOW_ONCE",
            "APPROVAL_PLUGIN_TYPES_DECISION_REJECT",
        ),
    };
    let what = match role {
        Role::Gate => format!(
            "rejects the tools listed in its `{key}` config (comma-separated) and passes every other question on"
        ),
        Role::Answerer => format!(
            "grants one call of the tools listed in its `{key}` config (comma-separated) and rejects everything else"
        ),
    };
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
            out.push((
                PathBuf::from("src/lib.rs"),
                fill(&format!(
                    "//! `{{name}}` ({{role}}): {what}.\n\n\
                     wit_bindgen::generate!({{ path: \"wit\", world: \"answerer\" }});\n\n\
                     use approval::plugin::host;\n\n\
                     struct Plugin;\n\n\
                     impl Guest for Plugin {{\n    fn decide(request: Request) -> Decision {{\n        \
                     let listed = host::config(\"{{key}}\").unwrap_or_default();\n        \
                     let hit = listed\n            .split(',')\n            .map(str::trim)\n            \
                     .any(|tool| !tool.is_empty() && tool == request.tool_name);\n        \
                     if hit {{ {listed_rust} }} else {{ {otherwise_rust} }}\n    }}\n}}\n\n\
                     export!(Plugin);\n"
                )),
                false,
            ));
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
            out.push((
                PathBuf::from("app.py"),
                fill(&format!(
                    "\"\"\"{{name}} ({{role}}): {what}.\"\"\"\n\n\
                     from wit_world import WitWorld as World\n\
                     from wit_world.imports import host\n\
                     from wit_world.imports.types import Decision, Request\n\n\n\
                     class WitWorld(World):\n    def decide(self, request: Request) -> Decision:\n        \
                     listed = (host.config(\"{{key}}\") or \"\").split(\",\")\n        \
                     hit = any(t.strip() and t.strip() == request.tool_name for t in listed)\n        \
                     return {listed_py} if hit else {otherwise_py}\n"
                )),
                false,
            ));
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
            let (listed_js, otherwise_js) = match role {
                Role::Gate => ("'reject'", "'next'"),
                Role::Answerer => ("'allow-once'", "'reject'"),
            };
            out.push((
                PathBuf::from(format!("{name}.js")),
                fill(&format!(
                    "// {{name}} ({{role}}): {what}.\n\
                     import {{ config }} from 'approval:plugin/host@0.1.0';\n\n\
                     export function decide(request) {{\n  \
                     const listed = (config('{{key}}') ?? '').split(',').map((t) => t.trim());\n  \
                     const hit = listed.some((t) => t !== '' && t === request.toolName);\n  \
                     return hit ? {listed_js} : {otherwise_js};\n}}\n"
                )),
                false,
            ));
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
            out.push((
                PathBuf::from(format!("{snake}.c")),
                fill(&format!(
                    "/* {{name}} ({{role}}): {what}. */\n\
                     #include <string.h>\n\n#include \"answerer.h\"\n\n\
                     /* Whether `tool` is one of the comma-separated, trimmed entries of `list`. */\n\
                     static int listed(answerer_string_t *list, answerer_string_t *tool) {{\n  \
                     const char *p = (const char *)list->ptr, *end = p + list->len;\n  \
                     while (p <= end) {{\n    \
                     const char *comma = memchr(p, ',', (size_t)(end - p));\n    \
                     const char *a = p, *b = comma ? comma : end;\n    \
                     while (a < b && *a == ' ') a++;\n    \
                     while (b > a && b[-1] == ' ') b--;\n    \
                     if (b > a && (size_t)(b - a) == tool->len && memcmp(a, tool->ptr, tool->len) == 0) return 1;\n    \
                     if (!comma) break;\n    p = comma + 1;\n  }}\n  return 0;\n}}\n\n\
                     answerer_decision_t exports_answerer_decide(answerer_request_t *request) {{\n  \
                     answerer_string_t key, value;\n  int hit = 0;\n  \
                     answerer_string_set(&key, \"{{key}}\");\n  \
                     if (approval_plugin_host_config(&key, &value)) {{\n    \
                     hit = listed(&value, &request->tool_name);\n    answerer_string_free(&value);\n  }}\n  \
                     answerer_request_free(request);\n  \
                     return hit ? {listed_c} : {otherwise_c};\n}}\n"
                )),
                false,
            ));
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

//! `rekon plugin new`: a plugin project that builds outside this
//! repository with its language's own tools — a Rust crate (plain cargo),
//! a TypeScript package (`npm install && npm test && npm run build`) or a
//! Python project (`pip install -e . && pytest && rekon-py-build ...`).
//!
//! TypeScript and Python projects depend on the SDK of a rekon checkout by
//! path (`@rekon/sdk` as a `file:` dependency, `rekon-sdk @ file://...`);
//! their files are in [`Scaffold::files`] below the Rust ones.
//!
//! The crate is its own workspace (an empty `[workspace]` table, so it
//! builds even when created below another cargo workspace), depends only on
//! `rekon-sdk` (a path or a git dependency) and uses the SDK's re-exports of
//! `k8s-openapi`, `kube`, `serde`, `serde_json` and `schemars`, so its
//! versions always match the SDK's. It carries its own release profile for
//! `wasm32-wasip2`, a test-kit test that passes as generated, and a README
//! whose first command installs the target.
//!
//! ```no_run
//! use rekon::commands::scaffold::{Scaffold, SdkSource};
//! let dir = Scaffold::new("cm-stamper", SdkSource::Path("/src/rekon/guest-sdk".into()))
//!     .primary("v1/ConfigMap")?
//!     .write("/tmp".as_ref())?;
//! assert!(dir.join("Cargo.toml").is_file());
//! # Ok::<(), rekon::commands::scaffold::ScaffoldError>(())
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Why a crate could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The plugin name is not a DNS label.
    #[error("plugin name {0:?} is not a DNS label (lowercase letters, digits and '-', at most 63)")]
    Name(String),
    /// `--primary` is not `GROUP/VERSION/KIND` (or `VERSION/KIND` for the core group).
    #[error("primary {0:?} is not GROUP/VERSION/KIND (or VERSION/KIND for the core group): {1}")]
    Primary(String, &'static str),
    /// The SDK cannot be taken from where it was asked to be.
    #[error("{0}")]
    Sdk(String),
    /// The target directory exists.
    #[error("{0} already exists; choose another name or --dir")]
    Exists(PathBuf),
    /// Writing a file failed.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Where the generated crate takes `rekon-sdk` from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkSource {
    /// A checkout's `guest-sdk` directory.
    Path(PathBuf),
    /// A git repository holding the rekon workspace.
    Git(String),
}

/// The language of the generated plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    /// A Rust crate on `rekon-sdk` (`guest-sdk/`).
    #[default]
    Rust,
    /// An npm package on `@rekon/sdk` (`sdk/typescript/`).
    TypeScript,
    /// A Python project on `rekon_sdk` (`sdk/python/`).
    Python,
}

impl Lang {
    /// The SDK's directory in a rekon checkout.
    #[must_use]
    pub fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::TypeScript => "sdk/typescript",
            Lang::Python => "sdk/python",
        }
    }
}

/// The primary resource of the generated plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Primary {
    group: String,
    version: String,
    kind: String,
    /// The k8s-openapi module path for built-in kinds; `None` for a custom
    /// resource the plugin defines (and owns the CRD of).
    builtin: Option<&'static str>,
    namespaced: bool,
}

/// Built-in kinds the scaffold can name with their k8s-openapi type:
/// (group, version, kind, module, namespaced).
const BUILTIN: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "ConfigMap", "core::v1", true),
    ("", "v1", "Secret", "core::v1", true),
    ("", "v1", "Service", "core::v1", true),
    ("", "v1", "ServiceAccount", "core::v1", true),
    ("", "v1", "Pod", "core::v1", true),
    ("", "v1", "Namespace", "core::v1", false),
    ("", "v1", "Node", "core::v1", false),
    ("apps", "v1", "Deployment", "apps::v1", true),
    ("apps", "v1", "StatefulSet", "apps::v1", true),
    ("apps", "v1", "DaemonSet", "apps::v1", true),
    ("batch", "v1", "Job", "batch::v1", true),
    ("batch", "v1", "CronJob", "batch::v1", true),
];

impl Primary {
    fn parse(text: &str) -> Result<Self, ScaffoldError> {
        let bad = |why| ScaffoldError::Primary(text.to_owned(), why);
        let parts: Vec<&str> = text.split('/').collect();
        let (group, version, kind) = match parts.as_slice() {
            [version, kind] => ("", *version, *kind),
            [group, version, kind] => (*group, *version, *kind),
            _ => return Err(bad("expected two or three '/'-separated parts")),
        };
        let group = if group == "core" { "" } else { group };
        if !group.is_empty() && !rekon_rules::registration::is_dns_subdomain(group) {
            return Err(bad("the group is not a DNS subdomain"));
        }
        if !rekon_rules::registration::is_dns_label(version) {
            return Err(bad("the version is not a DNS label (v1, v1beta1)"));
        }
        let mut chars = kind.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_uppercase())
            || !chars.all(|c| c.is_ascii_alphanumeric())
        {
            return Err(bad("the kind is not CamelCase (ConfigMap, Widget)"));
        }
        if let Some((_, _, _, module, namespaced)) = BUILTIN
            .iter()
            .find(|(g, v, k, _, _)| *g == group && *v == version && *k == kind)
        {
            return Ok(Self {
                group: group.to_owned(),
                version: version.to_owned(),
                kind: kind.to_owned(),
                builtin: Some(module),
                namespaced: *namespaced,
            });
        }
        if group.is_empty() || !group.contains('.') {
            return Err(bad(
                "not a built-in kind the scaffold knows, and a custom resource needs a dotted group (widgets.example.com)",
            ));
        }
        Ok(Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            builtin: None,
            namespaced: true,
        })
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct Scaffold {
    name: String,
    sdk: SdkSource,
    primary: Primary,
    lang: Lang,
}

impl Scaffold {
    /// A plugin `name` whose primary is a ConfigMap.
    #[must_use]
    pub fn new(name: &str, sdk: SdkSource) -> Self {
        Self {
            name: name.to_owned(),
            sdk,
            primary: Primary::parse("v1/ConfigMap").expect("ConfigMap is built in"),
            lang: Lang::Rust,
        }
    }

    /// The language of the project (Rust by default).
    #[must_use]
    pub fn lang(mut self, lang: Lang) -> Self {
        self.lang = lang;
        self
    }

    /// The primary resource: `GROUP/VERSION/KIND`, or `VERSION/KIND` for the
    /// core group. A built-in kind is used through its k8s-openapi type; any
    /// other kind becomes a custom resource the plugin defines, with a CRD.
    ///
    /// # Errors
    /// [`ScaffoldError::Primary`] when the text is not a resource.
    pub fn primary(mut self, gvk: &str) -> Result<Self, ScaffoldError> {
        self.primary = Primary::parse(gvk)?;
        Ok(self)
    }

    /// Writes the crate into `parent/<name>` and returns that directory.
    ///
    /// # Errors
    /// An invalid name, an existing directory, or an I/O error.
    pub fn write(&self, parent: &Path) -> Result<PathBuf, ScaffoldError> {
        if !rekon_rules::registration::is_dns_label(&self.name) {
            return Err(ScaffoldError::Name(self.name.clone()));
        }
        let dir = parent.join(&self.name);
        if dir.exists() {
            return Err(ScaffoldError::Exists(dir));
        }
        let files: Vec<(String, String)> = match self.lang {
            Lang::Rust => self
                .files()
                .into_iter()
                .map(|(path, text)| (path.to_owned(), text))
                .collect(),
            Lang::TypeScript | Lang::Python => {
                let SdkSource::Path(sdk) = &self.sdk else {
                    return Err(ScaffoldError::Sdk(format!(
                        "the {:?} SDK is not published; pass --sdk-path PATH/TO/REKON/{}",
                        self.lang,
                        self.lang.sdk_dir()
                    )));
                };
                if self.lang == Lang::TypeScript {
                    self.typescript_files(sdk)
                } else {
                    self.python_files(sdk)
                }
            }
        };
        for (path, text) in files {
            let path = dir.join(path);
            let write = || {
                std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
                std::fs::write(&path, text)
            };
            write().map_err(|source| ScaffoldError::Write {
                path: path.clone(),
                source,
            })?;
        }
        Ok(dir)
    }

    /// The files of the crate, relative to its directory.
    #[must_use]
    pub fn files(&self) -> Vec<(&'static str, String)> {
        vec![
            ("Cargo.toml", self.cargo_toml()),
            ("src/lib.rs", self.lib_rs()),
            ("tests/reconcile.rs", self.test_rs()),
            ("README.md", self.readme()),
            (".gitignore", "/target\n".to_owned()),
        ]
    }

    fn crate_ident(&self) -> String {
        self.name.replace('-', "_")
    }

    fn type_name(&self) -> String {
        self.name
            .split('-')
            .map(|part| {
                let mut c = part.chars();
                c.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + c.as_str()
                })
            })
            .collect::<String>()
            + "Plugin"
    }

    fn label(&self) -> String {
        format!("{}.example.com/seen", self.name)
    }

    fn cargo_toml(&self) -> String {
        let sdk = match &self.sdk {
            SdkSource::Path(p) => format!("{{ path = {:?} }}", p.display().to_string()),
            SdkSource::Git(url) => format!("{{ git = {url:?} }}"),
        };
        let mut text = format!(
            r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# Its own workspace: builds the same wherever the directory lives.
[workspace]

[lib]
# cdylib: the WebAssembly component; rlib: the native tests link it.
crate-type = ["cdylib", "rlib"]

[dependencies]
# rekon-sdk re-exports k8s-openapi, kube, serde, serde_json and schemars:
# use them through it (`rekon_sdk::k8s_openapi::...`) so versions match.
rekon-sdk = {sdk}
"#,
            name = self.name,
        );
        if self.primary.builtin.is_none() {
            text.push_str(
                r#"# The custom resource's derives expand to paths of these crates; same
# versions as the SDK's.
kube = { version = "5", default-features = false, features = ["derive"] }
k8s-openapi = { version = "0.29", default-features = false, features = ["std", "v1_33"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1"
"#,
            );
        }
        text.push_str(
            r#"
# `cargo build --target wasm32-wasip2 --release` builds the component.
# opt-level 3 (not "s"): fewer guest instructions per reconcile for a few
# percent more size; LTO and strip keep the file small.
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
"#,
        );
        text
    }

    fn primary_type(&self) -> (String, String) {
        let kind = &self.primary.kind;
        match self.primary.builtin {
            Some(module) => (
                kind.clone(),
                format!("use rekon_sdk::k8s_openapi::api::{module}::{kind};\n"),
            ),
            None => {
                let mut defs = String::new();
                let _ = write!(
                    defs,
                    r#"use kube::CustomResource;
use schemars::JsonSchema;
use serde::{{Deserialize, Serialize}};

/// The plugin's custom resource (`kubectl get {plural}`).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "{group}", version = "{version}", kind = "{kind}", namespaced)]
pub struct {kind}Spec {{
    /// Free text; the plugin does not interpret it.
    #[serde(default)]
    pub message: String,
}}
"#,
                    plural = kind.to_ascii_lowercase() + "s",
                    group = self.primary.group,
                    version = self.primary.version,
                );
                (kind.clone(), defs)
            }
        }
    }

    fn lib_rs(&self) -> String {
        let (kind, imports) = self.primary_type();
        let crd = if self.primary.builtin.is_none() {
            format!("\n            .crd({kind}::crd())")
        } else {
            String::new()
        };
        format!(
            r#"//! {name}: a rekon plugin. It stamps the label `{label}` on
//! every {kind} it reconciles, once. Replace `reconcile` with your logic.

use rekon_sdk::prelude::*;
use rekon_sdk::serde_json::json;
{imports}
/// The label this plugin writes.
pub const SEEN_LABEL: &str = "{label}";

/// The plugin.
pub struct {ty};

impl Plugin for {ty} {{
    type Primary = {kind};

    fn register() -> Result<Registration, Error> {{
        Ok(Registration::new::<{kind}>("{name}", env!("CARGO_PKG_VERSION"))
            .permission::<{kind}>(&[Verb::Get, Verb::List, Verb::Watch, Verb::Patch], ClusterSet::Primary){crd})
    }}

    fn reconcile(ctx: &Context, req: &Request, event: Event<{kind}>) -> Result<Outcome, Error> {{
        let Event::Apply(object) = event else {{
            // Cleanup (deletion): nothing to undo, and without a registered
            // finalizer the host does not ask.
            return Ok(Outcome::done());
        }};
        if object.labels().get(SEEN_LABEL).is_some_and(|v| v == "true") {{
            return Ok(Outcome::done());
        }}
        rekon_sdk::info!(ctx, "stamping {{}}", req);
        let patch = json!({{"metadata": {{"labels": {{SEEN_LABEL: "true"}}}}}});
        Ok(Outcome::done().with(Action::merge_patch(
            ObjectRef::for_request::<{kind}>(req),
            patch,
        )))
    }}
}}

rekon_sdk::export_plugin!({ty});
"#,
            name = self.name,
            label = self.label(),
            ty = self.type_name(),
        )
    }

    fn test_rs(&self) -> String {
        let p = &self.primary;
        let api_version = if p.group.is_empty() {
            p.version.clone()
        } else {
            format!("{}/{}", p.group, p.version)
        };
        let (metadata, request, namespace) = if p.namespaced {
            (
                r#"{"name": "demo", "namespace": "default"}"#,
                r#"Request::namespaced("main", "default", "demo")"#,
                r#"Some("default")"#,
            )
        } else {
            (
                r#"{"name": "demo"}"#,
                r#"Request::cluster_scoped("main", "demo")"#,
                "None",
            )
        };
        let kind = &p.kind;
        let spec = if p.builtin.is_none() {
            r#", "spec": {"message": "hello"}"#
        } else {
            ""
        };
        let import = match p.builtin {
            Some(module) => format!("use rekon_sdk::k8s_openapi::api::{module}::{kind};"),
            None => format!("use {}::{kind};", self.crate_ident()),
        };
        format!(
            r#"//! The plugin against the SDK's test kit: no wasm, no cluster.

use {krate}::{{SEEN_LABEL, {ty}}};
use rekon_sdk::prelude::*;
use rekon_sdk::serde_json::json;
use rekon_sdk::testkit::World;
{import}

#[test]
fn stamps_the_label_once() {{
    let registration = World::register::<{ty}>().expect("the host would load it");
    assert_eq!(registration.name, "{name}");
    let mut world = World::new().primary("main");
    world.insert_json(
        "main",
        json!({{"apiVersion": "{api_version}", "kind": "{kind}", "metadata": {metadata}{spec}}}),
    );
    let req = {request};
    world.converge::<{ty}>(&req, 5).expect("converges");
    let object: {kind} = world.get("main", {namespace}, "demo").expect("still there");
    assert_eq!(object.labels()[SEEN_LABEL], "true");
    world.assert_no_writes::<{ty}>(&req);
}}
"#,
            krate = self.crate_ident(),
            ty = self.type_name(),
            name = self.name,
        )
    }

    fn readme(&self) -> String {
        let file = format!("target/wasm32-wasip2/release/{}.wasm", self.crate_ident());
        format!(
            r#"# {name}

A [rekon](https://github.com/rekon-dev/rekon) plugin, scaffolded by
`rekon plugin new`. Its primary resource is `{gvk}`.

```sh
rustup target add wasm32-wasip2                  # once: the component target
cargo test                                       # native, with the SDK's test kit
cargo build --target wasm32-wasip2 --release     # -> {file}
rekon plugin inspect {file}
```

Then copy `{file}` into the directory `rekon run --plugins DIR` watches; the
host loads it (and reloads it when the file changes). `rekon plugin plan
{file}` shows what it would do in your clusters without writing anything.

- `src/lib.rs`: the registration (what the plugin reads and may write) and
  `reconcile`. `rekon_sdk` re-exports `k8s_openapi`, `kube`, `serde`,
  `serde_json` and `schemars`: use them through it.
- `tests/reconcile.rs`: the plugin against a fake world of clusters.
- `Cargo.toml`: its own `[workspace]` and release profile (opt-level 3, LTO,
  stripped); nothing here depends on the rekon repository's workspace.

Logs written with `rekon_sdk::info!` and friends appear in the host's log,
tagged with the plugin and the request (set `RUST_LOG=info` or more).
"#,
            name = self.name,
            gvk = if self.primary.group.is_empty() {
                format!("{}/{}", self.primary.version, self.primary.kind)
            } else {
                format!(
                    "{}/{}/{}",
                    self.primary.group, self.primary.version, self.primary.kind
                )
            },
        )
    }
    fn api_version(&self) -> String {
        if self.primary.group.is_empty() {
            self.primary.version.clone()
        } else {
            format!("{}/{}", self.primary.group, self.primary.version)
        }
    }

    /// A minimal CRD for a custom primary (`spec.message`, status kept).
    fn crd_json(&self) -> String {
        let p = &self.primary;
        let plural = p.kind.to_ascii_lowercase() + "s";
        serde_json::to_string_pretty(&serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{}", p.group)},
            "spec": {
                "group": p.group,
                "names": {"kind": p.kind, "plural": plural, "singular": p.kind.to_ascii_lowercase()},
                "scope": "Namespaced",
                "versions": [{
                    "name": p.version, "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"message": {"type": "string"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }}}
                }]
            }
        }))
        .unwrap_or_default()
            + "\n"
    }

    fn sample_object(&self) -> (String, String, &'static str) {
        let p = &self.primary;
        let spec = if p.builtin.is_none() {
            r#", "spec": {"message": "hello"}"#
        } else {
            ""
        };
        let (metadata, namespace) = if p.namespaced {
            (r#"{"name": "demo", "namespace": "default"}"#, "\"default\"")
        } else {
            (r#"{"name": "demo"}"#, "")
        };
        (
            format!(
                r#"{{"apiVersion": "{}", "kind": "{}", "metadata": {metadata}{spec}}}"#,
                self.api_version(),
                p.kind
            ),
            namespace.to_owned(),
            if p.namespaced {
                "namespaced"
            } else {
                "cluster"
            },
        )
    }

    fn typescript_files(&self, sdk: &Path) -> Vec<(String, String)> {
        let p = &self.primary;
        let gvk = format!("{}/{}", self.api_version(), p.kind);
        let wasm = format!("dist/{}.wasm", self.crate_ident());
        let kind_expr = if p.builtin.is_some() {
            format!("kinds.{}", p.kind)
        } else {
            format!(
                r#"customKind("{}", "{}", "{}", "namespaced")"#,
                self.api_version(),
                p.kind,
                p.kind.to_ascii_lowercase() + "s"
            )
        };
        let crd = if p.builtin.is_some() {
            ""
        } else {
            "\n      .crd(crd)"
        };
        let crd_import = if p.builtin.is_some() {
            ""
        } else {
            "import crd from \"../crd.json\" with { type: \"json\" };\n"
        };
        let (object, namespace, scope) = self.sample_object();
        let request = if scope == "namespaced" {
            format!(r#"namespaced("main", {namespace}, "demo")"#)
        } else {
            r#"clusterScoped("main", "demo")"#.to_owned()
        };
        let ns_arg = if namespace.is_empty() {
            "undefined".to_owned()
        } else {
            namespace
        };
        let package = serde_json::json!({
            "name": self.name, "version": "0.1.0", "private": true, "type": "module",
            "scripts": {
                "test": "tsc --noEmit && node --import tsx --test test/*.test.ts",
                "build": format!("rekon-build src/component.ts -o {wasm}")
            },
            "dependencies": {"@rekon/sdk": format!("file:{}", sdk.display())},
            "devDependencies": {
                "@types/node": "20.19.25", "kubernetes-types": "1.30.0",
                "tsx": "4.20.6", "typescript": "5.9.3"
            }
        });
        let mut files = vec![
            ("package.json".to_owned(), serde_json::to_string_pretty(&package).unwrap_or_default() + "\n"),
            ("tsconfig.json".to_owned(), r#"{
  "compilerOptions": {
    "target": "ES2022", "module": "ESNext", "moduleResolution": "Bundler",
    "strict": true, "noEmit": true, "skipLibCheck": true,
    "resolveJsonModule": true, "types": ["node"]
  },
  "include": ["src", "test"]
}
"#.to_owned()),
            ("src/plugin.ts".to_owned(), format!(r#"// {name}: a rekon plugin. It stamps the label `{label}` on every
// {kind} it reconciles, once. Replace `reconcile` with your logic.
import {{ Action, ClusterSet, Outcome, type Plugin, Registration, customKind, kinds, refForRequest }} from "@rekon/sdk";
{crd_import}
/** The label this plugin writes. */
export const SEEN_LABEL = "{label}";

/** The primary kind. */
export const PRIMARY = {kind_expr};

export const plugin: Plugin = {{
  primary: PRIMARY,
  register: () =>
    new Registration("{name}", "0.1.0", PRIMARY)
      .permission(PRIMARY, ["get", "list", "watch", "patch"], ClusterSet.primary){crd},
  reconcile(ctx, req, event) {{
    // Cleanup (deletion): nothing to undo, and without a registered
    // finalizer the host does not ask.
    if (event.type === "cleanup") return Outcome.done();
    if (event.primary.metadata?.labels?.[SEEN_LABEL] === "true") return Outcome.done();
    ctx.info("stamping", {{ name: req.name }});
    return Outcome.done().with(Action.mergePatch(refForRequest(PRIMARY, req), {{ metadata: {{ labels: {{ [SEEN_LABEL]: "true" }} }} }}));
  }},
}};
// `customKind` is used by custom primaries; keep the import either way.
void customKind;
void kinds;
"#, name = self.name, label = self.label(), kind = p.kind)),
            ("src/component.ts".to_owned(), "// The component's entry: `npm run build` bundles it into the .wasm.\nimport { exportPlugin } from \"@rekon/sdk/component\";\nimport { plugin } from \"./plugin.js\";\n\nexport const guest = exportPlugin(plugin);\n".to_owned()),
            ("test/plugin.test.ts".to_owned(), format!(r#"// The plugin against the SDK's test kit: no wasm, no cluster.
import assert from "node:assert/strict";
import {{ test }} from "node:test";
import {{ clusterScoped, namespaced }} from "@rekon/sdk";
import {{ World }} from "@rekon/sdk/testkit";
import {{ PRIMARY, SEEN_LABEL, plugin }} from "../src/plugin.js";

test("stamps the label once", () => {{
  assert.equal(plugin.register().name, "{name}");
  const world = new World().primary("main");
  world.insert("main", {object});
  const req = {request};
  world.converge(plugin, req);
  assert.equal(world.get(PRIMARY, "main", {ns_arg}, "demo")?.metadata?.labels?.[SEEN_LABEL], "true");
  world.assertNoWrites(plugin, req);
  void clusterScoped;
  void namespaced;
}});
"#, name = self.name)),
            ("README.md".to_owned(), format!(r#"# {name}

A [rekon](https://github.com/rekon-dev/rekon) plugin in TypeScript,
scaffolded by `rekon plugin new --lang typescript`. Its primary resource is
`{gvk}`.

```sh
npm install                          # @rekon/sdk from {sdk}, componentize-js, esbuild
npm test                             # native, with the SDK's test kit (node --test)
npm run build                        # -> {wasm}
rekon plugin inspect {wasm}
```

Then copy `{wasm}` into the directory `rekon run --plugins DIR` watches.

- `src/plugin.ts`: the registration and `reconcile`; `src/component.ts`
  exports it as the component.
- `test/plugin.test.ts`: the plugin against a fake world of clusters.
"#, name = self.name, sdk = sdk.display())),
            (".gitignore".to_owned(), "node_modules/\ndist/\n".to_owned()),
        ];
        if p.builtin.is_none() {
            files.push(("crd.json".to_owned(), self.crd_json()));
        }
        files
    }

    fn python_files(&self, sdk: &Path) -> Vec<(String, String)> {
        let p = &self.primary;
        let gvk = format!("{}/{}", self.api_version(), p.kind);
        let module = self.crate_ident();
        let wasm = format!("dist/{module}.wasm");
        let kind_expr = match p.builtin {
            Some(_) => format!(
                "ResourceType(\"{}\", \"{}\", \"{}\", \"{}\", \"{}\")",
                p.group,
                p.version,
                p.kind,
                builtin_plural(&p.kind),
                if p.namespaced {
                    "namespaced"
                } else {
                    "cluster"
                }
            ),
            None => format!(
                "ResourceType(\"{}\", \"{}\", \"{}\", \"{}\", \"namespaced\")",
                p.group,
                p.version,
                p.kind,
                p.kind.to_ascii_lowercase() + "s"
            ),
        };
        let crd = if p.builtin.is_some() {
            String::new()
        } else {
            "\n        reg.crd(json.loads((Path(__file__).parent / \"crd.json\").read_text()))"
                .to_owned()
        };
        let (object, namespace, _) = self.sample_object();
        let (request, ns_arg) = if p.namespaced {
            (
                format!("Request.namespaced(\"main\", {namespace}, \"demo\")"),
                namespace,
            )
        } else {
            (
                "Request.cluster_scoped(\"main\", \"demo\")".to_owned(),
                "None".to_owned(),
            )
        };
        let mut files = vec![
            (
                "pyproject.toml".to_owned(),
                format!(
                    r#"[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11"
# The SDK from a rekon checkout, and the tools to test and build.
dependencies = ["rekon-sdk @ file://{sdk}", "componentize-py==0.25.1", "pytest==8.3.5"]

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
py-modules = ["{module}"]

[tool.pytest.ini_options]
pythonpath = ["."]
"#,
                    name = self.name,
                    sdk = sdk.display()
                ),
            ),
            (
                format!("{module}.py"),
                format!(
                    r#""""{name}: a rekon plugin. It stamps the label ``{label}`` on every
{kind} it reconciles, once. Replace ``reconcile`` with your logic."""
import json
from pathlib import Path

from rekon_sdk import PRIMARY, Apply, ObjectRef, Outcome, Registration, ResourceType, action

SEEN_LABEL = "{label}"
KIND = {kind_expr}


class Plugin:
    primary = KIND

    def register(self) -> Registration:
        reg = Registration("{name}", "0.1.0", KIND).permission(KIND, ["get", "list", "watch", "patch"], PRIMARY){crd}
        return reg

    def reconcile(self, ctx, req, event) -> Outcome:
        # Cleanup (deletion): nothing to undo, and without a registered
        # finalizer the host does not ask.
        if not isinstance(event, Apply):
            return Outcome.done()
        if ((event.primary.get("metadata") or {{}}).get("labels") or {{}}).get(SEEN_LABEL) == "true":
            return Outcome.done()
        ctx.info("stamping", name=req.name)
        patch = {{"metadata": {{"labels": {{SEEN_LABEL: "true"}}}}}}
        return Outcome.done().push(action.merge_patch(ObjectRef.for_request(KIND, req), patch))


plugin = Plugin()
_ = (json, Path)

try:  # the component's export; wit_world exists only inside componentize-py
    from rekon_sdk.component import export_plugin

    Guest = export_plugin(plugin)
except ImportError:
    pass
"#,
                    name = self.name,
                    label = self.label(),
                    kind = p.kind
                ),
            ),
            (
                "tests/test_plugin.py".to_owned(),
                format!(
                    r#""""The plugin against the SDK's test kit: no wasm, no cluster."""
from rekon_sdk import Request
from rekon_sdk.testkit import World

from {module} import KIND, SEEN_LABEL, plugin


def test_stamps_the_label_once():
    assert plugin.register().name == "{name}"
    world = World().primary("main")
    world.insert("main", {object})
    req = {request}
    world.converge(plugin, req)
    assert world.get(KIND, "main", {ns_arg}, "demo")["metadata"]["labels"][SEEN_LABEL] == "true"
    world.assert_no_writes(plugin, req)
"#,
                    name = self.name
                ),
            ),
            (
                "README.md".to_owned(),
                format!(
                    r#"# {name}

A [rekon](https://github.com/rekon-dev/rekon) plugin in Python, scaffolded
by `rekon plugin new --lang python`. Its primary resource is `{gvk}`.

```sh
pip install -e .                             # rekon_sdk from {sdk}, componentize-py, pytest
pytest                                       # native, with the SDK's test kit
rekon-py-build {module} -o {wasm}    # -> {wasm}
rekon plugin inspect {wasm}
```

Then copy `{wasm}` into the directory `rekon run --plugins DIR` watches.

- `{module}.py`: the registration, `reconcile`, and `Guest`, the component's export.
- `tests/test_plugin.py`: the plugin against a fake world of clusters.
"#,
                    name = self.name,
                    sdk = sdk.display()
                ),
            ),
            (
                ".gitignore".to_owned(),
                "dist/\n__pycache__/\n*.egg-info/\n".to_owned(),
            ),
        ];
        if p.builtin.is_none() {
            files.push(("crd.json".to_owned(), self.crd_json()));
        }
        files
    }
}

/// The plural of a built-in kind the scaffold knows.
fn builtin_plural(kind: &str) -> String {
    kind.to_ascii_lowercase() + "s"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_parse_builtin_and_custom_kinds() {
        let cm = Primary::parse("v1/ConfigMap").unwrap();
        assert_eq!(cm.builtin, Some("core::v1"));
        assert!(Primary::parse("core/v1/Node").unwrap().builtin.is_some());
        assert_eq!(
            Primary::parse("apps/v1/Deployment").unwrap().builtin,
            Some("apps::v1")
        );
        let custom = Primary::parse("widgets.example.com/v1alpha1/Widget").unwrap();
        assert_eq!(custom.builtin, None);
        for bad in [
            "ConfigMap",
            "v1/configMap",
            "a/b/c/d",
            "batch/v1/Widget",
            "x_y.io/v1/W",
        ] {
            assert!(Primary::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_crate_stands_alone() {
        let s = Scaffold::new(
            "cm-stamper",
            SdkSource::Git("https://example.com/rekon".into()),
        );
        let files = s.files();
        let cargo = &files[0].1;
        assert!(cargo.contains("\n[workspace]\n"), "{cargo}");
        assert!(!cargo.contains("workspace = true"), "{cargo}");
        assert!(cargo.contains(r#"rekon-sdk = { git = "https://example.com/rekon" }"#));
        assert!(cargo.contains("[profile.release]"));
        let readme = &files[3].1;
        let first = readme
            .lines()
            .find(|l| l.starts_with("rustup") || l.starts_with("cargo"));
        assert_eq!(
            first.map(|l| l.split('#').next().unwrap_or_default().trim()),
            Some("rustup target add wasm32-wasip2")
        );
        assert!(files[1].1.contains("pub struct CmStamperPlugin;"));
    }

    #[test]
    fn typescript_and_python_projects_depend_on_the_sdk_by_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let ts = Scaffold::new("cm-ts", SdkSource::Path("/rekon/sdk/typescript".into()))
            .lang(Lang::TypeScript)
            .write(dir.path())
            .unwrap();
        let package = std::fs::read_to_string(ts.join("package.json")).unwrap();
        assert!(
            package.contains(r#""@rekon/sdk": "file:/rekon/sdk/typescript""#),
            "{package}"
        );
        assert!(ts.join("src/component.ts").is_file() && ts.join("test/plugin.test.ts").is_file());
        let py = Scaffold::new("pool-py", SdkSource::Path("/rekon/sdk/python".into()))
            .lang(Lang::Python)
            .primary("widgets.example.com/v1/Widget")
            .unwrap()
            .write(dir.path())
            .unwrap();
        let pyproject = std::fs::read_to_string(py.join("pyproject.toml")).unwrap();
        assert!(
            pyproject.contains("rekon-sdk @ file:///rekon/sdk/python"),
            "{pyproject}"
        );
        assert!(py.join("pool_py.py").is_file() && py.join("crd.json").is_file());
        let git =
            Scaffold::new("x", SdkSource::Git("https://example.com/r".into())).lang(Lang::Python);
        assert!(matches!(git.write(dir.path()), Err(ScaffoldError::Sdk(_))));
    }

    #[test]
    fn an_invalid_name_or_existing_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = Scaffold::new("Bad_Name", SdkSource::Path("/sdk".into()));
        assert!(matches!(s.write(dir.path()), Err(ScaffoldError::Name(_))));
        let s = Scaffold::new("ok", SdkSource::Path("/sdk".into()));
        s.write(dir.path()).unwrap();
        assert!(matches!(s.write(dir.path()), Err(ScaffoldError::Exists(_))));
    }
}

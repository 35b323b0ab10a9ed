//! The Rust crate: its own workspace (an empty `[workspace]` table, so it
//! builds even when created below another cargo workspace), depending only
//! on `rekon-sdk` and using the SDK's re-exports of `k8s-openapi`, `kube`,
//! `serde`, `serde_json` and `schemars`, so its versions always match the
//! SDK's. It carries its own release profile for `wasm32-wasip2`, a
//! test-kit test that passes as generated, and a README whose first command
//! installs the target.

use std::fmt::Write as _;

use super::project::Project;

/// The files of the crate, relative to its directory; `sdk` is the
/// `rekon-sdk` dependency's TOML value (`{ path = "…" }`, `{ git = "…" }`).
pub(super) fn files(project: &Project, sdk: &str) -> Vec<(&'static str, String)> {
    let mut files = vec![
        ("Cargo.toml", project.cargo_toml(sdk)),
        ("src/lib.rs", project.lib_rs()),
        ("tests/reconcile.rs", project.test_rs()),
        ("README.md", project.readme()),
        ("explore/scenario.yaml", project.scenario_yaml()),
        (".gitignore", "/target\n/explore-out\n".to_owned()),
    ];
    if project.admission {
        files.push(("tests/admission.rs", project.admission_test_rs()));
    }
    files
}

impl Project {
    /// `sdk`: the `rekon-sdk` dependency's TOML value.
    fn cargo_toml(&self, sdk: &str) -> String {
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
        let (admission, export) = if self.admission {
            (self.rust_admission(&kind), ", admission")
        } else {
            (String::new(), "")
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
{admission}
rekon_sdk::export_plugin!({ty}{export});
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

    fn admission_test_rs(&self) -> String {
        let kind = &self.primary.kind;
        let import = match self.primary.builtin {
            Some(module) => format!("use rekon_sdk::k8s_openapi::api::{module}::{kind};"),
            None => format!("use {}::{kind};", self.crate_ident()),
        };
        let (sample, _, _) = self.sample_object();
        self.rust_admission_test(kind, &sample, &import)
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
rekon plugin explore {file} --max-plans 40 --out explore-out   # no scenario: inputs generated from its schema
rekon plugin explore {file} --scenario explore/scenario.yaml --out explore-out   # its bugs under faults
```

Both write `explore-out/report.html` (and, without a scenario, the
scenario they generated: `explore-out/scenario.yaml`, replayable with
`--scenario`); `--max-plans` keeps a campaign the same size on any machine.

Then copy `{file}` into the directory `rekon run --plugins DIR` watches; the
host loads it (and reloads it when the file changes). `rekon plugin plan
{file}` shows what it would do in your clusters without writing anything.

- `src/lib.rs`: the registration (what the plugin reads and may write) and
  `reconcile`. `rekon_sdk` re-exports `k8s_openapi`, `kube`, `serde`,
  `serde_json` and `schemars`: use them through it.
- `tests/reconcile.rs`: the plugin against a fake world of clusters.
- `explore/scenario.yaml`: what `rekon plugin explore` does around the
  plugin while it injects crashes, stale reads and failing writes; a
  finding leaves recorded cases to keep in the golden tests.
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
        ) + &if self.admission {
            self.admission_readme(
                "`impl Admission` in `src/lib.rs` (tested in `tests/admission.rs`)",
            )
        } else {
            String::new()
        }
    }
}

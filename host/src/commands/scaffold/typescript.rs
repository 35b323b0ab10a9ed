//! The TypeScript package: `npm install && npm test && npm run build`,
//! depending on the SDK of a rekon checkout by path (`@rekon/sdk` as a
//! `file:` dependency).

use std::path::Path;

use super::project::Project;

/// The files of the package, relative to its directory; `sdk` is the
/// checkout's `sdk/typescript`.
pub(super) fn files(project: &Project, sdk: &Path) -> Vec<(String, String)> {
    project.typescript_files(sdk)
}

impl Project {
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
                "build": format!("rekon-build src/component.ts -o {wasm} --wit {}", sdk.join("wit").display()),
                // Scenario-free: inputs generated from the registration and
                // the CRD; bounded by count, the same plans on any machine.
                "explore": format!("rekon plugin explore {wasm} --max-plans 40 --out explore-out"),
                "explore:scenario": format!("rekon plugin explore {wasm} --scenario explore/scenario.yaml --out explore-out")
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
            ("src/component.ts".to_owned(), if self.admission {
                "// The component's entry: `npm run build` bundles it into the .wasm.\n// Exporting `admission` too makes it a component of world\n// `admission-plugin` (rekon-build reads the exports).\nimport { exportAdmission, exportPlugin } from \"@rekon/sdk/component\";\nimport { admission as handlers } from \"./admission.js\";\nimport { plugin } from \"./plugin.js\";\n\nexport const guest = exportPlugin(plugin);\nexport const admission = exportAdmission(handlers);\n".to_owned()
            } else {
                "// The component's entry: `npm run build` bundles it into the .wasm.\nimport { exportPlugin } from \"@rekon/sdk/component\";\nimport { plugin } from \"./plugin.js\";\n\nexport const guest = exportPlugin(plugin);\n".to_owned()
            }),
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
npm install                          # @rekon/sdk copied from {sdk} (.npmrc: install-links), componentize-qjs, esbuild
npm test                             # native, with the SDK's test kit (node --test)
npm run build                        # -> {wasm}, on QuickJS
rekon plugin inspect {wasm}
npm run explore                      # rekon plugin explore {wasm}, no scenario: inputs generated from its schema
npm run explore:scenario             # ... --scenario explore/scenario.yaml: its bugs under faults
```

Both write `explore-out/report.html` (and, without a scenario, the
scenario they generated: `explore-out/scenario.yaml`, replayable with
`--scenario`). A plan of a TypeScript component costs more than a Rust
one's; `--max-plans` keeps a campaign the same size on any machine.

`npm run build -- --engine starlingmonkey` builds on SpiderMonkey instead
(componentize-js: a larger component, slower to load and to call; see the
SDK's docs, `docs/plugins/typescript.md`). After changing the SDK in the
checkout, `npm install` again: the project holds a copy.

Then copy `{wasm}` into the directory `rekon run --plugins DIR` watches.

- `src/plugin.ts`: the registration and `reconcile`; `src/component.ts`
  exports it as the component.
- `test/plugin.test.ts`: the plugin against a fake world of clusters.
- `explore/scenario.yaml`: what `rekon plugin explore` does around the
  plugin while it injects crashes, stale reads and failing writes.
"#, name = self.name, sdk = sdk.display())),
            ("explore/scenario.yaml".to_owned(), self.scenario_yaml()),
            (".gitignore".to_owned(), "node_modules/\ndist/\nexplore-out/\n".to_owned()),
            // npm installs a `file:` directory as a link by default, and node
            // then resolves the SDK's own imports (componentize-qjs, esbuild,
            // kubernetes-types) from the checkout, where nothing is
            // installed. `install-links` packs the SDK into node_modules
            // like a registry package, its dependencies installed beside it.
            // npm leaves links out of a pack, so the SDK's `wit` link does
            // not come along: the build script names the checkout's WIT.
            (".npmrc".to_owned(), "# @rekon/sdk is copied into node_modules with its dependencies, not linked\n# to the rekon checkout (whose SDK folder has none installed).\ninstall-links=true\n".to_owned()),
        ];
        if p.builtin.is_none() {
            files.push(("crd.json".to_owned(), self.crd_json()));
        }
        if self.admission {
            files.push(("src/admission.ts".to_owned(), self.typescript_admission()));
            files.push((
                "test/admission.test.ts".to_owned(),
                self.typescript_admission_test(&object),
            ));
            if let Some((_, readme)) = files.iter_mut().find(|(path, _)| path == "README.md") {
                readme.push_str(&self.admission_readme("`src/admission.ts` (exported in `src/component.ts`, tested in `test/admission.test.ts`)"));
            }
        }
        files
    }
}

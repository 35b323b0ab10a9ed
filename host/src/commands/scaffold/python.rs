//! The Python project: `pip install -e . && pytest && rekon-py-build ...`,
//! depending on the SDK of a rekon checkout by path (`rekon-sdk @
//! file://...`).

use std::path::Path;

use super::project::Project;

/// The files of the project, relative to its directory; `sdk` is the
/// checkout's `sdk/python`.
pub(super) fn files(project: &Project, sdk: &Path) -> Vec<(String, String)> {
    project.python_files(sdk)
}

impl Project {
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

from rekon_sdk import {imports}

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
{admission}
try:  # the component's exports; wit_world exists only inside componentize-py
    from rekon_sdk.component import export_plugin
{export}
    Guest = export_plugin(plugin)
except ImportError:
    pass
"#,
                    name = self.name,
                    imports = if self.admission {
                        "PRIMARY, AdmissionError, AdmissionHandlers, Apply, ObjectRef, Outcome, Registration, ResourceType, Verdict, action"
                    } else {
                        "PRIMARY, Apply, ObjectRef, Outcome, Registration, ResourceType, action"
                    },
                    admission = if self.admission {
                        self.python_admission()
                    } else {
                        String::new()
                    },
                    export = if self.admission {
                        "    from rekon_sdk.component_admission import export_admission\n\n    Admission = export_admission(admission)"
                    } else {
                        ""
                    },
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
rekon plugin explore {wasm} --max-plans 40 --out explore-out   # no scenario: inputs generated from its schema
rekon plugin explore {wasm} --scenario explore/scenario.yaml --out explore-out   # its bugs under faults
```

Both write `explore-out/report.html` (and, without a scenario, the
scenario they generated: `explore-out/scenario.yaml`, replayable with
`--scenario`); `--max-plans` keeps a campaign the same size on any machine.

Then copy `{wasm}` into the directory `rekon run --plugins DIR` watches.

- `{module}.py`: the registration, `reconcile`, and `Guest`, the component's export.
- `tests/test_plugin.py`: the plugin against a fake world of clusters.
- `explore/scenario.yaml`: what `rekon plugin explore` does around the
  plugin while it injects crashes, stale reads and failing writes.
"#,
                    name = self.name,
                    sdk = sdk.display()
                ),
            ),
            ("explore/scenario.yaml".to_owned(), self.scenario_yaml()),
            (
                ".gitignore".to_owned(),
                "dist/\n__pycache__/\n*.egg-info/\nexplore-out/\n".to_owned(),
            ),
        ];
        if p.builtin.is_none() {
            files.push(("crd.json".to_owned(), self.crd_json()));
        }
        if self.admission {
            let (object, _, _) = self.sample_object();
            files.push((
                "tests/test_admission.py".to_owned(),
                self.python_admission_test(&object),
            ));
            if let Some((_, readme)) = files.iter_mut().find(|(path, _)| path == "README.md") {
                readme.push_str(&self.admission_readme(&format!("The handlers in `{module}.py` (exported as `Admission`, tested in `tests/test_admission.py`)")));
            }
        }
        files
    }
}

/// The plural of a built-in kind the scaffold knows.
fn builtin_plural(kind: &str) -> String {
    kind.to_ascii_lowercase() + "s"
}

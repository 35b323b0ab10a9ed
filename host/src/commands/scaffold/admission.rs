//! `rekon plugin new --admission`: the API side of the generated plugin, in
//! each language — a mutating webhook that defaults an owner label and a
//! validating one that refuses an empty owner (422 with a field error) and
//! warns about a defaulted one — with a test of both through the SDK's
//! test kit. The rules the SDKs declare are checked by the host at load
//! (`rekon plugin inspect` shows them).

use super::project::Project;

/// The value `mutate` defaults the owner label to.
const NOBODY: &str = "nobody";

impl Project {
    /// The label the admission example defaults and checks.
    pub(super) fn owner_label(&self) -> String {
        format!("{}.example.com/owner", self.name)
    }

    /// `impl Admission` for the Rust crate's plugin type.
    pub(super) fn rust_admission(&self, kind: &str) -> String {
        format!(
            r#"
/// The label `mutate` defaults and `validate` checks.
pub const OWNER_LABEL: &str = "{label}";

/// The API side: served by the host as admission webhooks
/// (`rekon run --webhook-addr`, configured by `rekon webhooks`).
impl Admission for {ty} {{
    fn rules() -> Vec<AdmissionRule> {{
        vec![
            AdmissionRule::validate::<{kind}>("owner"),
            AdmissionRule::mutate::<{kind}>("default-owner").operations(&[Operation::Create]),
        ]
    }}

    /// Refuses an empty owner label (422: kubectl prints an invalid
    /// object); warns about a defaulted one.
    fn validate(_: &Context, req: &AdmissionRequest) -> Result<Verdict, Error> {{
        let Some(object) = req.object::<{kind}>()? else {{
            return Ok(Verdict::allow());
        }};
        Ok(match object.labels().get(OWNER_LABEL).map(String::as_str) {{
            Some("") => Verdict::deny(format!("{{}} has an empty owner", req.name))
                .code(422)
                .field("metadata.labels", format!("{{OWNER_LABEL}} must not be empty")),
            Some("{nobody}") => Verdict::allow().warn(format!("{{}} has no owner: set the label {{OWNER_LABEL}}", req.name)),
            _ => Verdict::allow(),
        }})
    }}

    /// Defaults the owner label on a create (the host turns the returned
    /// object into the JSON Patch).
    fn mutate(_: &Context, req: &AdmissionRequest) -> Result<Mutation, Error> {{
        let Some(mut object) = req.object::<{kind}>()? else {{
            return Ok(Mutation::unchanged());
        }};
        if object.labels().contains_key(OWNER_LABEL) {{
            return Ok(Mutation::unchanged());
        }}
        object.labels_mut().insert(OWNER_LABEL.to_owned(), "{nobody}".to_owned());
        Mutation::object(&object)
    }}
}}
"#,
            label = self.owner_label(),
            ty = self.type_name(),
            nobody = NOBODY,
        )
    }

    /// `tests/admission.rs` of the Rust crate; `sample` is the sample
    /// object's JSON, `import` the primary type's `use`.
    pub(super) fn rust_admission_test(&self, kind: &str, sample: &str, import: &str) -> String {
        format!(
            r#"//! The webhooks against the SDK's test kit, as the host calls them.

use {krate}::{{OWNER_LABEL, {ty}}};
use rekon_sdk::prelude::*;
use rekon_sdk::serde_json::json;
use rekon_sdk::testkit::World;
{import}

#[test]
fn mutate_defaults_the_owner_and_validate_checks_it() {{
    let rules = World::admission_rules::<{ty}>().expect("the host would accept the rules");
    assert_eq!(rules.len(), 2);
    let world = World::new().primary("main");
    let object: {kind} = rekon_sdk::serde_json::from_value(json!({sample})).expect("decodes");

    let mutation = world.mutate::<{ty}>(&AdmissionRequest::create("main", &object));
    let defaulted: {kind} = mutation.decode().expect("decodes").expect("changed");
    assert_eq!(defaulted.labels()[OWNER_LABEL], "{nobody}");
    let verdict = world.validate::<{ty}>(&AdmissionRequest::create("main", &defaulted));
    assert!(verdict.is_allowed() && verdict.warnings().len() == 1, "{{verdict:?}}");

    let mut empty = defaulted.clone();
    empty.labels_mut().insert(OWNER_LABEL.to_owned(), String::new());
    let verdict = world.validate::<{ty}>(&AdmissionRequest::update("main", &defaulted, &empty));
    let denial = verdict.denial().expect("denied");
    assert_eq!((denial.code, denial.field_errors[0].0.as_str()), (422, "metadata.labels"));
}}
"#,
            krate = self.crate_ident(),
            ty = self.type_name(),
            nobody = NOBODY,
        )
    }

    /// `src/admission.ts` of the TypeScript package.
    pub(super) fn typescript_admission(&self) -> String {
        format!(
            r#"// The API side: served by the host as admission webhooks
// (`rekon run --webhook-addr`, configured by `rekon webhooks`).
import {{ type Admission, AdmissionRule, Mutation, Verdict }} from "@rekon/sdk";
import {{ PRIMARY }} from "./plugin.js";

/** The label `mutate` defaults and `validate` checks. */
export const OWNER_LABEL = "{label}";

export const admission: Admission = {{
  rules: () => [AdmissionRule.validate("owner", PRIMARY), AdmissionRule.mutate("default-owner", PRIMARY).withOperations("create")],

  // Refuses an empty owner label (422: kubectl prints an invalid object);
  // warns about a defaulted one.
  validate(_ctx, req) {{
    const owner = req.object?.metadata?.labels?.[OWNER_LABEL];
    if (owner === "") {{
      return Verdict.deny(`${{req.name}} has an empty owner`).withCode(422).withField("metadata.labels", `${{OWNER_LABEL}} must not be empty`);
    }}
    if (owner === "{nobody}") return Verdict.allow().withWarning(`${{req.name}} has no owner: set the label ${{OWNER_LABEL}}`);
    return Verdict.allow();
  }},

  // Defaults the owner label on a create (the host turns the returned
  // object into the JSON Patch).
  mutate(_ctx, req) {{
    const object = req.object;
    if (object === undefined || object.metadata?.labels?.[OWNER_LABEL] !== undefined) return Mutation.unchanged();
    return Mutation.object({{ ...object, metadata: {{ ...object.metadata, labels: {{ ...object.metadata?.labels, [OWNER_LABEL]: "{nobody}" }} }} }});
  }},
}};
"#,
            label = self.owner_label(),
            nobody = NOBODY,
        )
    }

    /// `test/admission.test.ts` of the TypeScript package.
    pub(super) fn typescript_admission_test(&self, sample: &str) -> String {
        format!(
            r#"// The webhooks against the SDK's test kit, as the host calls them.
import assert from "node:assert/strict";
import {{ test }} from "node:test";
import {{ type KubeObject, admissionRequest }} from "@rekon/sdk";
import {{ World }} from "@rekon/sdk/testkit";
import {{ OWNER_LABEL, admission }} from "../src/admission.js";
import {{ PRIMARY, plugin }} from "../src/plugin.js";

test("mutate defaults the owner and validate checks it", () => {{
  assert.equal(admission.rules().length, 2);
  const world = new World().primary("main");
  const object = {sample} as KubeObject;
  const mutation = world.mutate(admission, admissionRequest.create(PRIMARY, "main", object), plugin);
  const defaulted = mutation.object as KubeObject;
  assert.equal(defaulted.metadata?.labels?.[OWNER_LABEL], "{nobody}");
  const verdict = world.validate(admission, admissionRequest.create(PRIMARY, "main", defaulted), plugin);
  assert.ok(verdict.allowed && verdict.warnings.length === 1, JSON.stringify(verdict));
  const empty = {{ ...defaulted, metadata: {{ ...defaulted.metadata, labels: {{ [OWNER_LABEL]: "" }} }} }};
  const denied = world.validate(admission, admissionRequest.update(PRIMARY, "main", defaulted, empty), plugin);
  assert.deepEqual([denied.denial?.code, denied.denial?.fieldErrors[0]?.path], [422, "metadata.labels"]);
}});
"#,
            nobody = NOBODY,
        )
    }

    /// The Python module's admission handlers (after `plugin = Plugin()`).
    pub(super) fn python_admission(&self) -> String {
        format!(
            r#"
# The API side: served by the host as admission webhooks
# (`rekon run --webhook-addr`, configured by `rekon webhooks`).
OWNER_LABEL = "{label}"
admission = AdmissionHandlers()


@admission.validate(KIND)
def owner(ctx, req):
    """Refuses an empty owner label (422: kubectl prints an invalid object);
    warns about a defaulted one."""
    labels = ((req.object or {{}}).get("metadata") or {{}}).get("labels") or {{}}
    if labels.get(OWNER_LABEL) == "":
        raise AdmissionError(f"{{req.name}} has an empty owner", code=422, fields={{"metadata.labels": f"{{OWNER_LABEL}} must not be empty"}})
    if labels.get(OWNER_LABEL) == "{nobody}":
        return Verdict.allow(f"{{req.name}} has no owner: set the label {{OWNER_LABEL}}")
    return None


@admission.mutate(KIND, id="default-owner", operations=("create",))
def default_owner(ctx, req):
    """Defaults the owner label on a create (the host turns the returned
    object into the JSON Patch)."""
    labels = req.object.setdefault("metadata", {{}}).setdefault("labels", {{}})
    if OWNER_LABEL in labels:
        return None
    labels[OWNER_LABEL] = "{nobody}"
    return req.object

"#,
            label = self.owner_label(),
            nobody = NOBODY,
        )
    }

    /// `tests/test_admission.py` of the Python project.
    pub(super) fn python_admission_test(&self, sample: &str) -> String {
        format!(
            r#""""The webhooks against the SDK's test kit, as the host calls them."""
from rekon_sdk import AdmissionRequest
from rekon_sdk.testkit import World

from {module} import KIND, OWNER_LABEL, admission, plugin


def test_mutate_defaults_the_owner_and_validate_checks_it():
    assert [r.name for r in admission.rules()] == ["owner", "default-owner"]
    world = World().primary("main")
    mutation = world.mutate(admission, AdmissionRequest.create(KIND, "main", {sample}), plugin)
    defaulted = mutation.object
    assert defaulted["metadata"]["labels"][OWNER_LABEL] == "{nobody}"
    verdict = world.validate(admission, AdmissionRequest.create(KIND, "main", defaulted), plugin)
    assert verdict.allowed and len(verdict.warnings) == 1, verdict
    empty = {{**defaulted, "metadata": {{**defaulted["metadata"], "labels": {{OWNER_LABEL: ""}}}}}}
    denied = world.validate(admission, AdmissionRequest.update(KIND, "main", defaulted, empty), plugin)
    assert (denied.denial.code, denied.denial.field_errors[0][0]) == (422, "metadata.labels")
"#,
            module = self.crate_ident(),
            nobody = NOBODY,
        )
    }

    /// The README's paragraph about the webhooks.
    pub(super) fn admission_readme(&self, files: &str) -> String {
        format!(
            r"
## Admission

{files} declare two webhooks served by
`rekon run --webhook-addr`: `default-owner` (mutating, creates) sets the
label `{label}` to `{nobody}` when it is missing, and `owner`
(validating) refuses an empty one and warns about `{nobody}`.
`rekon plugin inspect` lists them as the host read them (it checks the
rules at load); `rekon webhooks DIR` prints their webhook configurations.
",
            label = self.owner_label(),
            nobody = NOBODY,
        )
    }
}

//! The CRD rules (`x-kubernetes-validations`) of the plugin's own CRDs on
//! the writes it makes to the world: evaluated with kube-cel exactly as
//! kube-sim evaluates them on every write (`rekon_rules::cel::crd_rules`,
//! the one implementation both run), with the old object for transition
//! rules and ratcheting, and refused in the API server's words
//! (`Gadget.gadgets.rekon.dev "x" is invalid: spec.size: Invalid value:
//! "integer": must be at most 10`). The schema's other checks (types,
//! enums, bounds) are not made here.

use serde_json::Value;

use rekon_rules::cel::crd_rules::{Rules, invalid_message};

use super::error::TestkitError;
use super::store::Key;
use crate::registration::Registration;

/// Checks `new` (which replaced `old`, none on a create) at `key` against
/// the rules of the registration's CRD of its group and kind, at the
/// version of its `apiVersion`; nothing to check for another kind.
///
/// # Errors
/// [`TestkitError::Invalid`] with the server's message.
pub(super) fn check(
    reg: &Registration,
    key: &Key,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), TestkitError> {
    let Some(version) = new
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(|v| v.rsplit('/').next().unwrap_or(v))
    else {
        return Ok(());
    };
    let Some(schema) = reg.crds.iter().find_map(|crd| {
        let spec = crd.get("spec")?;
        (spec.get("group")?.as_str()? == key.group
            && spec.pointer("/names/kind")?.as_str()? == key.kind)
            .then_some(())?;
        spec.get("versions")?
            .as_array()?
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
            .pointer("/schema/openAPIV3Schema")
    }) else {
        return Ok(());
    };
    let Some(rules) = Rules::compile(schema) else {
        return Ok(());
    };
    let (errors, _ratcheted) = rules.validate(new, old);
    if errors.is_empty() {
        return Ok(());
    }
    Err(TestkitError::Invalid {
        target: key.to_string(),
        message: invalid_message(&key.kind, &key.group, &key.name, &errors),
    })
}

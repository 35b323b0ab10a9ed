//! Step 3, check the grant: what `spec.permissions` grants, and whether a
//! module declares nothing beyond it. A module from a registry never
//! widens its own powers.

use super::error::PluginObjectError;
use crate::action::Permission;
use crate::source::plugin_crd::{GrantedPermission, PluginSpec, exceeding};

/// The permissions `spec` grants.
///
/// # Errors
/// [`PluginObjectError::InvalidGrant`]: a granted permission does not
/// parse.
pub(super) fn granted(spec: &PluginSpec) -> Result<Vec<Permission>, PluginObjectError> {
    spec.permissions
        .iter()
        .map(GrantedPermission::to_permission)
        .collect::<Result<_, _>>()
        .map_err(PluginObjectError::InvalidGrant)
}

/// Accepts a module that declares `declared` only within `grant`.
///
/// # Errors
/// [`PluginObjectError::ExceedsGrant`], naming each declared verb the grant
/// does not cover.
pub(super) fn within_grant(
    declared: &[Permission],
    grant: &[Permission],
) -> Result<(), PluginObjectError> {
    let exceeds = exceeding(declared, grant);
    if exceeds.is_empty() {
        Ok(())
    } else {
        Err(PluginObjectError::ExceedsGrant(exceeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(permissions: serde_json::Value) -> PluginSpec {
        serde_json::from_value(serde_json::json!({
            "module": "r.example/pools:1",
            "permissions": permissions,
        }))
        .expect("a Plugin spec")
    }

    fn config_maps(verbs: &[&str]) -> serde_json::Value {
        serde_json::json!([{
            "resource": {"apiVersion": "v1", "kind": "ConfigMap"},
            "verbs": verbs,
            "clusters": "Primary",
        }])
    }

    #[test]
    fn a_grant_parses_into_permissions() {
        let grant = granted(&spec(config_maps(&["get", "patch"]))).expect("a grant");
        assert_eq!(grant.len(), 1);
        assert_eq!(grant[0].resource.kind, "ConfigMap");
    }

    #[test]
    fn a_grant_that_does_not_parse_is_invalid() {
        let mut bad = config_maps(&["get"]);
        bad[0]["clusters"] = serde_json::json!(3);
        let err = granted(&spec(bad)).expect_err("clusters: 3");
        assert_eq!(err.reason(), "InvalidGrant");
        assert!(
            err.to_string()
                .starts_with("spec.permissions: clusters must be"),
            "{err}"
        );
    }

    #[test]
    fn a_module_within_its_grant_is_accepted_and_beyond_it_refused() {
        let grant = granted(&spec(config_maps(&["get", "list", "watch"]))).expect("grant");
        let reads = granted(&spec(config_maps(&["get", "watch"]))).expect("declared");
        within_grant(&reads, &grant).expect("within the grant");
        let writes = granted(&spec(config_maps(&["get", "patch"]))).expect("declared");
        let err = within_grant(&writes, &grant).expect_err("patch is not granted");
        assert_eq!(err.reason(), "PermissionsExceedGrant");
        assert!(err.to_string().contains("patch on ConfigMap"), "{err}");
        assert!(!err.is_transient());
    }
}

//! `rekon policies DIR`: the CEL admission policies the plugins of a
//! directory declare (`wit/policies.wit`), each as a
//! ValidatingAdmissionPolicy and its ValidatingAdmissionPolicyBinding
//! (admissionregistration.k8s.io/v1), which the API server evaluates
//! itself: no webhook in the request path.
//!
//! Both objects are named `<policy>.<plugin>.rekon.dev` and labelled as
//! the webhook configurations are (`app.kubernetes.io/managed-by: rekon`,
//! `rekon.dev/plugin`). The policy: `failurePolicy`,
//! `matchConstraints.resourceRules` (one per resource: group, version,
//! plural, scope, operations), `matchConditions`, `validations`
//! (`expression`, `message`, `messageExpression`, `reason`). The binding:
//! `policyName` and `validationActions: [Deny]`. Every expression was
//! compiled with kube-cel when the plugin loaded.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::webhooks::{Result, typed};
use crate::action::Scope;
use crate::plugin::CelPolicy;

/// The plugins of `dir` that declare policies, with them, by plugin name.
///
/// # Errors
/// When the directory cannot be read or a plugin does not load (one whose
/// CEL does not compile does not load).
pub fn load_policies(dir: &Path) -> Result<BTreeMap<String, Vec<CelPolicy>>> {
    Ok(super::webhooks::load_api_side(dir)?.policies)
}

fn metadata(name: &str, plugin: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(
            [
                ("app.kubernetes.io/managed-by", "rekon"),
                ("rekon.dev/plugin", plugin),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        ..ObjectMeta::default()
    }
}

/// The ValidatingAdmissionPolicy and binding of one policy of `plugin`.
#[must_use]
pub fn policy_objects(
    plugin: &str,
    policy: &CelPolicy,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let name = rekon_rules::policies::policy_object_name(&policy.name, plugin);
    let rules = policy
        .resources
        .iter()
        .map(|r| NamedRuleWithOperations {
            api_groups: Some(vec![r.group.clone()]),
            api_versions: Some(vec![r.version.clone()]),
            operations: Some(policy.operations.clone()),
            resources: Some(vec![r.plural.clone()]),
            scope: Some(
                match r.scope {
                    Scope::Namespaced => "Namespaced",
                    Scope::Cluster => "Cluster",
                }
                .to_owned(),
            ),
            ..NamedRuleWithOperations::default()
        })
        .collect();
    let conditions = (!policy.match_conditions.is_empty()).then(|| {
        policy
            .match_conditions
            .iter()
            .map(|c| MatchCondition {
                name: c.name.clone(),
                expression: c.expression.clone(),
            })
            .collect()
    });
    let vap = ValidatingAdmissionPolicy {
        metadata: metadata(&name, plugin),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some(policy.failure_policy.clone()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(rules),
                ..MatchResources::default()
            }),
            match_conditions: conditions,
            validations: Some(
                policy
                    .validations
                    .iter()
                    .map(|v| Validation {
                        expression: v.expression.clone(),
                        message: v.message.clone(),
                        message_expression: v.message_expression.clone(),
                        reason: v.reason.clone(),
                    })
                    .collect(),
            ),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: metadata(&name, plugin),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.clone()),
            validation_actions: Some(vec!["Deny".to_owned()]),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    };
    (vap, binding)
}

/// Every policy of `plugins` with its binding, as one YAML stream (each
/// policy before its binding).
///
/// # Errors
/// When YAML cannot be written.
pub fn policies_yaml(plugins: &BTreeMap<String, Vec<CelPolicy>>) -> Result<String> {
    let mut out = String::new();
    for (plugin, policies) in plugins {
        for policy in policies {
            let (vap, binding) = policy_objects(plugin, policy);
            for doc in [typed(vap)?, typed(binding)?] {
                out.push_str("---\n");
                out.push_str(&doc);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Resource;
    use crate::plugin::{CelCondition, CelValidation};

    #[test]
    fn a_policy_becomes_a_validating_admission_policy_and_its_binding() {
        let policy = CelPolicy {
            name: "size".into(),
            resources: vec![Resource {
                group: "gadgets.rekon.dev".into(),
                version: "v1".into(),
                kind: "Gadget".into(),
                plural: "gadgets".into(),
                scope: Scope::Namespaced,
            }],
            operations: vec!["CREATE".into(), "UPDATE".into()],
            failure_policy: "Fail".into(),
            match_conditions: vec![CelCondition {
                name: "not-system".into(),
                expression: "request.namespace != 'kube-system'".into(),
            }],
            validations: vec![CelValidation {
                expression: "object.spec.size <= 10".into(),
                message: Some("at most 10".into()),
                message_expression: None,
                reason: Some("Invalid".into()),
            }],
        };
        let yaml = policies_yaml(&BTreeMap::from([("gadgets".to_owned(), vec![policy])])).unwrap();
        let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 2, "{yaml}");
        assert_eq!(
            docs[0],
            serde_json::json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "size.gadgets.rekon.dev", "labels": {
                    "app.kubernetes.io/managed-by": "rekon", "rekon.dev/plugin": "gadgets"}},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConditions": [{"name": "not-system", "expression": "request.namespace != 'kube-system'"}],
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["gadgets.rekon.dev"], "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["gadgets"],
                        "scope": "Namespaced"}]},
                    "validations": [{"expression": "object.spec.size <= 10",
                        "message": "at most 10", "reason": "Invalid"}]
                }
            })
        );
        assert_eq!(docs[1]["kind"], "ValidatingAdmissionPolicyBinding");
        assert_eq!(docs[1]["metadata"]["name"], "size.gadgets.rekon.dev");
        assert_eq!(
            docs[1]["spec"],
            serde_json::json!({"policyName": "size.gadgets.rekon.dev", "validationActions": ["Deny"]})
        );
    }
}

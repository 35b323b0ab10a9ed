//! What a project is generated from, whatever its language: the plugin's
//! name and primary resource, and what is derived from them (type and
//! module names, the label it stamps, a sample object, a CRD).

/// The primary resource of the generated plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Primary {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) kind: String,
    /// The k8s-openapi module path for built-in kinds; `None` for a custom
    /// resource the plugin defines (and owns the CRD of).
    pub(super) builtin: Option<&'static str>,
    pub(super) namespaced: bool,
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
    /// `GROUP/VERSION/KIND`, or `VERSION/KIND` for the core group (`core`
    /// names it too); the error says what is wrong with `text`.
    pub(super) fn parse(text: &str) -> Result<Self, &'static str> {
        let parts: Vec<&str> = text.split('/').collect();
        let (group, version, kind) = match parts.as_slice() {
            [version, kind] => ("", *version, *kind),
            [group, version, kind] => (*group, *version, *kind),
            _ => return Err("expected two or three '/'-separated parts"),
        };
        let group = if group == "core" { "" } else { group };
        if !group.is_empty() && !rekon_rules::registration::is_dns_subdomain(group) {
            return Err("the group is not a DNS subdomain");
        }
        if !rekon_rules::registration::is_dns_label(version) {
            return Err("the version is not a DNS label (v1, v1beta1)");
        }
        let mut chars = kind.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_uppercase())
            || !chars.all(|c| c.is_ascii_alphanumeric())
        {
            return Err("the kind is not CamelCase (ConfigMap, Widget)");
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
            return Err(
                "not a built-in kind the scaffold knows, and a custom resource needs a dotted group (widgets.example.com)",
            );
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

/// The plugin a project is generated for.
#[derive(Debug, Clone)]
pub(super) struct Project {
    pub(super) name: String,
    pub(super) primary: Primary,
    /// `--admission`: the plugin also serves admission webhooks
    /// (`admission.rs`).
    pub(super) admission: bool,
}

impl Project {
    pub(super) fn crate_ident(&self) -> String {
        self.name.replace('-', "_")
    }

    pub(super) fn type_name(&self) -> String {
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

    pub(super) fn label(&self) -> String {
        format!("{}.example.com/seen", self.name)
    }

    pub(super) fn api_version(&self) -> String {
        if self.primary.group.is_empty() {
            self.primary.version.clone()
        } else {
            format!("{}/{}", self.primary.group, self.primary.version)
        }
    }

    /// A minimal CRD for a custom primary (`spec.message`, status kept).
    pub(super) fn crd_json(&self) -> String {
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

    pub(super) fn sample_object(&self) -> (String, String, &'static str) {
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
}

impl Project {
    /// `explore/scenario.yaml`: the workload `rekon plugin explore` runs
    /// the plugin through (the sample object applied, changed, deleted;
    /// the plugin's own CRD comes from its registration).
    pub(super) fn scenario_yaml(&self) -> String {
        let (object, _, _) = self.sample_object();
        let p = &self.primary;
        let namespace = if p.namespaced {
            "namespace: default, "
        } else {
            ""
        };
        let changed = object.replacen(
            r#""metadata": {"name": "demo""#,
            r#""metadata": {"labels": {"example.com/changed": "true"}, "name": "demo""#,
            1,
        );
        format!(
            r#"# What happens around {name} while `rekon plugin explore` runs it through
# the faults that break controllers (crashes between writes, stale reads,
# unobserved states, failing writes, reordered deliveries): see rekon's
# docs/plugins/exploring.md. Add the steps your plugin's users take.
clusters: [main]
steps:
  - apply: {{cluster: main, object: {object}}}
  - settle: {{}}
  - apply: {{cluster: main, object: {changed}}}
  - settle: {{}}
  - delete: {{cluster: main, apiVersion: {api}, kind: {kind}, {namespace}name: demo}}
  - settle: {{}}
"#,
            name = self.name,
            api = self.api_version(),
            kind = p.kind,
        )
    }
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
}

//! Operator permission policy: the operator narrows what each plugin may do,
//! beyond what the plugin declares (`rekon run --policy FILE`).
//!
//! A plugin's **effective permissions** are its declared permissions
//! intersected with every policy entry that applies to it: the entry `"*"`
//! (defaults for every plugin) and the entry under its own name. Entries
//! only ever narrow; nothing in a policy grants what a plugin did not
//! declare.
//!
//! ```yaml
//! plugins:
//!   "*":                        # applies to every plugin
//!     deny:
//!       - {group: "", kind: Secret, verbs: ["*"]}
//!   nodepool:                   # applies to the plugin named nodepool
//!     clusters: [main]          # may write only in these clusters ("*": any)
//!     allow:                    # if present: the only verbs it may keep
//!       - {group: "", kind: Node, verbs: [get, patch]}
//!       - {group: node.k8s.io, kind: RuntimeClass, verbs: ["*"]}
//!     deny:                     # removed from what is declared (and allowed)
//!       - {group: "", kind: Node, verbs: [delete]}
//! ```
//!
//! - `clusters`: the clusters the plugin may write in (names, or `"*"`);
//!   absent: no restriction. `[]`: nowhere (a read-only plugin).
//! - `allow`: rules that every kept permission verb must match; absent: no
//!   restriction. Declared verbs outside it are dropped.
//! - `deny`: rules whose verbs are dropped from the declared permissions.
//! - A rule names `group` (`""` for the core group, or `"*"`), `kind`
//!   (`Node`, or `"*"`) and `verbs` (RBAC verbs, or `"*"`). A rule covers the
//!   resource's status subresource too.
//! - A plugin whose primary resource or a watched resource is denied
//!   `list` or `watch` is refused at load: the host would otherwise read
//!   objects on its behalf that the operator withheld. (Allow lists govern
//!   the declared permissions only, not the host's caches.)
//!
//! Unknown keys are errors (a typo must not silently widen anything), and
//! so are unknown verbs and empty rules.
//!
//! The checks: [`super::capability`] asks [`PluginPolicy::refusal`] for
//! every action of every outcome, after the declared-permission check;
//! `rekon plugin inspect --policy` and `rekon rbac --policy` use
//! [`PluginPolicy::narrow`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;

use crate::action::{ClusterSet, Permission, Registration, Resource, Verb, describe_resource};

/// Matches any group, kind, verb, cluster or plugin.
pub const ANY: &str = "*";

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("failed to read operator policy {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML/JSON of the policy schema (syntax, unknown or missing field).
    #[error("failed to parse operator policy {source_name}: {message}")]
    Parse {
        /// The file (or label) the policy came from.
        source_name: String,
        /// The parser's message (names the field and position).
        message: String,
    },
    /// Well-formed, but a value is not acceptable.
    #[error("invalid operator policy {source_name}: {field}: {reason}")]
    Invalid {
        /// The file (or label) the policy came from.
        source_name: String,
        /// Where: `plugins.nodepool.deny[0].verbs[1]`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// The file's schema (see the module docs).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    plugins: BTreeMap<String, PolicyEntry>,
}

/// One entry of `plugins:` (a plugin name, or `"*"` for every plugin).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// The clusters the plugin may write in (`"*"`: any); `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<String>>,
    /// When present, every kept permission verb must match one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<PolicyRule>>,
    /// Verbs removed from the declared permissions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<PolicyRule>,
}

/// Verbs on a resource type, by API group and kind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// API group (`""`: core), or `"*"`.
    pub group: String,
    /// Kind (`Node`), or `"*"`.
    pub kind: String,
    /// RBAC verbs, or `"*"`.
    pub verbs: Vec<String>,
}

impl PolicyEntry {
    /// Why this entry refuses `verb` on `resource` (its allow list does not
    /// cover it, or a deny rule matches); `None` if it keeps the verb.
    fn verb_refusal(&self, resource: &Resource, verb: &str) -> Option<String> {
        if let Some(allow) = &self.allow
            && !allow.iter().any(|r| r.matches(resource, verb))
        {
            return Some(format!(
                "{verb} on {} is not in its allow list",
                describe_resource(resource)
            ));
        }
        let i = self.deny.iter().position(|r| r.matches(resource, verb))?;
        Some(format!(
            "deny[{i}] denies {verb} on {}",
            describe_resource(resource)
        ))
    }
}

impl PolicyRule {
    fn matches_resource(&self, resource: &Resource) -> bool {
        if self.group != ANY && self.group != resource.group {
            return false;
        }
        if self.kind == ANY {
            return true;
        }
        if !resource.kind.is_empty() {
            return self.kind == resource.kind;
        }
        // A resource named only by its plural: compare with the plural of
        // the rule's kind (kube's pluralization, as `rekon rbac` uses).
        let gvk = GroupVersionKind::gvk(&resource.group, "v1", &self.kind);
        ApiResource::from_gvk(&gvk).plural == resource.plural
    }

    fn matches(&self, resource: &Resource, verb: &str) -> bool {
        self.matches_resource(resource) && self.verbs.iter().any(|v| v == ANY || v == verb)
    }
}

/// A parsed, validated operator policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    source: Arc<str>,
    plugins: BTreeMap<String, PolicyEntry>,
}

impl Policy {
    /// Reads and validates a YAML (or JSON) policy file.
    ///
    /// # Errors
    /// When the file cannot be read, does not parse (unknown keys included)
    /// or names an unknown verb, an empty kind or an invalid plugin name.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// The policy of an optional file (`rekon run --policy`), shared by the
    /// runtime and every plugin it loads; `None` without a file.
    ///
    /// # Errors
    /// As [`Self::from_file`].
    pub fn load(path: Option<&Path>) -> Result<Option<Arc<Self>>, PolicyError> {
        path.map(|path| Self::from_file(path).map(Arc::new))
            .transpose()
    }

    /// Parses and validates a policy; `source` names it in errors.
    ///
    /// # Errors
    /// As [`Self::from_file`], without the I/O.
    pub fn from_yaml(text: &str, source: &str) -> Result<Self, PolicyError> {
        let file: PolicyFile = serde_yaml::from_str(text).map_err(|e| PolicyError::Parse {
            source_name: source.to_string(),
            message: e.to_string(),
        })?;
        let invalid = |field: String, reason: &str| PolicyError::Invalid {
            source_name: source.to_string(),
            field,
            reason: reason.to_string(),
        };
        for (name, entry) in &file.plugins {
            let at = format!("plugins.{name}");
            if name != ANY && !rekon_rules::registration::is_dns_label(name) {
                return Err(invalid(
                    at,
                    "not a plugin name (a DNS label) or \"*\" for every plugin",
                ));
            }
            for (i, cluster) in entry.clusters.iter().flatten().enumerate() {
                if cluster.is_empty() {
                    return Err(invalid(format!("{at}.clusters[{i}]"), "empty cluster name"));
                }
            }
            let lists = [
                ("allow", entry.allow.as_deref().unwrap_or(&[])),
                ("deny", &entry.deny),
            ];
            for (list, rules) in lists {
                for (i, rule) in rules.iter().enumerate() {
                    let at = format!("{at}.{list}[{i}]");
                    if rule.kind.is_empty() {
                        return Err(invalid(
                            format!("{at}.kind"),
                            "empty kind (name a kind, or \"*\")",
                        ));
                    }
                    if rule.verbs.is_empty() {
                        return Err(invalid(
                            format!("{at}.verbs"),
                            "no verbs (name RBAC verbs, or \"*\")",
                        ));
                    }
                    for (j, verb) in rule.verbs.iter().enumerate() {
                        if verb != ANY && Verb::parse(verb).is_none() {
                            return Err(invalid(
                                format!("{at}.verbs[{j}]"),
                                &format!(
                                    "unknown verb {verb:?} (get, list, watch, create, update, patch, delete or \"*\")"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(Self {
            source: Arc::from(source),
            plugins: file.plugins,
        })
    }

    /// Where the policy came from (its file).
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The entries by plugin name (`"*"` included).
    #[must_use]
    pub fn entries(&self) -> &BTreeMap<String, PolicyEntry> {
        &self.plugins
    }

    /// What applies to the plugin `name`: the `"*"` entry and its own entry;
    /// `None` when neither exists (the plugin keeps what it declared).
    #[must_use]
    pub fn for_plugin(&self, name: &str) -> Option<PluginPolicy> {
        let entries: Vec<(String, PolicyEntry)> = [ANY, name]
            .iter()
            .filter_map(|key| Some(((*key).to_string(), self.plugins.get(*key)?.clone())))
            .collect();
        (!entries.is_empty()).then(|| PluginPolicy {
            source: self.source.clone(),
            plugin: name.to_string(),
            entries,
        })
    }
}

/// The policy entries that apply to one plugin, resolved at load.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginPolicy {
    source: Arc<str>,
    plugin: String,
    /// `("*", entry)` and/or `(plugin name, entry)`.
    entries: Vec<(String, PolicyEntry)>,
}

impl PluginPolicy {
    /// Why the policy refuses `verb` on `resource` in `cluster`; `None` if
    /// it permits it. The message names the policy file and the entry.
    #[must_use]
    pub fn refusal(&self, resource: &Resource, verb: Verb, cluster: &str) -> Option<String> {
        let verb = verb.as_str();
        for (key, entry) in &self.entries {
            let by = format!("refused by operator policy {} (entry {key:?})", self.source);
            if let Some(clusters) = &entry.clusters
                && !clusters.iter().any(|c| c == ANY || c == cluster)
            {
                return Some(format!(
                    "{by}: plugin {} may write only in clusters [{}]",
                    self.plugin,
                    clusters.join(", ")
                ));
            }
            if let Some(why) = entry.verb_refusal(resource, verb) {
                return Some(format!("{by}: {why}"));
            }
        }
        None
    }

    /// The clusters the plugin may write in, when restricted (intersection
    /// of the entries' lists; `None`: any cluster).
    #[must_use]
    pub fn clusters(&self) -> Option<Vec<String>> {
        let mut out: Option<Vec<String>> = None;
        for list in self.entries.iter().filter_map(|(_, e)| e.clusters.as_ref()) {
            if list.iter().any(|c| c == ANY) {
                continue;
            }
            out = Some(match out {
                None => list.clone(),
                Some(prev) => prev.into_iter().filter(|c| list.contains(c)).collect(),
            });
        }
        out
    }

    fn keeps_verb(&self, resource: &Resource, verb: &str) -> bool {
        self.entries
            .iter()
            .all(|(_, e)| e.verb_refusal(resource, verb).is_none())
    }

    /// The declared permissions intersected with the policy: verbs it
    /// removes are dropped (permissions left without verbs disappear) and
    /// cluster sets are narrowed to the allowed clusters. `primary` names
    /// the primary cluster when known: a `primary` permission is then
    /// dropped if the primary is not allowed; when unknown it stays
    /// `primary` (the per-action check still refuses other clusters).
    #[must_use]
    pub fn narrow(&self, permissions: &[Permission], primary: Option<&str>) -> Vec<Permission> {
        let allowed = self.clusters();
        permissions
            .iter()
            .filter_map(|p| {
                let verbs: Vec<String> = p
                    .verbs
                    .iter()
                    .filter(|v| self.keeps_verb(&p.resource, v))
                    .cloned()
                    .collect();
                if verbs.is_empty() {
                    return None;
                }
                let clusters = match (&allowed, &p.clusters) {
                    (None, set) => set.clone(),
                    (Some(allowed), ClusterSet::All) => ClusterSet::Named(allowed.clone()),
                    (Some(allowed), ClusterSet::Named(names)) => ClusterSet::Named(
                        names
                            .iter()
                            .filter(|n| allowed.contains(n))
                            .cloned()
                            .collect(),
                    ),
                    (Some(allowed), ClusterSet::Others) => match primary {
                        Some(primary) => ClusterSet::Named(
                            allowed.iter().filter(|c| *c != primary).cloned().collect(),
                        ),
                        // Resolved per action, where the policy's clusters
                        // are checked too.
                        None => ClusterSet::Others,
                    },
                    (Some(allowed), ClusterSet::Primary) => match primary {
                        Some(primary) if !allowed.iter().any(|c| c == primary) => return None,
                        _ => ClusterSet::Primary,
                    },
                };
                if matches!(&clusters, ClusterSet::Named(n) if n.is_empty()) {
                    return None;
                }
                Some(Permission {
                    resource: p.resource.clone(),
                    verbs,
                    status: p.status,
                    clusters,
                })
            })
            .collect()
    }

    /// `registration` with its permissions narrowed (see [`Self::narrow`]).
    #[must_use]
    pub fn narrow_registration(
        &self,
        registration: &Registration,
        primary: Option<&str>,
    ) -> Registration {
        Registration {
            permissions: self.narrow(&registration.permissions, primary),
            ..registration.clone()
        }
    }

    /// Refuses a plugin whose primary or watched resources are denied
    /// `list` or `watch` (checked at load).
    ///
    /// # Errors
    /// The reason, naming the resource and the entry.
    pub fn check_reads(&self, registration: &Registration) -> Result<(), String> {
        let resources = std::iter::once(&registration.primary)
            .chain(registration.watches.iter().map(|w| &w.resource));
        for resource in resources {
            for verb in ["list", "watch"] {
                for (key, entry) in &self.entries {
                    if let Some(i) = entry.deny.iter().position(|r| r.matches(resource, verb)) {
                        return Err(format!(
                            "operator policy {} (entry {key:?}) deny[{i}] denies {verb} on {}, \
                             which the plugin watches",
                            self.source,
                            describe_resource(resource)
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Scope, Watch};

    const EXAMPLE: &str = r#"
plugins:
  nodepool:
    clusters: [main]
    deny:
      - {group: "", kind: Node, verbs: [delete]}
  "*":
    deny:
      - {group: "", kind: Secret, verbs: ["*"]}
"#;

    fn res(group: &str, kind: &str) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: String::new(),
            scope: Scope::Cluster,
        }
    }

    fn perm(resource: Resource, verbs: &[&str], clusters: ClusterSet) -> Permission {
        Permission {
            resource,
            verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
            status: false,
            clusters,
        }
    }

    fn reg(permissions: Vec<Permission>, watches: Vec<Resource>) -> Registration {
        Registration {
            name: "nodepool".into(),
            version: "1.0.0".into(),
            primary: res("nodes.lailin.xyz", "NodePool"),
            primary_clusters: ClusterSet::Primary,
            primary_selector: None,
            clusters: ClusterSet::All,
            watches: watches
                .into_iter()
                .map(|resource| Watch {
                    resource,
                    clusters: ClusterSet::All,
                    mapping: crate::action::Mapping::Itself,
                    label_selector: None,
                })
                .collect(),
            finalizer: None,
            permissions,
            crds: vec![],
            max_concurrent_reconciles: None,
        }
    }

    #[test]
    fn parses_the_example_and_resolves_entries() {
        let policy = Policy::from_yaml(EXAMPLE, "policy.yaml").unwrap();
        let np = policy.for_plugin("nodepool").unwrap();
        assert_eq!(np.entries.len(), 2);
        assert_eq!(np.clusters(), Some(vec!["main".to_string()]));
        // Another plugin gets only the defaults.
        let other = policy.for_plugin("other").unwrap();
        assert_eq!(other.entries.len(), 1);
        assert_eq!(other.clusters(), None);
        // No "*" entry and no own entry: nothing applies.
        let only = Policy::from_yaml("plugins: {a: {}}", "p").unwrap();
        assert!(only.for_plugin("b").is_none());
        // JSON is YAML.
        let json = r#"{"plugins": {"a": {"clusters": ["*"]}}}"#;
        assert!(Policy::from_yaml(json, "p.json").is_ok());
    }

    #[test]
    fn refusal_names_the_file_entry_and_rule() {
        let np = Policy::from_yaml(EXAMPLE, "/etc/rekon/policy.yaml")
            .unwrap()
            .for_plugin("nodepool")
            .unwrap();
        let node = res("", "Node");
        assert_eq!(np.refusal(&node, Verb::Patch, "main"), None);
        let why = np.refusal(&node, Verb::Delete, "main").unwrap();
        assert!(
            why.contains("operator policy /etc/rekon/policy.yaml")
                && why.contains("\"nodepool\"")
                && why.contains("deny[0] denies delete on Node"),
            "{why}"
        );
        let why = np.refusal(&node, Verb::Patch, "edge").unwrap();
        assert!(why.contains("may write only in clusters [main]"), "{why}");
        // The "*" entry applies too, with any verb.
        let why = np.refusal(&res("", "Secret"), Verb::Get, "main").unwrap();
        assert!(
            why.contains("(entry \"*\")") && why.contains("Secret"),
            "{why}"
        );
        // Same kind in another group is not matched.
        assert_eq!(np.refusal(&res("x.io", "Secret"), Verb::Get, "main"), None);
    }

    #[test]
    fn allow_lists_bound_what_is_kept() {
        let policy = Policy::from_yaml(
            r#"
plugins:
  nodepool:
    allow:
      - {group: "", kind: Node, verbs: [get, patch]}
      - {group: "node.k8s.io", kind: "*", verbs: ["*"]}
"#,
            "p",
        )
        .unwrap()
        .for_plugin("nodepool")
        .unwrap();
        let declared = vec![
            perm(
                res("", "Node"),
                &["get", "patch", "delete"],
                ClusterSet::All,
            ),
            perm(
                res("node.k8s.io", "RuntimeClass"),
                &["create"],
                ClusterSet::All,
            ),
            perm(res("", "ConfigMap"), &["get"], ClusterSet::All),
        ];
        let narrowed = policy.narrow(&declared, None);
        assert_eq!(narrowed.len(), 2, "{narrowed:?}");
        assert_eq!(narrowed[0].verbs, vec!["get", "patch"]);
        assert_eq!(narrowed[1].verbs, vec!["create"]);
        let why = policy
            .refusal(&res("", "ConfigMap"), Verb::Get, "main")
            .unwrap();
        assert!(
            why.contains("get on ConfigMap is not in its allow list"),
            "{why}"
        );
        assert_eq!(
            policy.refusal(&res("node.k8s.io", "RuntimeClass"), Verb::Delete, "x"),
            None
        );
    }

    #[test]
    fn narrow_intersects_verbs_and_clusters() {
        let np = Policy::from_yaml(EXAMPLE, "p")
            .unwrap()
            .for_plugin("nodepool")
            .unwrap();
        let declared = vec![
            perm(res("", "Node"), &["patch", "delete"], ClusterSet::All),
            perm(
                res("", "ConfigMap"),
                &["patch"],
                ClusterSet::Named(vec!["main".into(), "edge".into()]),
            ),
            perm(res("", "Secret"), &["get", "patch"], ClusterSet::All),
            perm(
                res("", "Event"),
                &["create"],
                ClusterSet::Named(vec!["edge".into()]),
            ),
            perm(res("", "Pod"), &["delete"], ClusterSet::Primary),
        ];
        let narrowed = np.narrow(&declared, None);
        let main = ClusterSet::Named(vec!["main".into()]);
        assert_eq!(
            narrowed,
            vec![
                perm(res("", "Node"), &["patch"], main.clone()),
                perm(res("", "ConfigMap"), &["patch"], main),
                // Secret: every verb denied; Event: only in edge.
                perm(res("", "Pod"), &["delete"], ClusterSet::Primary),
            ]
        );
        // With the primary known, a `primary` permission outside the
        // allowed clusters goes.
        let narrowed = np.narrow(&declared, Some("edge"));
        assert!(
            narrowed.iter().all(|p| p.resource.kind != "Pod"),
            "{narrowed:?}"
        );
        assert_eq!(np.narrow(&declared, Some("main")).len(), 3);
    }

    #[test]
    fn wildcards_and_plural_only_resources() {
        let p = Policy::from_yaml(
            r#"plugins: {"*": {clusters: ["*"], deny: [{group: "*", kind: "*", verbs: [delete]}]}}"#,
            "p",
        )
        .unwrap()
        .for_plugin("any")
        .unwrap();
        assert_eq!(p.clusters(), None);
        assert!(p.refusal(&res("batch", "Job"), Verb::Delete, "x").is_some());
        assert!(p.refusal(&res("batch", "Job"), Verb::Patch, "x").is_none());
        // A resource given by its plural matches a rule naming its kind.
        let nodes = Resource {
            kind: String::new(),
            plural: "nodes".into(),
            ..res("", "")
        };
        let q = Policy::from_yaml(
            r#"plugins: {a: {deny: [{group: "", kind: Node, verbs: [patch]}]}}"#,
            "p",
        )
        .unwrap()
        .for_plugin("a")
        .unwrap();
        assert!(q.refusal(&nodes, Verb::Patch, "main").is_some());
        // Empty cluster list: writes nowhere.
        let none = Policy::from_yaml("plugins: {a: {clusters: []}}", "p")
            .unwrap()
            .for_plugin("a")
            .unwrap();
        assert!(none.refusal(&nodes, Verb::Patch, "main").is_some());
        assert!(
            none.narrow(&[perm(res("", "Node"), &["patch"], ClusterSet::All)], None)
                .is_empty()
        );
    }

    #[test]
    fn denied_watches_refuse_the_plugin() {
        let p = Policy::from_yaml(EXAMPLE, "p")
            .unwrap()
            .for_plugin("nodepool")
            .unwrap();
        assert!(p.check_reads(&reg(vec![], vec![res("", "Node")])).is_ok());
        let err = p
            .check_reads(&reg(vec![], vec![res("", "Secret")]))
            .unwrap_err();
        assert!(err.contains("denies list on Secret"), "{err}");
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let err = Policy::from_yaml("plugins:\n  a:\n    denny: []\n", "/p.yaml").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("/p.yaml") && text.contains("unknown field `denny`"),
            "{text}"
        );
        let err = Policy::from_yaml("plugin: {}\n", "/p.yaml").unwrap_err();
        assert!(err.to_string().contains("unknown field `plugin`"), "{err}");
        let err = Policy::from_yaml(
            "plugins: {a: {deny: [{group: '', kind: Node, verbs: [patch], status: true}]}}",
            "/p.yaml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `status`"), "{err}");
        let err = Policy::from_yaml(
            "plugins: {a: {deny: [{group: '', kind: Node, verbs: [patch, erase]}]}}",
            "/p.yaml",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid operator policy /p.yaml: plugins.a.deny[0].verbs[1]: unknown verb \"erase\" \
             (get, list, watch, create, update, patch, delete or \"*\")"
        );
        let err = Policy::from_yaml(
            "plugins: {a: {allow: [{group: '', kind: '', verbs: [get]}]}}",
            "/p.yaml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("plugins.a.allow[0].kind"), "{err}");
        let err = Policy::from_yaml("plugins: {A_b: {}}", "/p.yaml").unwrap_err();
        assert!(err.to_string().contains("plugins.A_b"), "{err}");
        let err = Policy::from_yaml("plugins: {a: {deny: [{kind: Node, verbs: [get]}]}}", "/p")
            .unwrap_err();
        assert!(err.to_string().contains("missing field `group`"), "{err}");
        let err = Policy::from_file(Path::new("/nonexistent/rekon-policy.yaml")).unwrap_err();
        assert!(
            err.to_string()
                .contains("failed to read operator policy /nonexistent/rekon-policy.yaml"),
            "{err}"
        );
    }
}

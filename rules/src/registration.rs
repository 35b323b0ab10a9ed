//! What makes a plugin's registration valid: the one check the SDK runs at
//! `register()` (and in its test kit) and the host runs at load.
//!
//! Both sides convert their own registration type (the SDK's builder, the
//! host's WIT bindings) into the plain [`Spec`] below and call [`problems`],
//! so a plugin that passes its native tests cannot be refused at load for a
//! rule the test kit did not know.
//!
//! ```
//! use rekon_rules::registration::{Clusters, Permission, Resource, Spec, problems};
//!
//! let mut spec = Spec::new("labeler", "0.1.0", Resource::new("", "v1", "ConfigMap"));
//! spec.permissions.push(Permission {
//!     resource: Resource::new("", "v1", "Node"),
//!     verbs: vec!["get".into(), "patch".into()],
//!     clusters: Clusters::Primary,
//! });
//! assert!(problems(&spec).is_empty());
//!
//! spec.version = "1".into();
//! spec.permissions[0].verbs.push("*".into());
//! let found = problems(&spec);
//! assert_eq!(found.len(), 2, "{found:?}");
//! ```

use crate::selector::LabelSelector;

/// A Kubernetes RBAC verb a permission can name. `*` and `deletecollection`
/// are not accepted: permissions are explicit, and the host never lists
/// with a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// get
    Get,
    /// list
    List,
    /// watch
    Watch,
    /// create
    Create,
    /// update
    Update,
    /// patch
    Patch,
    /// delete
    Delete,
}

impl Verb {
    /// Every verb, in RBAC's usual order.
    pub const ALL: [Verb; 7] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
    ];

    /// get, list and watch: what reading through the host's caches takes.
    pub const READ: &'static [Verb] = &[Verb::Get, Verb::List, Verb::Watch];

    /// Parses an RBAC verb.
    ///
    /// ```
    /// use rekon_rules::Verb;
    /// assert_eq!(Verb::parse("patch"), Some(Verb::Patch));
    /// assert_eq!(Verb::parse("*"), None);
    /// ```
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The RBAC spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
        }
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource type as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Kind (CamelCase).
    pub kind: String,
    /// The plural the plugin declared, empty when it left it to discovery.
    /// Never used to build a request (the server names the resource); it
    /// must be a plain resource name, and agree with a CRD the plugin ships.
    pub plural: String,
    /// The scope the plugin declared (`Some(true)`: namespaced), if any.
    pub namespaced: Option<bool>,
}

impl Resource {
    /// A resource type with no plural or scope declared.
    #[must_use]
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: String::new(),
            namespaced: None,
        }
    }

    /// The same type with the plural and scope the plugin declared.
    #[must_use]
    pub fn declared(mut self, plural: &str, namespaced: bool) -> Self {
        plural.clone_into(&mut self.plural);
        self.namespaced = Some(namespaced);
        self
    }

    fn describe(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// A set of clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clusters {
    /// The primary cluster.
    Primary,
    /// Every engaged cluster.
    All,
    /// Every engaged cluster but the primary.
    Others,
    /// Clusters named explicitly.
    Named(Vec<String>),
}

/// How a watch maps events, as far as the rules care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapping {
    /// Owner labels: the three label keys.
    OwnerLabels {
        /// Key of the primary's cluster.
        cluster: String,
        /// Key of the primary's namespace.
        namespace: String,
        /// Key of the primary's name.
        name: String,
    },
    /// Label key prefixes naming primaries.
    LabelKeyPrefixes(Vec<String>),
    /// Any mapping without parameters (itself, owner reference, all
    /// primaries, custom).
    Plain,
}

/// A watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The watched resource.
    pub resource: Resource,
    /// Where.
    pub clusters: Clusters,
    /// How events map to primaries.
    pub mapping: Mapping,
    /// The event filter of the WIT record (the Rust SDK sends none).
    pub label_selector: Option<String>,
}

/// A permission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// The resource the verbs apply to.
    pub resource: Resource,
    /// The verbs, as spelled by the plugin.
    pub verbs: Vec<String>,
    /// Where.
    pub clusters: Clusters,
}

/// A CRD manifest, as far as the rules care: its `kind`, or why it could
/// not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Crd {
    /// The manifest parsed; its `kind` field if it is a string.
    Parsed(Option<String>),
    /// The manifest is not a JSON object (the parser's message).
    Unreadable(String),
}

/// What a CRD the plugin ships says of the type it defines: what its
/// declarations of that kind must agree with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdNames {
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.names.plural`.
    pub plural: String,
    /// `spec.scope == "Namespaced"`.
    pub namespaced: bool,
}

impl CrdNames {
    /// The names of a CRD manifest, read through `field` (the string at a
    /// path of the manifest, e.g. `["spec", "names", "plural"]`), so each
    /// side reads its own JSON type with the same rule; `None` when a name
    /// is missing.
    pub fn read(field: impl Fn(&[&str]) -> Option<String>) -> Option<Self> {
        Some(Self {
            group: field(&["spec", "group"])?,
            kind: field(&["spec", "names", "kind"])?,
            plural: field(&["spec", "names", "plural"])?,
            namespaced: field(&["spec", "scope"]).as_deref() != Some("Cluster"),
        })
    }
}

/// A registration, in the plain form both sides convert theirs into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// Primary resource.
    pub primary: Resource,
    /// Clusters whose primaries are reconciled.
    pub primary_clusters: Clusters,
    /// Primary label selector.
    pub primary_selector: Option<String>,
    /// Clusters whose engagement requeues every primary.
    pub clusters: Clusters,
    /// Watches.
    pub watches: Vec<Watch>,
    /// Finalizer.
    pub finalizer: Option<String>,
    /// Permissions.
    pub permissions: Vec<Permission>,
    /// CRD manifests.
    pub crds: Vec<Crd>,
    /// The types those CRDs define (the ones whose names could be read).
    pub crd_names: Vec<CrdNames>,
    /// Concurrency bound.
    pub max_concurrent_reconciles: Option<u32>,
}

impl Spec {
    /// A spec with nothing but a name, version and primary (in the primary
    /// cluster).
    #[must_use]
    pub fn new(name: &str, version: &str, primary: Resource) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            primary,
            primary_clusters: Clusters::Primary,
            primary_selector: None,
            clusters: Clusters::Primary,
            watches: Vec::new(),
            finalizer: None,
            permissions: Vec::new(),
            crds: Vec::new(),
            crd_names: Vec::new(),
            max_concurrent_reconciles: None,
        }
    }
}

/// Every problem of `spec`, one sentence each; empty when it is valid.
///
/// The rules: the name is a DNS label; the version is semver
/// (`MAJOR.MINOR.PATCH[-pre][+build]`); every resource has a kind, a version
/// and a group that is empty or a DNS subdomain, a kind and a version that
/// are names the API server accepts, a declared plural that is a plain
/// resource name (no `/`, `.` or `..`: no subresource or path smuggled in)
/// and, for a kind one of its own CRDs defines, the CRD's plural and scope;
/// every permission names at
/// least one verb and only [`Verb`]s; selectors parse; a named cluster set
/// names at least one cluster, none empty or twice; label-key-prefix
/// mappings have non-empty prefixes and owner-label mappings three distinct
/// non-empty keys; the finalizer is a name Kubernetes accepts in
/// `metadata.finalizers` ([`finalizer_problem`]; [`warnings`] says when it
/// would warn); CRDs are CustomResourceDefinitions;
/// `max_concurrent_reconciles` is at least 1.
#[must_use]
pub fn problems(spec: &Spec) -> Vec<String> {
    let mut found = Vec::new();
    if spec.watches.len() > MAX_WATCHES {
        found.push(format!(
            "declares {} watches, at most {MAX_WATCHES}: each is a watch on the API server of every cluster it names and a cache in the host",
            spec.watches.len()
        ));
    }
    if !is_dns_label(&spec.name) {
        found.push(format!(
            "plugin name {:?} is not a DNS label (lowercase letters, digits and '-', at most 63)",
            spec.name
        ));
    }
    if let Err(why) = check_semver(&spec.version) {
        found.push(format!("version {:?} is not semver: {why}", spec.version));
    }
    resource_problems("primary", &spec.primary, &spec.crd_names, &mut found);
    clusters_problems("primary clusters", &spec.primary_clusters, &mut found);
    clusters_problems("clusters", &spec.clusters, &mut found);
    if let Some(s) = &spec.primary_selector
        && let Err(e) = LabelSelector::parse(s)
    {
        found.push(format!("primary selector: {e}"));
    }
    for w in &spec.watches {
        let what = format!("watch of {}", w.resource.describe());
        resource_problems(&what, &w.resource, &spec.crd_names, &mut found);
        clusters_problems(&what, &w.clusters, &mut found);
        if let Some(s) = &w.label_selector
            && let Err(e) = LabelSelector::parse(s)
        {
            found.push(format!("{what}: {e}"));
        }
        match &w.mapping {
            Mapping::LabelKeyPrefixes(prefixes) => {
                if let Some(problem) = crate::mapping::label_key_prefixes_problem(prefixes) {
                    found.push(format!("{what}: {problem}"));
                }
            }
            Mapping::OwnerLabels {
                cluster,
                namespace,
                name,
            } => {
                let keys = [cluster, namespace, name];
                if keys.iter().any(|k| k.is_empty()) {
                    found.push(format!("{what}: owner label keys must not be empty"));
                } else if cluster == namespace || cluster == name || namespace == name {
                    found.push(format!("{what}: owner label keys must be distinct"));
                }
            }
            Mapping::Plain => {}
        }
    }
    if let Some(f) = &spec.finalizer
        && let Some(why) = finalizer_problem(f)
    {
        found.push(format!("finalizer {f:?} {why}"));
    }
    for p in &spec.permissions {
        let what = format!("permission on {}", p.resource.describe());
        resource_problems(&what, &p.resource, &spec.crd_names, &mut found);
        clusters_problems(&what, &p.clusters, &mut found);
        if p.verbs.is_empty() {
            found.push(format!("{what} names no verb"));
        }
        for v in &p.verbs {
            if Verb::parse(v).is_none() {
                found.push(format!(
                    "{what} names unknown verb {v:?} (one of get, list, watch, create, update, patch, delete)"
                ));
            }
        }
    }
    for (i, crd) in spec.crds.iter().enumerate() {
        match crd {
            Crd::Unreadable(e) => found.push(format!("crd #{i} is not a JSON object: {e}")),
            Crd::Parsed(kind) if kind.as_deref() != Some("CustomResourceDefinition") => {
                found.push(format!("crd #{i} is not a CustomResourceDefinition"));
            }
            Crd::Parsed(_) => {}
        }
    }
    if spec.max_concurrent_reconciles == Some(0) {
        found.push("max concurrent reconciles must be at least 1".to_owned());
    }
    found
}

fn resource_problems(what: &str, r: &Resource, crds: &[CrdNames], found: &mut Vec<String>) {
    if r.kind.is_empty() {
        found.push(format!("{what}: resource has no kind"));
    } else if !is_kind(&r.kind) {
        found.push(format!(
            "{what}: kind {:?} is not a kind name (a letter, then letters and digits)",
            r.kind
        ));
    }
    if r.version.is_empty() {
        found.push(format!("{what}: resource has no version"));
    } else if !is_dns1035_label(&r.version) {
        found.push(format!(
            "{what}: version {:?} is not a version name (a DNS-1035 label: `v1`, `v1beta1`)",
            r.version
        ));
    }
    if !r.group.is_empty() && !is_dns_subdomain(&r.group) {
        found.push(format!(
            "{what}: group {:?} is not a DNS subdomain",
            r.group
        ));
    }
    if !r.plural.is_empty() && !is_dns1035_label(&r.plural) {
        found.push(format!(
            "{what}: plural {:?} is not a resource name (a DNS-1035 label; a subresource or a path is never part of it)",
            r.plural
        ));
    }
    if let Some(crd) = crds.iter().find(|c| c.group == r.group && c.kind == r.kind) {
        if !r.plural.is_empty() && r.plural != crd.plural {
            found.push(format!(
                "{what}: plural {:?} disagrees with the plugin's own CRD, which serves {} as {:?}",
                r.plural, r.kind, crd.plural
            ));
        }
        if let Some(namespaced) = r.namespaced
            && namespaced != crd.namespaced
        {
            found.push(format!(
                "{what}: scope {} disagrees with the plugin's own CRD, which makes {} {}",
                scope_word(namespaced),
                r.kind,
                scope_word(crd.namespaced)
            ));
        }
    }
}

fn scope_word(namespaced: bool) -> &'static str {
    if namespaced { "Namespaced" } else { "Cluster" }
}

/// Whether `s` can be a kind: what the API server accepts as a CRD's
/// `spec.names.kind` (its lowercase form a DNS-1035 label), without the
/// `-` no kind uses: a letter, then letters and digits, at most 63.
#[must_use]
pub fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `s` is an RFC 1035 DNS label: 1 to 63 lowercase letters, digits
/// and `-`, starting with a letter and ending with a letter or digit. API
/// versions and plurals are (the API server refuses a CRD whose plural is not).
///
/// ```
/// use rekon_rules::registration::is_dns1035_label;
/// assert!(is_dns1035_label("runtimeclasses"));
/// assert!(!is_dns1035_label("nodes/status"));
/// assert!(!is_dns1035_label(".."));
/// assert!(!is_dns1035_label("1abc"));
/// ```
#[must_use]
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
}

/// Why `name` cannot be an object's name in a request path, if it cannot:
/// the API server's `ValidatePathSegmentName` (no `.` or `..`, no `/` or
/// `%`), which every name must pass before anything else is checked. The
/// writer refuses such a name instead of sending it, so a name can never
/// reach a subresource or another resource.
///
/// ```
/// use rekon_rules::registration::path_segment_problem;
/// assert_eq!(path_segment_problem("node-a"), None);
/// assert!(path_segment_problem("node-a/status").is_some());
/// assert!(path_segment_problem("..").is_some());
/// assert!(path_segment_problem("%2e%2e").is_some());
/// ```
#[must_use]
pub fn path_segment_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a name may not be empty".to_owned());
    }
    if name == "." || name == ".." {
        return Some(format!("may not be '{name}'"));
    }
    for bad in ['/', '%'] {
        if name.contains(bad) {
            return Some(format!("may not contain '{bad}'"));
        }
    }
    None
}

fn clusters_problems(what: &str, c: &Clusters, found: &mut Vec<String>) {
    if let Clusters::Named(names) = c {
        if names.is_empty() {
            found.push(format!("{what}: a named cluster set names no cluster"));
        }
        if names.iter().any(String::is_empty) {
            found.push(format!("{what}: a cluster name is empty"));
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                found.push(format!("{what}: cluster {n:?} is named twice"));
            }
        }
    }
}

/// Whether `s` is an RFC 1123 DNS label: 1 to 63 lowercase letters, digits
/// and `-`, starting and ending with a letter or digit. Plugin names are.
///
/// ```
/// use rekon_rules::registration::is_dns_label;
/// assert!(is_dns_label("cm-sync"));
/// assert!(!is_dns_label("Bad_Name"));
/// assert!(!is_dns_label("-x"));
/// ```
#[must_use]
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is an RFC 1123 DNS subdomain: dot-separated DNS labels, at
/// most 253 characters. API groups and finalizer domains are.
#[must_use]
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Most watches one registration declares. Each is a watch (a LIST, then
/// a long-lived WATCH) on the API server of every cluster it names and a
/// cache the host keeps, so one plugin declaring a thousand (distinct
/// selectors of one kind) would load the API server and the host's memory
/// for all its neighbours. Controllers watch a handful of kinds;
/// controller-runtime's largest (cluster-api's) about a dozen.
pub const MAX_WATCHES: usize = 32;

/// Kubernetes' own finalizers, which the API server accepts without a
/// domain (`k8s.io/apiserver` `IsStandardFinalizerName`, and the garbage
/// collector's).
pub const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// Why `s` is not a finalizer the API server accepts on an object, or
/// `None`. Kubernetes validates `metadata.finalizers` as qualified names
/// (`apimachinery` `ValidateFinalizerName` → `IsQualifiedName`): an
/// optional prefix that is a DNS subdomain and a `/`, then a name of 1 to
/// 63 characters of `[A-Za-z0-9-_.]` starting and ending alphanumeric. So
/// `deletion.finalizers.rabbitmqclusters.rabbitmq.com` (a real operator's)
/// is accepted; the API server only warns about it ([`finalizer_warning`]).
#[must_use]
pub fn finalizer_problem(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("has an empty prefix before '/'".to_owned());
        }
        if !is_dns_subdomain(prefix) {
            return Some(format!(
                "has a prefix {prefix:?} that is not a DNS subdomain (lowercase, dot-separated labels, at most 253)"
            ));
        }
    }
    // The name part alone (no '/' left in it): the qualified-name rule.
    let valid = !name.contains('/') && crate::validation::is_qualified_name(name).is_empty();
    (!valid).then(|| {
        format!(
            "is not a qualified name: the name {name:?} must be 1 to 63 of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (an optional DNS-subdomain prefix and '/' before it)"
        )
    })
}

/// The warning the API server gives for an accepted finalizer without a
/// domain prefix (`metadata.finalizers: "x": prefer a domain-qualified
/// finalizer name including a path (/) to avoid accidental conflicts with
/// other finalizer writers`), or `None`.
#[must_use]
pub fn finalizer_warning(s: &str) -> Option<String> {
    if s.contains('/') || finalizer_problem(s).is_some() {
        return None;
    }
    Some(if STANDARD_FINALIZERS.contains(&s) {
        format!(
            "finalizer {s:?} is one of Kubernetes' own: the host would add and release it as the plugin's"
        )
    } else {
        format!(
            "finalizer {s:?}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers (the API server warns the same)"
        )
    })
}

/// What `spec` may do but the API server warns about (one sentence each):
/// a finalizer without a domain prefix.
#[must_use]
pub fn warnings(spec: &Spec) -> Vec<String> {
    spec.finalizer
        .as_deref()
        .and_then(finalizer_warning)
        .into_iter()
        .collect()
}

/// Checks Semantic Versioning 2.0: `MAJOR.MINOR.PATCH`, numbers without
/// leading zeros, an optional pre-release of dot-separated non-empty
/// identifiers (numeric ones without leading zeros) and optional build
/// metadata of dot-separated non-empty identifiers.
///
/// ```
/// use rekon_rules::registration::check_semver;
/// assert!(check_semver("1.2.3-rc.1+build.5").is_ok());
/// assert!(check_semver("1.2").is_err());
/// assert!(check_semver("01.2.3").is_err());
/// ```
///
/// # Errors
/// Why `v` is not semver.
pub fn check_semver(v: &str) -> Result<(), &'static str> {
    let ident_ok =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let number_ok = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Err("expected MAJOR.MINOR.PATCH");
    }
    if !parts.iter().all(|p| number_ok(p)) || parts.iter().any(|p| p.parse::<u64>().is_err()) {
        return Err("MAJOR, MINOR and PATCH must be numbers without leading zeros");
    }
    if let Some(pre) = pre {
        for id in pre.split('.') {
            if !ident_ok(id) {
                return Err(
                    "a pre-release identifier is empty or has characters other than [0-9A-Za-z-]",
                );
            }
            if id.bytes().all(|b| b.is_ascii_digit()) && !number_ok(id) {
                return Err("a numeric pre-release identifier has a leading zero");
            }
        }
    }
    if let Some(build) = build
        && !build.split('.').all(ident_ok)
    {
        return Err("a build identifier is empty or has characters other than [0-9A-Za-z-]");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Spec {
        let mut s = Spec::new(
            "demo",
            "1.0.0",
            Resource::new("example.com", "v1", "Widget"),
        );
        s.finalizer = Some("example.com/cleanup".into());
        s.permissions.push(Permission {
            resource: Resource::new("", "v1", "Node"),
            verbs: vec!["get".into(), "patch".into()],
            clusters: Clusters::Others,
        });
        s.watches.push(Watch {
            resource: Resource::new("", "v1", "Node"),
            clusters: Clusters::Named(vec!["edge".into()]),
            mapping: Mapping::OwnerLabels {
                cluster: "o/c".into(),
                namespace: "o/ns".into(),
                name: "o/n".into(),
            },
            label_selector: Some("app=web".into()),
        });
        s.crds
            .push(Crd::Parsed(Some("CustomResourceDefinition".into())));
        s
    }

    #[test]
    fn a_valid_spec_has_no_problem() {
        assert_eq!(problems(&valid()), Vec::<String>::new());
    }

    #[test]
    fn watches_are_bounded() {
        let mut s = valid();
        let watch = s.watches[0].clone();
        s.watches = vec![watch; MAX_WATCHES];
        assert_eq!(
            problems(&s),
            Vec::<String>::new(),
            "{MAX_WATCHES} is allowed"
        );
        s.watches.push(s.watches[0].clone());
        let found = problems(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with(&format!(
                "declares {} watches, at most {MAX_WATCHES}",
                MAX_WATCHES + 1
            )),
            "{found:?}"
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let mut s = valid();
        s.name = "Bad_Name".into();
        s.version = "1.0".into();
        s.primary.group = "Not A Group".into();
        s.primary_selector = Some("a in (".into());
        s.permissions[0].verbs = vec!["*".into(), "deletecollection".into()];
        s.watches[0].clusters = Clusters::Named(vec![]);
        s.finalizer = Some("no domain".into());
        s.crds.push(Crd::Parsed(Some("ConfigMap".into())));
        s.max_concurrent_reconciles = Some(0);
        let found = problems(&s).join("\n");
        for needle in [
            "not a DNS label",
            "not semver",
            "not a DNS subdomain",
            "primary selector",
            "\"*\"",
            "\"deletecollection\"",
            "names no cluster",
            "no domain",
            "crd #1",
            "at least 1",
        ] {
            assert!(found.contains(needle), "{needle:?} missing from\n{found}");
        }
    }

    #[test]
    fn semver_follows_the_spec() {
        for ok in [
            "0.0.0",
            "1.2.3",
            "10.20.30-alpha.1",
            "1.0.0+001",
            "1.0.0-x-y.0+b",
        ] {
            assert!(check_semver(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            " ",
            "1",
            "1.2",
            "v1.2.3",
            "1.2.3.4",
            "1.02.3",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3+",
            "1.2.3-a..b",
        ] {
            assert!(check_semver(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finalizers_are_what_kubernetes_accepts_and_warn_where_it_warns() {
        for good in [
            "nodes.example.com/pool-cleanup",
            // A real operator's (RabbitMQ's cluster operator): accepted,
            // with the API server's warning.
            "deletion.finalizers.rabbitmqclusters.rabbitmq.com",
            "cleanup",
            "Example_1.x",
            "foregroundDeletion",
        ] {
            assert_eq!(finalizer_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "/x",
            "example.com/",
            "example.com/-x",
            "Example.com/x",
            "a/b/c",
            "has space",
        ] {
            assert!(finalizer_problem(bad).is_some(), "{bad}");
        }
        assert_eq!(finalizer_problem(&"x".repeat(63)), None);
        assert!(finalizer_problem(&"x".repeat(64)).is_some());
        assert_eq!(finalizer_warning("nodes.example.com/pool-cleanup"), None);
        assert!(
            finalizer_warning("deletion.finalizers.rabbitmqclusters.rabbitmq.com")
                .is_some_and(|w| w.contains("prefer a domain-qualified finalizer name"))
        );
        assert!(finalizer_warning("orphan").is_some_and(|w| w.contains("Kubernetes' own")));
        assert_eq!(finalizer_warning("a/b/c"), None, "refused, not warned");
    }

    #[test]
    fn owner_label_keys_must_differ() {
        let mut s = valid();
        s.watches[0].mapping = Mapping::OwnerLabels {
            cluster: "k".into(),
            namespace: "k".into(),
            name: "n".into(),
        };
        assert!(problems(&s)[0].contains("distinct"));
    }
}

//! Every request the writer sends is built from a resource the server named
//! for a kind the plugin declared (security issue #40).
//!
//! A property test over generated action targets: kinds real and made up,
//! plurals real, foreign and smuggled (`nodes/status`, `../secrets`),
//! scopes right and wrong, versions served and not, names and namespaces
//! with path tricks. The writer runs against kube-sim's router in process
//! with a client that logs every request it sends; its gate is the
//! plugin's declared permissions, checked with the same `permits` the host
//! uses. Whatever the action, each write request that reaches the server
//! must be one of the declared (resource, verb) pairs, under the plural
//! the server serves for that kind, on a name and namespace that are one
//! path segment each.

use std::sync::Arc;

use parking_lot::Mutex;
use proptest::prelude::*;
use rekon::action::{
    Action, ApplyAction, ClusterInfo, ClusterSet, CreateAction, DeleteAction, ObjectRef,
    PatchAction, PatchType, Permission, Registration, Resource, Scope, permits,
    required_permission,
};
use rekon::cache::Resolver;
use rekon::cluster::ClusterRegistry;
use rekon::writer::{Writer, WriterConfig};
use serde_json::json;
use tower::ServiceExt;

/// (method, path) of every request the client sent.
type Sent = Arc<Mutex<Vec<(String, String)>>>;

fn logging_client(sim: &kube_sim::SimCluster, sent: Sent) -> kube::Client {
    let router = sim.router();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let router = router.clone();
        sent.lock()
            .push((req.method().to_string(), req.uri().path().to_owned()));
        async move { router.oneshot(req.map(axum::body::Body::new)).await }
    });
    kube::Client::new(service, "default")
}

fn resource(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Resource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Resource {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
        scope: if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        },
    }
}

/// What the plugin declared: ConfigMaps (patch, create, delete) and Nodes
/// (patch) in the primary cluster. Nothing else.
fn registration() -> Registration {
    let permission = |r: Resource, verbs: &[&str]| Permission {
        resource: r,
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        status: false,
        clusters: ClusterSet::Primary,
    };
    Registration {
        name: "p".into(),
        version: "1.0.0".into(),
        primary: resource("v1", "ConfigMap", "configmaps", true),
        primary_clusters: ClusterSet::Primary,
        primary_selector: None,
        clusters: ClusterSet::Primary,
        watches: Vec::new(),
        finalizer: None,
        permissions: vec![
            permission(
                resource("v1", "ConfigMap", "configmaps", true),
                &["patch", "create", "delete"],
            ),
            permission(resource("v1", "Node", "nodes", false), &["patch"]),
        ],
        crds: Vec::new(),
        max_concurrent_reconciles: None,
    }
}

/// The declared (plural, HTTP method) pairs a write may use, as the
/// server names them.
fn allowed(plural: &str, method: &str) -> bool {
    matches!(
        (plural, method),
        ("configmaps", "PATCH" | "POST" | "DELETE") | ("nodes", "PATCH")
    )
}

#[derive(Debug, Clone)]
struct Target {
    api_version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    namespace: Option<&'static str>,
    name: &'static str,
    how: u8,
}

fn target() -> impl Strategy<Value = Target> {
    (
        prop::sample::select(vec![
            ("v1", "ConfigMap"),
            ("v1", "Node"),
            ("v1", "Secret"),
            ("v1", "HostileDecoy"),
            ("apps/v1", "Decoy"),
            ("apps/v1", "Deployment"),
            ("v9", "Node"),
        ]),
        prop::sample::select(vec![
            "",
            "configmaps",
            "nodes",
            "secrets",
            "deployments",
            "nodes/status",
            "../secrets",
            "configmaps/x/../../secrets",
        ]),
        any::<bool>(),
        prop::sample::select(vec![
            None,
            Some("default"),
            Some("default/secrets"),
            Some(".."),
            Some("kube-system"),
        ]),
        prop::sample::select(vec![
            "a",
            "node-a",
            "a/status",
            "..",
            "x%2F..%2Fsecrets",
            "../../secrets/db",
        ]),
        0u8..4,
    )
        .prop_map(
            |((api_version, kind), plural, namespaced, namespace, name, how)| Target {
                api_version,
                kind,
                plural,
                namespaced,
                namespace,
                name,
                how,
            },
        )
}

fn action(t: &Target) -> Action {
    let object_ref = ObjectRef {
        cluster: "main".into(),
        resource: resource(t.api_version, t.kind, t.plural, t.namespaced),
        namespace: t.namespace.map(str::to_owned),
        name: t.name.to_owned(),
    };
    let mut metadata = json!({"name": t.name, "labels": {"reached": "yes"}});
    if let Some(ns) = t.namespace {
        metadata["namespace"] = json!(ns);
    }
    let object =
        json!({"apiVersion": t.api_version, "kind": t.kind, "metadata": metadata}).to_string();
    match t.how {
        0 => Action::Patch(PatchAction {
            target: object_ref,
            patch_type: PatchType::Merge,
            patch: json!({"metadata": {"labels": {"reached": "yes"}}}).to_string(),
            resource_version: None,
            status: false,
        }),
        1 => Action::Delete(DeleteAction {
            target: object_ref,
            uid: None,
            propagation: None,
        }),
        2 => Action::Apply(ApplyAction {
            cluster: "main".into(),
            object,
            status: false,
            force: true,
        }),
        _ => Action::Create(CreateAction {
            cluster: "main".into(),
            object,
        }),
    }
}

/// A write request's path, taken apart.
struct Path {
    group: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    /// What follows the name (a subresource).
    rest: Vec<String>,
}

/// A write path split into its parts.
fn split(path: &str) -> Option<Path> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", g, _version, rest @ ..] => ((*g).to_owned(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, rest) = rest.split_first()?;
    let (name, rest) = match rest.split_first() {
        Some((n, r)) => (
            Some((*n).to_owned()),
            r.iter().map(|s| (*s).to_owned()).collect(),
        ),
        None => (None, Vec::new()),
    };
    Some(Path {
        group,
        plural: (*plural).to_owned(),
        namespace,
        name,
        rest,
    })
}

async fn run(targets: Vec<Target>) -> Result<(), TestCaseError> {
    let sim = kube_sim::SimCluster::start("main")
        .await
        .expect("kube-sim starts");
    let sent: Sent = Arc::default();
    let client = logging_client(&sim, Arc::clone(&sent));
    let clusters = ClusterRegistry::new("main", client);
    let writer = Writer::new(clusters, Resolver::default(), WriterConfig::default());
    let reg = registration();
    let infos = vec![ClusterInfo {
        name: "main".into(),
        primary: true,
        health: rekon::action::ClusterHealth::Ready,
    }];
    writer.set_gate(
        "p",
        Arc::new(move |a: &Action| match required_permission(a)? {
            None => Ok(()),
            Some(r) if permits(&reg, &r.resource, r.verb, r.status, &r.cluster, &infos) => Ok(()),
            Some(r) => Err(format!("{} of {} not declared", r.action, r.resource.kind)),
        }),
    );
    for t in &targets {
        let _ = writer.perform("p", &action(t)).await;
    }
    for (method, path) in sent.lock().iter() {
        if method == "GET" {
            // Discovery (and nothing else is read by the writer).
            prop_assert!(
                path == "/api"
                    || path == "/apis"
                    || path.starts_with("/api/")
                    || path.starts_with("/apis/"),
                "unexpected read {method} {path}"
            );
            continue;
        }
        let Path {
            group,
            plural,
            namespace,
            name,
            rest,
        } = split(path)
            .ok_or_else(|| TestCaseError::fail(format!("unparsable {method} {path}")))?;
        prop_assert!(group.is_empty(), "{method} {path}: a group never declared");
        prop_assert!(allowed(&plural, method), "{method} {path}: not declared");
        prop_assert!(
            rest.is_empty(),
            "{method} {path}: a subresource never declared"
        );
        if let Some(ns) = &namespace {
            prop_assert!(
                rekon_rules::registration::is_dns_label(ns),
                "{method} {path}: namespace"
            );
        }
        if let Some(name) = &name {
            prop_assert!(
                rekon_rules::registration::path_segment_problem(name).is_none(),
                "{method} {path}: name"
            );
        }
        prop_assert_eq!(
            plural == "configmaps",
            namespace.is_some(),
            "{} {}: scope of the server's resource",
            method,
            path
        );
    }
    sim.shutdown().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_request_the_writer_sends_matches_a_declared_permission(targets in prop::collection::vec(target(), 1..6)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(targets))?;
    }
}

/// The exploit, spelled out: a made-up kind of the core group
/// declared with the plural `nodes` is refused before anything is sent to
/// `nodes`, and so is a declared Node with another plural or scope.
#[tokio::test]
async fn a_decoy_kind_with_a_real_plural_reaches_nothing() {
    let sim = kube_sim::SimCluster::start("main").await.unwrap();
    sim.create(
        "v1",
        "nodes",
        None,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
    )
    .unwrap();
    let sent: Sent = Arc::default();
    let writer = Writer::new(
        ClusterRegistry::new("main", logging_client(&sim, Arc::clone(&sent))),
        Resolver::default(),
        WriterConfig::default(),
    );
    let patch = |r: Resource, ns: Option<&str>| {
        Action::Patch(PatchAction {
            target: ObjectRef {
                cluster: "main".into(),
                resource: r,
                namespace: ns.map(str::to_owned),
                name: "node-a".into(),
            },
            patch_type: PatchType::Merge,
            patch: json!({"metadata": {"labels": {"reached": "yes"}}}).to_string(),
            resource_version: None,
            status: false,
        })
    };
    let decoy = writer
        .perform(
            "p",
            &patch(resource("v1", "HostileDecoy", "nodes", false), None),
        )
        .await
        .unwrap_err();
    assert!(decoy.to_string().contains("HostileDecoy"), "{decoy}");
    let plural = writer
        .perform("p", &patch(resource("v1", "Node", "secrets", false), None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        plural.contains("declared plural \"secrets\"") && plural.contains("\"nodes\""),
        "{plural}"
    );
    let scope = writer
        .perform(
            "p",
            &patch(resource("v1", "Node", "nodes", true), Some("default")),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(scope.contains("declared scope Namespaced"), "{scope}");
    let writes: Vec<_> = sent
        .lock()
        .iter()
        .filter(|(m, _)| m != "GET")
        .cloned()
        .collect();
    assert!(writes.is_empty(), "sent {writes:?}");
    let node = sim.get("v1", "nodes", None, "node-a").unwrap();
    assert!(node.pointer("/metadata/labels/reached").is_none(), "{node}");
    // The right declaration writes.
    writer
        .perform("p", &patch(resource("v1", "Node", "nodes", false), None))
        .await
        .unwrap();
    let node = sim.get("v1", "nodes", None, "node-a").unwrap();
    assert_eq!(
        node.pointer("/metadata/labels/reached"),
        Some(&json!("yes"))
    );
    sim.shutdown().await;
}

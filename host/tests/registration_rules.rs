//! The SDK and the host accept and refuse exactly the same registrations.
//!
//! Registrations are generated with the SDK's builder (names, versions,
//! resources, selectors, cluster sets, mappings, finalizers, permissions,
//! CRDs, concurrency; valid and invalid values of each). Each one goes
//! through the SDK's real `register` export path (the function
//! `export_plugin!` calls, which validates before lowering) and, lowered to
//! the WIT record the component returns, through the host's real load-time
//! validation. The verdicts must agree; a generated mix of both verdicts
//! shows the test can tell them apart.

use std::cell::RefCell;

use proptest::prelude::*;
use rekon::action as host;
use rekon_sdk::__private::{WitRegistration, bindings::rekon::plugin::types as wit};
use rekon_sdk::prelude::*;
use rekon_sdk::serde_json::{Value, json};

thread_local! {
    static GENERATED: RefCell<Option<Registration>> = const { RefCell::new(None) };
}

/// A plugin whose `register` returns the registration under test.
struct Generated;

impl Plugin for Generated {
    type Primary = rekon_sdk::k8s_openapi::api::core::v1::ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(GENERATED.with(|g| g.borrow().clone().expect("a registration was generated")))
    }

    fn reconcile(_: &Context, _: &Request, _: Event<Self::Primary>) -> Result<Outcome, Error> {
        Ok(Outcome::done())
    }
}

/// The SDK's verdict: `register` as the exported component runs it.
fn sdk_accepts(reg: &Registration) -> Result<(), String> {
    GENERATED.with(|g| *g.borrow_mut() = Some(reg.clone()));
    rekon_sdk::__private::register::<Generated>().map(|_| ())
}

/// The host's verdict on what the component would hand it.
fn host_accepts(reg: &Registration) -> Result<(), String> {
    let lowered: WitRegistration = reg.clone().into();
    rekon::plugin::validate_registration(&to_host(lowered)).map_err(|e| e.to_string())
}

fn sample<T: Clone + std::fmt::Debug + 'static>(values: &[T]) -> impl Strategy<Value = T> + use<T> {
    proptest::sample::select(values.to_vec())
}

/// Mostly `good` (so that whole registrations are often valid), sometimes
/// `bad`.
fn either<T: Clone + std::fmt::Debug + 'static>(
    good: &[T],
    bad: &[T],
) -> impl Strategy<Value = T> + use<T> {
    prop_oneof![12 => sample(good), 1 => sample(bad)]
}

fn owned(s: &'static str) -> String {
    s.to_owned()
}

fn name() -> impl Strategy<Value = String> {
    let long_ok: &'static str = "a23456789012345678901234567890123456789012345678901234567890123";
    let too_long: &'static str = "a234567890123456789012345678901234567890123456789012345678901234";
    either(
        &["cm-sync", "a", "p1", "x-y-z", long_ok],
        &[
            "", "Bad_Name", "-x", "x-", "a.b", "UPPER", "sp ace", too_long,
        ],
    )
    .prop_map(owned)
}

fn version() -> impl Strategy<Value = String> {
    either(
        &["0.1.0", "1.2.3-rc.1", "1.0.0+build.7", "10.20.30-x-y.0+001"],
        &[
            "", " ", "1", "1.2", "v1.0.0", "01.0.0", "1.0.0-", "1.0.0-01", "1.0.0+", "latest",
        ],
    )
    .prop_map(owned)
}

fn resource() -> impl Strategy<Value = ResourceType> {
    (
        either(
            &["", "batch", "nodes.example.com"],
            &["Bad Group", "-x.io", "a..b"],
        ),
        either(&["v1", "v1beta1"], &[""]),
        either(&["ConfigMap", "Node", "Widget"], &[""]),
        any::<bool>(),
    )
        .prop_map(|(group, version, kind, namespaced)| ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: String::new(),
            scope: if namespaced {
                Scope::Namespaced
            } else {
                Scope::Cluster
            },
        })
}

fn clusters() -> impl Strategy<Value = ClusterSet> {
    prop_oneof![
        4 => Just(ClusterSet::Primary),
        4 => Just(ClusterSet::All),
        4 => Just(ClusterSet::Others),
        4 => sample(&[vec!["main"], vec!["main", "edge"], vec!["edge"]])
            .prop_map(|n| ClusterSet::Named(n.into_iter().map(owned).collect())),
        1 => sample(&[vec![], vec![""], vec!["edge", "edge"]])
            .prop_map(|n| ClusterSet::Named(n.into_iter().map(owned).collect())),
    ]
}

fn selector() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(
        either(
            &["app=web", "tier in (a,b),!legacy", "", "k!=v"],
            &["a in (", "==x", "a b"],
        )
        .prop_map(owned),
    )
}

fn mapping() -> impl Strategy<Value = Mapping> {
    let prefixes =
        |p: Vec<&'static str>| Mapping::LabelKeyPrefixes(p.into_iter().map(owned).collect());
    prop_oneof![
        Just(Mapping::Itself),
        Just(Mapping::OwnerReference),
        Just(Mapping::AllPrimaries),
        Just(Mapping::Custom),
        either(
            &[vec!["node-role.kubernetes.io/"], vec!["a/", "b/"]],
            &[vec![], vec![""]]
        )
        .prop_map(prefixes),
        either(
            &[("o/cluster", "o/namespace", "o/name"), ("c", "ns", "n")],
            &[
                ("", "o/namespace", "o/name"),
                ("k", "k", "n"),
                ("c", "ns", "c")
            ]
        )
        .prop_map(|(c, ns, n)| Mapping::OwnerLabels(OwnerLabels::new(c, ns, n))),
    ]
}

fn verbs() -> impl Strategy<Value = Vec<Verb>> {
    prop_oneof![
        12 => proptest::collection::vec(sample(&Verb::ALL), 1..4),
        1 => Just(Vec::new()),
    ]
}

fn finalizer() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(
        either(
            &[
                "example.com/cleanup",
                "nodes.example.com/pool_cleanup.v1",
                // Accepted by Kubernetes (with a warning), so by rekon.
                "nodomain",
                "deletion.finalizers.rabbitmqclusters.rabbitmq.com",
            ],
            &[
                "no domain",
                "",
                "/x",
                "example.com/",
                "Example.com/x",
                "example.com/-x",
                "a/b/c",
            ],
        )
        .prop_map(owned),
    )
}

fn crd() -> impl Strategy<Value = Value> {
    let good = [
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}}),
    ];
    let bad = [
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        json!({"metadata": {}}),
        json!("a string"),
        json!([1, 2]),
    ];
    either(&good, &bad)
}

prop_compose! {
    fn registration()(
        name in name(),
        version in version(),
        primary in resource(),
        primary_clusters in clusters(),
        primary_selector in selector(),
        covered in clusters(),
        watches in proptest::collection::vec((resource(), clusters(), mapping()), 0..3),
        finalizer in finalizer(),
        permissions in proptest::collection::vec((resource(), verbs(), any::<bool>(), clusters()), 0..3),
        crds in proptest::collection::vec(crd(), 0..2),
        max in proptest::option::of(either(&[1u32, 4], &[0])),
    ) -> Registration {
        let mut reg = Registration::for_resource(&name, &version, primary)
            .primary_clusters(primary_clusters)
            .clusters(covered);
        if let Some(s) = primary_selector {
            reg = reg.primary_selector(&s);
        }
        for (resource, clusters, mapping) in watches {
            reg = reg.watch_resource(resource, clusters, mapping);
        }
        if let Some(f) = finalizer {
            reg = reg.finalizer(&f);
        }
        for (resource, verbs, status, clusters) in permissions {
            reg = reg.permission_resource(resource, &verbs, status, clusters);
        }
        for c in crds {
            reg = reg.crd(c);
        }
        if let Some(n) = max {
            reg = reg.max_concurrent_reconciles(n);
        }
        reg
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn sdk_and_host_accept_and_refuse_the_same_registrations(reg in registration()) {
        let sdk = sdk_accepts(&reg);
        let host = host_accepts(&reg);
        prop_assert_eq!(
            sdk.is_ok(),
            host.is_ok(),
            "the SDK says {:?}, the host says {:?} for {:#?}",
            sdk,
            host,
            reg
        );
    }
}

/// The generator reaches both verdicts often, so the agreement above is
/// not vacuous.
#[test]
fn the_generator_yields_valid_and_invalid_registrations() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..1000 {
        let reg = registration().new_tree(&mut runner).unwrap().current();
        match host_accepts(&reg) {
            Ok(()) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        accepted >= 20 && refused >= 20,
        "{accepted} accepted, {refused} refused"
    );
}

/// What the issue found the SDK letting through is refused by both.
#[test]
fn former_drifts_are_refused_by_both() {
    let valid =
        Registration::new::<rekon_sdk::k8s_openapi::api::core::v1::ConfigMap>("cm-sync", "0.1.0")
            .permission::<rekon_sdk::k8s_openapi::api::core::v1::ConfigMap>(
                Verb::READ,
                ClusterSet::All,
            )
            .finalizer("sync.example.com/cleanup");
    assert_eq!(sdk_accepts(&valid), Ok(()));
    assert_eq!(host_accepts(&valid), Ok(()));

    // "any non-empty version string" used to pass the SDK.
    let mut loose_version = valid.clone();
    loose_version.version = "latest".into();
    assert!(sdk_accepts(&loose_version).is_err());
    let host = host_accepts(&loose_version).unwrap_err();
    assert!(host.contains("not semver"), "{host}");

    // A named cluster set naming nobody used to pass both.
    let nobody = valid.clone().clusters(ClusterSet::Named(vec![]));
    assert!(sdk_accepts(&nobody).is_err());
    assert!(host_accepts(&nobody).is_err());
}

fn to_host(r: wit::Registration) -> host::Registration {
    host::Registration {
        name: r.name,
        version: r.version,
        primary: resource_to_host(r.primary),
        primary_clusters: clusters_to_host(r.primary_clusters),
        primary_selector: r.primary_selector,
        clusters: clusters_to_host(r.clusters),
        watches: r
            .watches
            .into_iter()
            .map(|w| host::Watch {
                resource: resource_to_host(w.resource),
                clusters: clusters_to_host(w.clusters),
                mapping: match w.mapping {
                    wit::Mapping::Itself => host::Mapping::Itself,
                    wit::Mapping::OwnerReference => host::Mapping::OwnerReference,
                    wit::Mapping::OwnerLabels(k) => host::Mapping::OwnerLabels(host::OwnerLabels {
                        cluster: k.cluster,
                        namespace: k.namespace,
                        name: k.name,
                    }),
                    wit::Mapping::LabelKeyPrefixes(p) => host::Mapping::LabelKeyPrefixes(p),
                    wit::Mapping::AllPrimaries => host::Mapping::AllPrimaries,
                    wit::Mapping::Custom => host::Mapping::Custom,
                },
                label_selector: w.label_selector,
            })
            .collect(),
        finalizer: r.finalizer,
        permissions: r
            .permissions
            .into_iter()
            .map(|p| host::Permission {
                resource: resource_to_host(p.resource),
                verbs: p.verbs,
                status: p.status,
                clusters: clusters_to_host(p.clusters),
            })
            .collect(),
        crds: r.crds,
        max_concurrent_reconciles: r.max_concurrent_reconciles,
    }
}

fn resource_to_host(r: wit::Resource) -> host::Resource {
    host::Resource {
        group: r.group,
        version: r.version,
        kind: r.kind,
        plural: r.plural,
        scope: match r.scope {
            wit::Scope::Namespaced => host::Scope::Namespaced,
            wit::Scope::Cluster => host::Scope::Cluster,
        },
    }
}

fn clusters_to_host(c: wit::ClusterSet) -> host::ClusterSet {
    match c {
        wit::ClusterSet::Primary => host::ClusterSet::Primary,
        wit::ClusterSet::All => host::ClusterSet::All,
        wit::ClusterSet::Others => host::ClusterSet::Others,
        wit::ClusterSet::Named(n) => host::ClusterSet::Named(n),
    }
}

//! The writer creates objects named by the API server (`generateName`):
//! each create makes another object under a name the server drew from
//! the prefix, and an apply without a name is refused with the reason.

use std::sync::Arc;
use std::time::Duration;

use kube_sim::{SimCluster, SimConfig};
use rekon::action::{Action, ApplyAction, CreateAction};
use rekon::cache::Resolver;
use rekon::cluster::ClusterRegistry;
use rekon::writer::{Writer, WriterConfig};
use serde_json::json;

#[tokio::test]
async fn a_create_named_by_the_server_gets_the_servers_name() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let sim = Arc::new(SimCluster::detached(SimConfig::new("main")));
        let clusters = ClusterRegistry::new("main", kube::Client::new(sim.router(), "default"));
        let writer = Writer::new(
            clusters,
            Resolver::default(),
            WriterConfig {
                request_timeout: Duration::from_secs(5),
                max_attempts: 3,
                max_retry_wait: Duration::from_secs(1),
            },
        );
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "w-", "namespace": "default"}, "data": {"a": "1"}});
        let create = Action::Create(CreateAction {
            cluster: "main".to_owned(),
            object: object.to_string(),
        });
        for _ in 0..2 {
            writer
                .perform("t", &create)
                .await
                .expect("a generateName create");
        }
        let names: Vec<String> = sim
            .list("v1", "configmaps", Some("default"), "")
            .expect("list")
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
            .filter(|n| n.starts_with("w-"))
            .collect();
        assert_eq!(names.len(), 2, "two creates, two objects: {names:?}");
        assert!(names.iter().all(|n| n.len() == "w-".len() + 5), "{names:?}");
        assert_ne!(names[0], names[1]);

        let apply = Action::Apply(ApplyAction {
            cluster: "main".to_owned(),
            object: object.to_string(),
            status: false,
            force: false,
        });
        let err = writer
            .perform("t", &apply)
            .await
            .expect_err("an apply needs a name");
        assert!(
            err.to_string().contains("generateName names only a create"),
            "{err}"
        );
    })
    .await
    .expect("the writer answered in time (likely deadlocked otherwise)");
}

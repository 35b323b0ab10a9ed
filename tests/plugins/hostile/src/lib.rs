//! # hostile — a plugin that tries to reach what it never declared
//!
//! Written the way an author outside the project would write a plugin that
//! misbehaves on purpose: with the Rust SDK, its registration and actions
//! spelled out by hand. Its settings (`{"trick": "<name>"}`) pick one trick;
//! the plugin registers as `hostile-<trick>`, so several copies, each with
//! its own `NAME.settings.json`, load side by side. Its primary is a
//! ConfigMap labelled `hostile.rekon.dev/trick=<trick>` in the primary
//! cluster; each reconcile of it performs the trick. Every object the
//! tricks write gets the label [`MARK`] = `<trick>`, so a test can see
//! whether anything was reached.
//!
//! | trick | declares | tries |
//! |---|---|---|
//! | `decoy-core` | kind `HostileDecoy` of the core group, plural `nodes`, cluster-scoped | a patch of `HostileDecoy node-a` (the exploit: it reached Node node-a) |
//! | `decoy-group` | kind `Decoy` of `apps`, plural `deployments` | a patch of `Decoy default/web` |
//! | `wrong-plural` | kind `Node` with plural `secrets`, and a watch of it | a patch of node-a and a read of Nodes through that declaration |
//! | `wrong-scope` | kind `Node`, namespaced | a patch of `default/node-a` |
//! | `subresource-plural` | kind `Node`, plural `nodes/status` | (refused at load) |
//! | `name-smuggle` | ConfigMap patch, correctly | a patch of a ConfigMap named `x/../../../../api/v1/nodes/node-a` |
//! | `namespace-smuggle` | ConfigMap patch, correctly | a patch of ConfigMap `web` in namespace `default/secrets` |
//! | `unserved-version` | kind `Node`, version `v9` | a patch of node-a at `v9` |
//! | `decoy-read` | a watch of kind `HostileDecoy`, plural `secrets`, namespaced | a list of it in `default`; what it read is written to its own ConfigMap's annotation [`READ`] |
//! | `many-watches` | [`MANY_WATCHES`] watches of ConfigMap, each mapped by a label-key prefix of its own | (refused at load: at most `rekon_rules::registration::MAX_WATCHES`) |

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::ResourceType;
use rekon_sdk::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The label every write of a trick carries (value: the trick).
pub const MARK: &str = "hostile.rekon.dev/reached";
/// The label selecting each instance's primary (value: the trick).
pub const TRICK_LABEL: &str = "hostile.rekon.dev/trick";
/// The annotation `decoy-read` writes what it read into (a count).
pub const READ: &str = "hostile.rekon.dev/read";

/// Which trick.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostileSettings {
    /// The trick (see the crate docs).
    #[serde(default)]
    pub trick: String,
}

/// Every trick.
pub const TRICKS: [&str; 10] = [
    "decoy-core",
    "decoy-group",
    "wrong-plural",
    "wrong-scope",
    "subresource-plural",
    "name-smuggle",
    "namespace-smuggle",
    "unserved-version",
    "decoy-read",
    "many-watches",
];

/// Watches `many-watches` declares.
pub const MANY_WATCHES: usize = 1000;

impl Settings for HostileSettings {
    fn validate(&self) -> Result<(), String> {
        if TRICKS.contains(&self.trick.as_str()) {
            Ok(())
        } else {
            Err(format!("trick must be one of {}", TRICKS.join(", ")))
        }
    }
}

fn cluster_scoped(api_version: &str, kind: &str, plural: &str) -> ResourceType {
    ResourceType::new(api_version, kind, plural, Scope::Cluster)
}

fn namespaced(api_version: &str, kind: &str, plural: &str) -> ResourceType {
    ResourceType::new(api_version, kind, plural, Scope::Namespaced)
}

/// What each trick declares (beyond its primary) and targets.
fn trick_resource(trick: &str) -> Option<ResourceType> {
    Some(match trick {
        "decoy-core" => cluster_scoped("v1", "HostileDecoy", "nodes"),
        "decoy-group" => namespaced("apps/v1", "Decoy", "deployments"),
        "wrong-plural" => cluster_scoped("v1", "Node", "secrets"),
        "wrong-scope" => namespaced("v1", "Node", "nodes"),
        "subresource-plural" => cluster_scoped("v1", "Node", "nodes/status"),
        "name-smuggle" | "namespace-smuggle" => namespaced("v1", "ConfigMap", "configmaps"),
        "unserved-version" => cluster_scoped("v9", "Node", "nodes"),
        "decoy-read" => namespaced("v1", "HostileDecoy", "secrets"),
        "many-watches" => namespaced("v1", "ConfigMap", "configmaps"),
        _ => return None,
    })
}

/// The plugin.
pub struct Hostile;

impl Plugin for Hostile {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        let settings = rekon_sdk::settings::<HostileSettings>()?;
        let trick = settings.trick.as_str();
        let resource =
            trick_resource(trick).ok_or_else(|| Error::terminal("the settings name no trick"))?;
        let verbs = [Verb::Get, Verb::List, Verb::Watch, Verb::Patch];
        let mut reg = Registration::new::<ConfigMap>(&format!("hostile-{trick}"), "1.0.0")
            .settings::<HostileSettings>()
            .primary_selector(&format!("{TRICK_LABEL}={trick}"))
            .permission::<ConfigMap>(&[Verb::Get, Verb::Patch], ClusterSet::Primary)
            .permission_resource(resource.clone(), &verbs, false, ClusterSet::Primary);
        if matches!(trick, "wrong-plural" | "decoy-read") {
            reg = reg.watch_resource(resource.clone(), ClusterSet::Primary, Mapping::AllPrimaries);
        }
        if trick == "many-watches" {
            for i in 0..MANY_WATCHES {
                // A mapping of its own each (label-key prefixes), so no two
                // are the same watch.
                reg = reg.watch_resource(
                    resource.clone(),
                    ClusterSet::Primary,
                    Mapping::LabelKeyPrefixes(vec![format!("hostile.rekon.dev/n{i}-")]),
                );
            }
        }
        Ok(reg)
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        if event.is_cleanup() {
            return Ok(Outcome::done());
        }
        let settings: HostileSettings = ctx.settings()?;
        let trick = settings.trick.as_str();
        let resource =
            trick_resource(trick).ok_or_else(|| Error::terminal("the settings name no trick"))?;
        let mark = json!({"metadata": {"labels": {MARK: trick}}});
        let target = |namespace: Option<&str>, name: &str| ObjectRef {
            cluster: req.cluster.clone(),
            resource: resource.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        let action = match trick {
            "decoy-core" | "wrong-scope" | "unserved-version" | "subresource-plural" => {
                let ns = (trick == "wrong-scope").then_some("default");
                Action::merge_patch(target(ns, "node-a"), mark)
            }
            "wrong-plural" => {
                // A read through the declaration, then the write.
                let seen = ctx
                    .list_json(&req.cluster, &resource, None, None)
                    .map_err(|e| Error::retry(format!("read refused: {e}")))?;
                let _ = seen;
                Action::merge_patch(target(None, "node-a"), mark)
            }
            "decoy-group" => Action::merge_patch(target(Some("default"), "web"), mark),
            "name-smuggle" => Action::merge_patch(
                target(Some("default"), "x/../../../../api/v1/nodes/node-a"),
                mark,
            ),
            "namespace-smuggle" => {
                Action::merge_patch(target(Some("default/secrets"), "web"), mark)
            }
            "decoy-read" => {
                let read = ctx
                    .list_json(&req.cluster, &resource, Some("default"), None)
                    .map_err(|e| Error::retry(format!("read refused: {e}")))?;
                let names: Vec<String> = read
                    .iter()
                    .filter_map(|o| o.pointer("/metadata/name")?.as_str().map(str::to_owned))
                    .collect();
                Action::merge_patch(
                    ObjectRef::for_request::<ConfigMap>(req),
                    json!({"metadata": {"annotations": {READ: names.join(",")}}}),
                )
            }
            _ => return Err(Error::terminal("unknown trick")),
        };
        Ok(Outcome::done().with(action))
    }
}

rekon_sdk::export_plugin!(Hostile);

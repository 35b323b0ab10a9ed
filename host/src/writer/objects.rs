//! Apply, patch, delete and create: one object written.
//!
//! - `apply`: server-side apply with field manager `rekon.<plugin>` (force as
//!   requested), on the object or its `/status`;
//! - `patch`: JSON merge patch (a resourceVersion precondition is written
//!   into `metadata.resourceVersion` of the patch) or JSON patch (the
//!   precondition becomes a leading `test` operation), on the object or `/status`;
//! - `delete`: an absent object is success; propagation policy and UID
//!   precondition (a UID mismatch means the object we meant is gone: success);
//! - `create`: create-if-absent (409 AlreadyExists is success).

use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use serde_json::Value;
use tracing::debug;

use super::config::Error;
use super::requests::{PatchOn, Writer, Written, resource_id};
use crate::action::{
    ApplyAction, CreateAction, DeleteAction, PatchAction, PatchType, Propagation, field_manager,
};
use crate::cache::{RawObject, ResourceId};

impl Writer {
    pub(super) async fn apply(&self, plugin: &str, a: &ApplyAction) -> Result<Written, Error> {
        let action = if a.status { "apply status of" } else { "apply" };
        let cluster = self.cluster(plugin, action, &a.cluster, "object")?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: a.cluster.clone(),
            reason,
        };
        let (obj, id, ns, name) = parse_object(&a.object).map_err(invalid)?;
        let target = self
            .target(plugin, action, &cluster, &id, ns.as_deref(), &name)
            .await?;
        let mut params = PatchParams::apply(&field_manager(plugin));
        if a.force {
            params = params.force();
        }
        let patch = Patch::Apply(&obj);
        let on = PatchOn {
            plugin,
            action,
            cluster: &cluster,
            target: &target,
            status: a.status,
            retry_conflict: false,
        };
        let written = self.send_patch(on, &params, &patch).await?;
        Ok(Written::Object(id, Box::new(written)))
    }

    /// PATCH the object or its `/status`, through [`Writer::call`].
    async fn send_patch<P: serde::Serialize + std::fmt::Debug>(
        &self,
        on: PatchOn<'_>,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<RawObject, Error> {
        let t = on.target;
        self.call(
            on.plugin,
            on.action,
            on.cluster,
            &t.describe,
            on.retry_conflict,
            || async {
                if on.status {
                    t.api.patch_status(&t.name, params, patch).await
                } else {
                    t.api.patch(&t.name, params, patch).await
                }
            },
        )
        .await
    }

    pub(super) async fn patch(&self, plugin: &str, p: &PatchAction) -> Result<Written, Error> {
        let action = if p.status { "patch status of" } else { "patch" };
        let t = &p.target;
        let cluster = self.cluster(plugin, action, &t.cluster, &t.name)?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: t.cluster.clone(),
            reason,
        };
        let body: Value = serde_json::from_str(&p.patch)
            .map_err(|e| invalid(format!("patch is not JSON: {e}")))?;
        let id = resource_id(&t.resource);
        let target = self
            .target(
                plugin,
                action,
                &cluster,
                &id,
                t.namespace.as_deref(),
                &t.name,
            )
            .await?;
        Self::check_declared(plugin, action, &cluster, &id, &target)?;
        let params = PatchParams::default();
        let precondition = p.resource_version.is_some();
        // One call for both patch types: `Patch::Json` carries its operations
        // whatever the type parameter, so both fit `Patch<Value>`.
        let patch: Patch<serde_json::Value> = match p.patch_type {
            PatchType::Merge => {
                Patch::Merge(merge_patch(body, p.resource_version.as_deref()).map_err(invalid)?)
            }
            PatchType::Json => {
                Patch::Json(json_patch(body, p.resource_version.as_deref()).map_err(invalid)?)
            }
        };
        let on = PatchOn {
            plugin,
            action,
            cluster: &cluster,
            target: &target,
            status: p.status,
            retry_conflict: !precondition,
        };
        let written = self.send_patch(on, &params, &patch).await?;
        Ok(Written::Object(id, Box::new(written)))
    }

    pub(super) async fn delete(&self, plugin: &str, d: &DeleteAction) -> Result<Written, Error> {
        let action = "delete";
        let t = &d.target;
        let cluster = self.cluster(plugin, action, &t.cluster, &t.name)?;
        let id = resource_id(&t.resource);
        let target = self
            .target(
                plugin,
                action,
                &cluster,
                &id,
                t.namespace.as_deref(),
                &t.name,
            )
            .await?;
        Self::check_declared(plugin, action, &cluster, &id, &target)?;
        let params = delete_params(d.uid.as_deref(), d.propagation);
        let result = self
            .call(
                plugin,
                action,
                &cluster,
                &target.describe,
                d.uid.is_none(),
                || async { target.api.delete(&target.name, &params).await },
            )
            .await;
        let gone = || Written::Gone {
            id: id.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
        };
        match result {
            // Still there (finalizers, foreground deletion): cache its
            // deletionTimestamp. Some kinds (Pods, Services, PVCs, …) answer
            // a completed delete with the object as it was, without a
            // deletionTimestamp: that object is gone.
            Ok(answer) => Ok(match answer.left() {
                Some(obj) if still_there(&obj) => Written::Object(id.clone(), Box::new(obj)),
                _ => gone(),
            }),
            // Already gone: done, not retried.
            Err(e) if e.status() == Some(404) => Ok(gone()),
            // The UID precondition failed: the object we meant no longer exists.
            Err(e) if e.status() == Some(409) && d.uid.is_some() => {
                debug!(%plugin, object = %target.describe, "delete skipped: the object was replaced (uid mismatch)");
                Ok(Written::Nothing)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) async fn create(&self, plugin: &str, c: &CreateAction) -> Result<Written, Error> {
        let action = "create";
        let cluster = self.cluster(plugin, action, &c.cluster, "object")?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: c.cluster.clone(),
            reason,
        };
        let (_, id, ns, naming) =
            parse_object_named(&c.object, Naming::NameOrGenerate).map_err(invalid)?;
        // Sent as the plugin wrote it: metadata parsed, the rest as its text.
        let obj: RawObject =
            serde_json::from_str(&c.object).map_err(|e| invalid(format!("not an object: {e}")))?;
        // Named by the server (`generateName`): the target is described by
        // its prefix (`web-*`); the answer carries the name it was given,
        // which is what read-your-writes stores.
        let shown = match &naming {
            ObjectName::Given(name) => name.clone(),
            ObjectName::Generated(prefix) => format!("{prefix}*"),
        };
        let target = self
            .target(plugin, action, &cluster, &id, ns.as_deref(), &shown)
            .await?;
        let result = self
            .call(
                plugin,
                action,
                &cluster,
                &target.describe,
                false,
                || async { target.api.create(&PostParams::default(), &obj).await },
            )
            .await;
        match result {
            Ok(obj) => Ok(Written::Object(id, Box::new(obj))),
            // Create-if-absent: the name is taken, so the object is there.
            // Not for a generated name: a clash there is not "the same
            // object", and the create is tried again.
            Err(Error::Api { source, .. })
                if matches!(naming, ObjectName::Given(_))
                    && matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists") =>
            {
                Ok(Written::Nothing)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the object a DELETE answered with still exists: only one
/// carrying a deletionTimestamp (held by finalizers, or deleted in the
/// foreground). Pods, Services, PVCs and a few other kinds answer a
/// completed delete with the object as it was, without one.
fn still_there(answer: &RawObject) -> bool {
    answer.metadata.deletion_timestamp.is_some()
}

/// How an object of a create or apply is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ObjectName {
    /// `metadata.name`.
    Given(String),
    /// No name: the API server makes one from this `metadata.generateName`
    /// prefix (creates only).
    Generated(String),
}

/// Which names an action accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Naming {
    /// `metadata.name` is required (apply: server-side apply names its
    /// object).
    NameOnly,
    /// `metadata.name`, or else `metadata.generateName` (create).
    NameOrGenerate,
}

/// Parse an object of an apply: its JSON, type, namespace and name.
pub(super) fn parse_object(
    json: &str,
) -> Result<(Value, ResourceId, Option<String>, String), String> {
    let (obj, id, ns, name) = parse_object_named(json, Naming::NameOnly)?;
    match name {
        ObjectName::Given(name) => Ok((obj, id, ns, name)),
        ObjectName::Generated(_) => Err("object has no metadata.name".to_owned()),
    }
}

/// Parse an object: its JSON, type, namespace and how it is named.
pub(super) fn parse_object_named(
    json: &str,
    naming: Naming,
) -> Result<(Value, ResourceId, Option<String>, ObjectName), String> {
    let obj: Value = serde_json::from_str(json).map_err(|e| format!("object is not JSON: {e}"))?;
    let api_version = obj["apiVersion"]
        .as_str()
        .ok_or("object has no apiVersion")?;
    let kind = obj["kind"].as_str().ok_or("object has no kind")?;
    let given = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty());
    let prefix = obj["metadata"]["generateName"]
        .as_str()
        .filter(|n| !n.is_empty());
    let name = match (given, prefix, naming) {
        (Some(name), _, _) => ObjectName::Given(name.to_owned()),
        (None, Some(prefix), Naming::NameOrGenerate) => ObjectName::Generated(prefix.to_owned()),
        (None, Some(_), Naming::NameOnly) => {
            return Err(
                "object has no metadata.name (metadata.generateName names only a create; an apply needs the name)"
                    .to_owned(),
            );
        }
        (None, None, Naming::NameOnly) => return Err("object has no metadata.name".to_owned()),
        (None, None, Naming::NameOrGenerate) => {
            return Err("object has neither metadata.name nor metadata.generateName".to_owned());
        }
    };
    let namespace = obj["metadata"]["namespace"].as_str().map(str::to_owned);
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version.to_owned()),
    };
    let id = ResourceId {
        group,
        version,
        kind: kind.to_owned(),
        plural: String::new(),
        namespaced: namespace.is_some(),
    };
    Ok((obj, id, namespace, name))
}

/// A merge patch with an optional resourceVersion precondition in its metadata.
fn merge_patch(mut body: Value, resource_version: Option<&str>) -> Result<Value, String> {
    let Some(rv) = resource_version else {
        return Ok(body);
    };
    let obj = body
        .as_object_mut()
        .ok_or("a merge patch with a resourceVersion precondition must be a JSON object")?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let meta = meta
        .as_object_mut()
        .ok_or("metadata of a merge patch must be an object")?;
    meta.insert("resourceVersion".into(), Value::String(rv.to_owned()));
    Ok(body)
}

/// A JSON patch with an optional resourceVersion precondition as a leading `test`.
fn json_patch(
    body: Value,
    resource_version: Option<&str>,
) -> Result<kube_json_patch::Patch, String> {
    let mut ops = match body {
        Value::Array(ops) => ops,
        _ => return Err("a JSON patch must be an array of operations".into()),
    };
    if let Some(rv) = resource_version {
        ops.insert(
            0,
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        );
    }
    serde_json::from_value(Value::Array(ops)).map_err(|e| format!("invalid JSON patch: {e}"))
}

fn delete_params(uid: Option<&str>, propagation: Option<Propagation>) -> DeleteParams {
    DeleteParams {
        propagation_policy: propagation.map(|p| match p {
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delete_answer_without_a_deletion_timestamp_is_gone() {
        let answer = |extra: serde_json::Value| -> RawObject {
            let mut obj = json!({"apiVersion": "v1", "kind": "Service",
                                 "metadata": {"name": "web", "namespace": "default"}});
            obj["metadata"]
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            // From text: a RawObject keeps its fields as serde_json's text.
            serde_json::from_str(&obj.to_string()).unwrap()
        };
        assert!(!still_there(&answer(json!({}))));
        assert!(still_there(&answer(
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]})
        )));
    }

    #[test]
    fn merge_patch_carries_the_resource_version() {
        let p = merge_patch(json!({"spec": {"a": 1}}), Some("42")).unwrap();
        assert_eq!(
            p,
            json!({"spec": {"a": 1}, "metadata": {"resourceVersion": "42"}})
        );
        let p = merge_patch(json!({"metadata": {"labels": {"x": "y"}}}), Some("7")).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"x": "y"}, "resourceVersion": "7"}})
        );
        assert_eq!(merge_patch(json!({"a": 1}), None).unwrap(), json!({"a": 1}));
        assert!(merge_patch(json!([1]), Some("1")).is_err());
    }

    #[test]
    fn json_patch_gets_a_leading_test() {
        let p = json_patch(
            json!([{"op": "remove", "path": "/metadata/labels/x"}]),
            Some("9"),
        )
        .unwrap();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "9"},
                {"op": "remove", "path": "/metadata/labels/x"}
            ])
        );
        assert!(json_patch(json!({"op": "add"}), None).is_err());
        assert!(json_patch(json!([{"op": "frobnicate", "path": "/a"}]), None).is_err());
    }

    #[test]
    fn delete_params_carry_uid_and_propagation() {
        let p = delete_params(Some("u1"), Some(Propagation::Foreground));
        assert_eq!(p.preconditions.unwrap().uid.as_deref(), Some("u1"));
        assert!(matches!(
            p.propagation_policy,
            Some(PropagationPolicy::Foreground)
        ));
        let p = delete_params(None, None);
        assert!(p.preconditions.is_none() && p.propagation_policy.is_none());
    }

    #[test]
    fn objects_name_their_type() {
        let (_, id, ns, name) = parse_object(
            r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j","namespace":"d"}}"#,
        )
        .unwrap();
        assert_eq!(
            (id.group.as_str(), id.version.as_str(), id.kind.as_str()),
            ("batch", "v1", "Job")
        );
        assert_eq!((ns.as_deref(), name.as_str()), (Some("d"), "j"));
        let (_, id, ns, _) =
            parse_object(r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}"#).unwrap();
        assert_eq!((id.group.as_str(), ns), ("", None));
        assert!(parse_object(r#"{"apiVersion":"v1","kind":"Node","metadata":{}}"#).is_err());
        assert!(parse_object("nope").is_err());
    }

    #[test]
    fn a_create_may_leave_the_name_to_the_server() {
        let generated = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"w-","namespace":"d"}}"#;
        let (_, _, ns, name) = parse_object_named(generated, Naming::NameOrGenerate).unwrap();
        assert_eq!(ns.as_deref(), Some("d"));
        assert_eq!(name, ObjectName::Generated("w-".to_owned()));
        // A given name wins (as on the API server).
        let both =
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","generateName":"w-"}}"#;
        assert_eq!(
            parse_object_named(both, Naming::NameOrGenerate).unwrap().3,
            ObjectName::Given("x".to_owned())
        );
        // An apply needs its name, and says why.
        let err = parse_object(generated).unwrap_err();
        assert!(err.contains("generateName names only a create"), "{err}");
        let none = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#;
        assert!(parse_object_named(none, Naming::NameOrGenerate).is_err());
    }
}

//! Inputs from the rest of a cluster: what other controllers and other
//! writers do to the objects a plugin works on, whatever the plugin is.
//!
//! A real cluster is never the plugin's alone (Acto's and Sieve's test
//! inputs include what other controllers do). The classes here are
//! derived from the registration only, never from what a plugin is
//! called or what its strings say:
//!
//! - **adoption**: a second object of the primary kind, made after the
//!   objects of the kinds the plugin watches by owner labels that name it
//!   already exist (more than two, so that a list order the plugin
//!   depends on differs under `shuffle`); its first reconcile sees them
//!   all at once.
//! - **another controller's finalizer** on that second object, from its
//!   creation on (a finalizer name outside any domain the plugin
//!   registers): a plugin that edits `metadata.finalizers` must leave it
//!   where it is.
//! - **changed alongside**: the second object takes every generated spec
//!   change and the rollback the first takes, but is never deleted, so
//!   that what the plugin writes about it (its status, its finalizers,
//!   its children) stays in the end state the oracles compare; the first
//!   object's deletes would take all of that away.

use serde_json::{Value, json};

/// The finalizer another controller holds on the second object. Its
/// domain is the explorer's, never a plugin's: a plugin that removes it
/// removed what is not its own.
pub const FOREIGN_FINALIZER: &str = "explore.rekon.dev/another-controller";

/// Members made before the second object (named out of name order).
pub const ADOPTED: &[&str] = &["c", "a", "b"];

/// The name of the second object of the primary kind (the first is
/// `<kind>-1`).
#[must_use]
pub fn second_name(kind: &str) -> String {
    format!("{}-2", kind.to_lowercase())
}

/// `object` (a version of the first object) as the second object: its
/// name, and another controller's finalizer.
#[must_use]
pub fn as_second(object: &Value, name: &str) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("name".into(), json!(name));
        meta.insert("finalizers".into(), json!([FOREIGN_FINALIZER]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_object_keeps_the_spec_and_gets_a_foreign_finalizer() {
        let first = json!({"apiVersion": "zoo.rekon.dev/v1", "kind": "Widget",
            "metadata": {"name": "widget-1", "namespace": "default", "labels": {"a": "b"}},
            "spec": {"replicas": 2}});
        let second = as_second(&first, &second_name("Widget"));
        assert_eq!(second["metadata"]["name"], "widget-2");
        assert_eq!(second["metadata"]["labels"], first["metadata"]["labels"]);
        assert_eq!(second["metadata"]["finalizers"], json!([FOREIGN_FINALIZER]));
        assert_eq!(second["spec"], first["spec"]);
    }
}

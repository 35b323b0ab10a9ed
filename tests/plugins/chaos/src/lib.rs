//! # chaos — a rekon plugin that misbehaves on purpose
//!
//! Used by the host's plugin-runtime tests. Its primary resource is the core
//! v1 `ConfigMap` (namespaced) in the primary cluster; it may `get` and
//! `patch` ConfigMaps there and nothing else.
//!
//! What a reconcile does is chosen by the ConfigMap's `data.mode` or, when
//! the ConfigMap has none or is not in the cache, by its name:
//!
//! | mode | behaviour |
//! |---|---|
//! | `ok` | merge patch on itself setting annotation `chaos.rekon.dev/version` = [`VERSION_MARK`] (allowed) |
//! | `loop` | spins forever (epoch deadline test) |
//! | `oom` | allocates and touches 1 MiB blocks until allocation fails (memory cap test) |
//! | `panic` | panics with [`PANIC_MESSAGE`] |
//! | `recurse` | unbounded recursion (stack overflow trap) |
//! | `overreach` | applies a `Secret` (not permitted) and patches the ConfigMap in another cluster (not permitted) |
//! | `malformed` | an apply whose object is not a JSON object (the host must refuse it) |
//! | `unwatched-read` | reads a `Secret`, a resource it does not watch (the host returns not-watched; the reconcile fails, retryable) |
//! | `error` / `terminal` | returns a retryable / terminal error |
//! | `slow-N` | burns N million loop iterations, then behaves like `ok` |
//! | `flood-N` | returns N Normal events about itself |
//! | `sleep` | sleeps an hour in WASI (`std::thread::sleep`: a monotonic-clock subscription and a blocking poll; no wasm runs for the epoch deadline to stop), then behaves like `ok` |
//! | `big-N` | a merge patch on itself whose annotation value is N KiB |
//! | `deep-N` | a merge patch on itself of N nested objects (`{"d":{"d":…{}}}`) |
//! | anything else | logs and does nothing |
//!
//! `map` (which the host calls only for custom watches — chaos declares
//! none, but a runtime test may call it directly) maps a ConfigMap to a
//! request for itself, except by the same mode: `panic` panics, `loop`
//! spins, `sleep` sleeps, `oom` exhausts memory.
//!
//! Build-time variants (cargo features): `v2` reports version `2.0.0` and
//! writes annotation value `v2` instead of `1.0.0` / `v1`;
//! `broken-register` makes `register` fail with [`REGISTER_FAILURE`].
//!
//! ```text
//! cargo build -p rekon-test-chaos --target wasm32-wasip2 --profile wasm [--features v2|broken-register]
//! ```

use std::hint::black_box;

use rekon_sdk::k8s_openapi::api::core::v1::{ConfigMap, Secret};
use rekon_sdk::kube::core::DynamicObject;
use rekon_sdk::prelude::*;
use serde_json::json;

/// The plugin's version: `1.0.0`, or `2.0.0` with feature `v2`.
pub const VERSION: &str = if cfg!(feature = "v2") {
    "2.0.0"
} else {
    "1.0.0"
};

/// The value mode `ok` writes to annotation [`ANNOTATION`]: `v1`, or `v2`
/// with feature `v2`.
pub const VERSION_MARK: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

/// The annotation mode `ok` writes.
pub const ANNOTATION: &str = "chaos.rekon.dev/version";

/// The message of the deliberate panic (followed by the request).
pub const PANIC_MESSAGE: &str = "chaos plugin panicking on purpose";

/// The error `register` returns with feature `broken-register`.
pub const REGISTER_FAILURE: &str = "chaos plugin refusing to register on purpose";

/// The cluster named by `overreach` when no other cluster is engaged.
pub const OTHER_CLUSTER: &str = "chaos-elsewhere";

/// The chaos plugin.
pub struct Chaos;

impl Plugin for Chaos {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        if cfg!(feature = "broken-register") {
            return Err(Error::terminal(REGISTER_FAILURE));
        }
        Ok(Registration::new::<ConfigMap>("chaos", VERSION)
            .permission::<ConfigMap>(&[Verb::Get, Verb::Patch], ClusterSet::Primary))
    }

    fn reconcile(ctx: &Context, req: &Request, _: Event<ConfigMap>) -> Result<Outcome, Error> {
        Self::reconcile_request(ctx, req)
    }

    /// Chaos sees every request, also for objects that are absent: the
    /// host's tests send requests for objects that are not cached and pick
    /// the mode from the name.
    fn reconcile_request(ctx: &Context, req: &Request) -> Result<Outcome, Error> {
        // A read failure must not hide the mode.
        let cm = ctx.get_requested::<ConfigMap>(req).ok().flatten();
        let mode = cm
            .as_ref()
            .and_then(|cm| cm.data.as_ref()?.get("mode").cloned())
            .unwrap_or_else(|| req.name.clone());
        let me = ObjectRef::for_request::<ConfigMap>(req);
        match mode.as_str() {
            "ok" => Ok(ok(req)),
            "loop" => spin_forever(),
            "sleep" => {
                sleep_an_hour();
                Ok(ok(req))
            }
            "oom" => exhaust_memory(),
            "panic" => panic!("{PANIC_MESSAGE} ({req})"),
            "recurse" => {
                Ok(Outcome::done().requeue_after(std::time::Duration::from_millis(recurse(1))))
            }
            "overreach" => overreach(ctx, req),
            "malformed" => {
                Ok(Outcome::done().with(Action::apply_json(&req.cluster, json!("not an object"))))
            }
            "unwatched-read" => {
                let secret =
                    ctx.get::<Secret>(&req.cluster, req.namespace.as_deref(), &req.name)?;
                Ok(Outcome::done().with(Action::normal_event(
                    me,
                    "UnexpectedRead",
                    "Get",
                    &format!(
                        "the host served an unwatched Secret (found: {})",
                        secret.is_some()
                    ),
                )))
            }
            "error" => Err(Error::retry(format!(
                "chaos plugin failing {req} on purpose (retryable)"
            ))),
            "terminal" => Err(Error::terminal(format!(
                "chaos plugin failing {req} on purpose (terminal)"
            ))),
            other => {
                if let Some(n) = other
                    .strip_prefix("slow-")
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    burn(n.saturating_mul(1_000_000));
                    return Ok(ok(req));
                }
                if let Some(n) = other
                    .strip_prefix("flood-")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    return Ok(Outcome::with_actions((0..n).map(|i| {
                        Action::normal_event(me.clone(), "Flood", "Flood", &format!("event {i}"))
                    })));
                }
                if let Some(kib) = other
                    .strip_prefix("big-")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    let value = "x".repeat(kib.saturating_mul(1024));
                    let patch = json!({"metadata": {"annotations": {ANNOTATION: value}}});
                    return Ok(Outcome::done().with(Action::merge_patch(me, patch)));
                }
                if let Some(depth) = other
                    .strip_prefix("deep-")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    return Ok(Outcome::done().with(Action::merge_patch(me, nested(depth))));
                }
                rekon_sdk::info!(ctx, "chaos: nothing to do"; mode = other, request = req);
                Ok(Outcome::done())
            }
        }
    }

    fn map(
        _ctx: &Context,
        cluster: &str,
        _resource: &ResourceType,
        object: &DynamicObject,
    ) -> Vec<Request> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let mode = object
            .data
            .pointer("/data/mode")
            .and_then(|m| m.as_str())
            .map_or_else(|| name.clone(), str::to_owned);
        match mode.as_str() {
            "panic" => panic!("{PANIC_MESSAGE} (map of {name})"),
            "loop" => spin_forever(),
            "sleep" => {
                sleep_an_hour();
                Vec::new()
            }
            "oom" => exhaust_memory(),
            _ => vec![Request {
                cluster: cluster.to_owned(),
                namespace: object.metadata.namespace.clone(),
                name,
            }],
        }
    }
}

rekon_sdk::export_plugin!(Chaos);

/// Mode `ok`: annotate itself with the build's version mark.
fn ok(req: &Request) -> Outcome {
    let patch = json!({"metadata": {"annotations": {ANNOTATION: VERSION_MARK}}});
    Outcome::done().with(Action::merge_patch(
        ObjectRef::for_request::<ConfigMap>(req),
        patch,
    ))
}

/// Mode `overreach`: two writes the registration does not permit.
fn overreach(ctx: &Context, req: &Request) -> Result<Outcome, Error> {
    let mut secret = Secret::default();
    secret.metadata.name = Some(format!("{}-stolen", req.name));
    secret.metadata.namespace = req.namespace.clone();
    secret.string_data = Some([("token".to_owned(), "exfiltrated".to_owned())].into());
    let other = ctx
        .clusters()
        .into_iter()
        .find(|c| c.name != req.cluster)
        .map_or_else(|| OTHER_CLUSTER.to_owned(), |c| c.name);
    let elsewhere = ObjectRef::new::<ConfigMap>(&other, req.namespace.as_deref(), &req.name);
    Ok(Outcome::done()
        .with(Action::apply(&req.cluster, &secret))
        .with(Action::merge_patch(
            elsewhere,
            json!({"metadata": {"annotations": {ANNOTATION: "overreach"}}}),
        )))
}

fn spin_forever() -> ! {
    let mut i: u64 = 0;
    loop {
        i = black_box(i.wrapping_add(1));
    }
}

/// Waits in WASI, not in wasm: the host must stop it at the deadline all
/// the same.
fn sleep_an_hour() {
    std::thread::sleep(std::time::Duration::from_secs(3600));
}

/// A merge patch `{"d":{"d":…{}}}` of `depth` nested objects, built
/// without recursion.
fn nested(depth: usize) -> serde_json::Value {
    let mut value = json!({});
    for _ in 1..depth {
        value = json!({ "d": value });
    }
    value
}

fn exhaust_memory() -> ! {
    const BLOCK: usize = 1 << 20;
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touch every page so the memory is really committed.
        let mut block = vec![0u8; BLOCK];
        for i in (0..BLOCK).step_by(4096) {
            block[i] = black_box(1);
        }
        blocks.push(black_box(block));
    }
}

fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 64]);
    // Never true in practice (the stack is gone long before): it only keeps
    // the compiler from seeing an unconditional recursion.
    if black_box(depth) == u64::MAX {
        return 0;
    }
    black_box(recurse(frame[63].wrapping_add(1))).wrapping_add(frame[0])
}

fn burn(iterations: u64) {
    let mut acc: u64 = 0;
    for i in 0..iterations {
        acc = black_box(acc.wrapping_add(i));
    }
    black_box(acc);
}

#[cfg(test)]
mod tests {
    use rekon_sdk::testkit::{TestkitError, World};

    use super::*;

    fn world_with(name: &str, mode: Option<&str>) -> (World, Request) {
        let mut world = World::new().primary("main").cluster("sub");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm.data = mode.map(|m| [("mode".to_owned(), m.to_owned())].into());
        world.insert("main", &cm);
        (world, Request::namespaced("main", "default", name))
    }

    /// A ConfigMap without a mode (its name decides), as the host only
    /// reconciles objects that exist.
    fn insert_named(world: &mut World, name: &str) -> Request {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        world.insert("main", &cm);
        Request::namespaced("main", "default", name)
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn registration_declares_configmaps_in_the_primary_cluster_only() {
        let reg = World::register::<Chaos>().unwrap();
        assert_eq!(reg.name, "chaos");
        assert_eq!(
            reg.version,
            if cfg!(feature = "v2") {
                "2.0.0"
            } else {
                "1.0.0"
            }
        );
        assert_eq!(reg.primary, ResourceType::of::<ConfigMap>());
        assert_eq!(reg.primary.scope, Scope::Namespaced);
        assert_eq!(reg.permissions.len(), 1);
        assert_eq!(reg.permissions[0].verbs, [Verb::Get, Verb::Patch]);
        assert_eq!(reg.permissions[0].clusters, ClusterSet::Primary);
        assert!(reg.watches.is_empty() && reg.finalizer.is_none());
    }

    #[cfg(feature = "broken-register")]
    #[test]
    fn broken_register_fails() {
        let err = World::register::<Chaos>().unwrap_err();
        assert!(err.to_string().contains(REGISTER_FAILURE), "{err}");
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn ok_annotates_itself_and_converges() {
        let (mut world, req) = world_with("ok", None);
        let outcome = world.reconcile::<Chaos>(&req).unwrap();
        let patch = outcome.find_patch::<ConfigMap>("main", "ok").unwrap();
        assert_eq!(
            patch.patch["metadata"]["annotations"][ANNOTATION],
            VERSION_MARK
        );
        world.converge::<Chaos>(&req, 3).unwrap();
        let cm: ConfigMap = world.get("main", Some("default"), "ok").unwrap();
        let expected = if cfg!(feature = "v2") { "v2" } else { "v1" };
        assert_eq!(cm.metadata.annotations.unwrap()[ANNOTATION], expected);
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn mode_in_data_wins_over_the_name() {
        let (mut world, req) = world_with("whatever", Some("ok"));
        let outcome = world.reconcile::<Chaos>(&req).unwrap();
        assert!(
            outcome
                .find_patch::<ConfigMap>("main", "whatever")
                .is_some()
        );
        // Without a mode in its data, the name decides.
        let flood = insert_named(&mut world, "flood-3");
        let outcome = world.reconcile::<Chaos>(&flood).unwrap();
        assert_eq!(outcome.events().count(), 3);
        assert!(!outcome.has_writes());
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn overreach_returns_forbidden_writes() {
        let (mut world, req) = world_with("overreach", None);
        let outcome = world.reconcile::<Chaos>(&req).unwrap();
        assert!(
            outcome
                .find_apply::<Secret>("main", "overreach-stolen")
                .is_some()
        );
        assert!(
            outcome
                .find_patch::<ConfigMap>("sub", "overreach")
                .is_some()
        );
        let err = world.apply::<Chaos>(&req, &outcome).unwrap_err();
        assert!(matches!(err, TestkitError::Forbidden { .. }), "{err}");
        assert!(
            world
                .get::<Secret>("main", Some("default"), "overreach-stolen")
                .is_none()
        );
        // Without another engaged cluster it names a made-up one.
        world.remove_cluster("sub");
        let outcome = world.reconcile::<Chaos>(&req).unwrap();
        assert!(
            outcome
                .find_patch::<ConfigMap>(OTHER_CLUSTER, "overreach")
                .is_some()
        );
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn malformed_apply_is_refused() {
        let (mut world, req) = world_with("malformed", None);
        let outcome = world.reconcile::<Chaos>(&req).unwrap();
        assert_eq!(
            outcome.applies().next().unwrap().object,
            json!("not an object")
        );
        assert!(matches!(
            world.apply::<Chaos>(&req, &outcome),
            Err(TestkitError::Invalid { .. })
        ));
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn errors_and_unwatched_reads() {
        let (mut world, _) = world_with("x", None);
        let fail = |world: &mut World, name: &str| {
            let req = insert_named(world, name);
            match world.reconcile::<Chaos>(&req) {
                Err(TestkitError::Reconcile { error, .. }) => error,
                other => panic!("expected a reconcile error, got {other:?}"),
            }
        };
        assert!(fail(&mut world, "error").is_retryable());
        assert!(!fail(&mut world, "terminal").is_retryable());
        let unwatched = fail(&mut world, "unwatched-read");
        assert!(unwatched.is_retryable());
        assert!(unwatched.message().contains("not watched"), "{unwatched}");
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn slow_finishes_like_ok_and_unknown_modes_do_nothing() {
        let (mut world, _) = world_with("x", None);
        let slow = insert_named(&mut world, "slow-1");
        let outcome = world.reconcile::<Chaos>(&slow).unwrap();
        assert!(outcome.find_patch::<ConfigMap>("main", "slow-1").is_some());
        let calm = insert_named(&mut world, "calm");
        let outcome = world.reconcile::<Chaos>(&calm).unwrap();
        assert!(outcome.actions.is_empty());
        assert!(
            world
                .logs()
                .iter()
                .any(|l| l.fields.contains(&("mode".into(), "calm".into())))
        );
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    fn map_requests_the_object_itself() {
        let (mut world, _) = world_with("x", None);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
        let reqs = world
            .map::<Chaos>("sub", &ResourceType::of::<ConfigMap>(), &cm)
            .unwrap();
        assert_eq!(reqs, [Request::namespaced("sub", "ns", "a")]);
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    #[should_panic(expected = "chaos plugin panicking on purpose (map of calm)")]
    fn map_panics_by_mode() {
        let (mut world, _) = world_with("x", None);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "calm", "namespace": "ns"}, "data": {"mode": "panic"}});
        let _ = world.map::<Chaos>("main", &ResourceType::of::<ConfigMap>(), &cm);
    }

    #[cfg(not(feature = "broken-register"))]
    #[test]
    #[should_panic(expected = "chaos plugin panicking on purpose (main/default/panic)")]
    fn panic_panics_recognizably() {
        let (mut world, req) = world_with("panic", None);
        let _ = world.reconcile::<Chaos>(&req);
    }
}

//! The garbage collector's and the namespace controller's deletes as API
//! requests: admitted like a client's DELETE.
//!
//! On a real cluster both run in kube-controller-manager and delete
//! through the API with their service accounts
//! (`system:serviceaccount:kube-system:generic-garbage-collector`,
//! `system:serviceaccount:kube-system:namespace-controller`), so
//! validating webhooks and ValidatingAdmissionPolicies see those DELETEs
//! and may refuse them. kube-sim runs both controllers inside the store
//! (`Inner::settle`); while the cluster has no admission configured (no
//! webhook configuration, no policy) a delete there has nothing to pass
//! and is done in place, under the lock, as before. Once anything is
//! configured, the delete is queued here instead ([`Queue`]) and a task
//! per cluster ([`spawn`]) runs each one through
//! [`webhook::drive`](crate::admission::webhook::drive) and
//! [`Inner::delete`], the path of a client's DELETE, with the lock released
//! while webhooks are called.
//!
//! A refused delete leaves the object in place and is retried with the
//! workqueue's per-item exponential backoff (5 ms doubling; kube-sim caps
//! it at [`MAX_BACKOFF`] where the GC's queue caps at 1,000 s and the
//! namespace controller's at 60 s, so that a test lifting the refusal
//! sees the delete within a second). Each attempt first checks that the
//! delete is still due (the object is the same one, its owners are still
//! gone, the namespace still terminating), as the controllers re-check an
//! item they pick up. A namespace's failed content deletes are reported in
//! its `NamespaceDeletionContentFailure` condition, as the namespace
//! controller reports them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Inner, Propagation, Work, finalizers, is_deleting, meta_str, owner_uids};
use crate::auth::UserInfo;
use crate::resources::StorageKey;

/// The garbage collector's user.
pub const GC_USER: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The namespace controller's user.
pub const NAMESPACE_USER: &str = "system:serviceaccount:kube-system:namespace-controller";
/// The longest wait between two attempts of one refused delete.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
const BASE_BACKOFF: Duration = Duration::from_millis(5);

/// Which controller wants an object deleted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// The garbage collector: every owner of the object is gone.
    Dangling,
    /// The garbage collector: the owner with this uid is being deleted
    /// in the foreground.
    Foreground(String),
    /// The namespace controller: the namespace is terminating.
    Namespace(String),
}

impl Actor {
    fn user(&self) -> UserInfo {
        let name = match self {
            Self::Namespace(_) => NAMESPACE_USER,
            Self::Dangling | Self::Foreground(_) => GC_USER,
        };
        UserInfo {
            name: name.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:kube-system".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        }
    }
}

/// One delete a controller wants, waiting for its (next) attempt.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub sk: StorageKey,
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub propagation: Propagation,
    pub actor: Actor,
    attempts: u32,
    due: Instant,
    in_flight: bool,
    /// Why the last attempt failed.
    error: Option<String>,
}

/// The controllers' deletes waiting to be admitted, by the object's uid.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// A task runs the queue ([`spawn`]); without one (a detached
    /// cluster, no runtime) deletes are done in place.
    pub enabled: bool,
    items: BTreeMap<String, Pending>,
}

impl Queue {
    /// Whether an attempt is due now.
    pub fn has_due(&self) -> bool {
        let now = Instant::now();
        self.items.values().any(|p| !p.in_flight && p.due <= now)
    }

    /// When the next attempt is due.
    fn next_due(&self) -> Option<Instant> {
        self.items
            .values()
            .filter(|p| !p.in_flight)
            .map(|p| p.due)
            .min()
    }

    /// The attempts due now, marked in flight.
    fn take_due(&mut self) -> Vec<Pending> {
        let now = Instant::now();
        self.items
            .values_mut()
            .filter(|p| !p.in_flight && p.due <= now)
            .map(|p| {
                p.in_flight = true;
                p.clone()
            })
            .collect()
    }

    /// The latest error of each resource (`group/plural`) whose content
    /// delete failed in namespace `ns`, in the objects' name order.
    pub fn namespace_errors(&self, ns: &str) -> Vec<String> {
        let mut first: BTreeMap<(&StorageKey, &str), &str> = BTreeMap::new();
        for p in self.items.values() {
            if let (Actor::Namespace(n), Some(e)) = (&p.actor, &p.error)
                && n == ns
            {
                first.insert((&p.sk, p.name.as_str()), e.as_str());
            }
        }
        let mut per_resource: BTreeMap<&StorageKey, &str> = BTreeMap::new();
        for ((sk, _), e) in first {
            per_resource.entry(sk).or_insert(e);
        }
        per_resource.into_values().map(str::to_string).collect()
    }
}

impl Inner {
    /// Whether a controller's delete would meet admission: any webhook
    /// configuration or ValidatingAdmissionPolicy exists.
    pub(super) fn deletes_are_admitted(&self) -> bool {
        self.gc.enabled
            && (crate::admission::webhook::configured(self)
                || self
                    .objects(crate::admission::policy::POLICIES)
                    .is_some_and(|p| !p.is_empty()))
    }

    /// Queues a controller's delete of `obj` (once per object).
    pub(super) fn queue_delete(
        &mut self,
        sk: &StorageKey,
        obj: &Value,
        propagation: Propagation,
        actor: Actor,
    ) {
        let Some(uid) = meta_str(obj, "uid") else {
            return;
        };
        if self.gc.items.contains_key(uid) {
            return;
        }
        let p = Pending {
            sk: sk.clone(),
            ns: meta_str(obj, "namespace").unwrap_or_default().to_string(),
            name: meta_str(obj, "name").unwrap_or_default().to_string(),
            uid: uid.to_string(),
            propagation,
            actor,
            attempts: 0,
            due: Instant::now(),
            in_flight: false,
            error: None,
        };
        self.gc.items.insert(p.uid.clone(), p);
    }

    /// Whether the delete `p` is still due: the same object, not already
    /// deleted that way, and the controller's reason still holds.
    fn still_due(&self, p: &Pending) -> bool {
        let Some(obj) = self.lookup(&p.sk, &(p.ns.clone(), p.name.clone())) else {
            return false;
        };
        if meta_str(&obj, "uid") != Some(p.uid.as_str()) {
            return false;
        }
        let fins = finalizers(&obj);
        let already = is_deleting(&obj)
            && match p.propagation {
                Propagation::Foreground => fins.iter().any(|f| f == super::FG),
                Propagation::Orphan => fins.iter().any(|f| f == super::ORPHAN),
                Propagation::Background => true,
            };
        if already {
            return false;
        }
        match &p.actor {
            Actor::Dangling => {
                let owners = owner_uids(&obj);
                !owners.is_empty() && owners.iter().all(|o| !self.uids.contains_key(o))
            }
            Actor::Foreground(owner) => {
                owner_uids(&obj).contains(owner)
                    && self
                        .uids
                        .get(owner)
                        .cloned()
                        .and_then(|r| self.lookup_ref(&r))
                        .is_some_and(|o| {
                            is_deleting(&o) && finalizers(&o).iter().any(|f| f == super::FG)
                        })
            }
            Actor::Namespace(ns) => self.namespace_obj(ns).is_some_and(|n| is_deleting(&n)),
        }
    }

    /// Records the outcome of an attempt: done (deleted, or no longer due)
    /// or refused (retried after the backoff; a namespace's condition
    /// says why).
    fn attempted(&mut self, p: &Pending, out: Result<(), crate::error::ApiError>) {
        let Some(item) = self.gc.items.get_mut(&p.uid) else {
            return;
        };
        match out {
            Ok(()) => {
                self.gc.items.remove(&p.uid);
            }
            Err(e) if e.code == 404 => {
                self.gc.items.remove(&p.uid);
            }
            Err(e) => {
                let object = format!("{}/{}/{}", p.sk, p.ns, p.name);
                let user = p.actor.user().name;
                // The first refusal at info, its retries at debug.
                if item.attempts == 0 {
                    tracing::info!(%object, %user, error = %e.message, "controller delete refused; retrying");
                } else {
                    tracing::debug!(%object, %user, error = %e.message, attempts = item.attempts + 1, "controller delete refused again");
                }
                item.attempts += 1;
                let backoff = BASE_BACKOFF
                    .saturating_mul(1u32 << item.attempts.min(20).saturating_sub(1))
                    .min(MAX_BACKOFF);
                item.due = Instant::now() + backoff;
                item.in_flight = false;
                item.error = Some(e.message);
            }
        }
        if let Actor::Namespace(ns) = &p.actor {
            self.work.push_back(Work::Namespace(ns.clone()));
        }
    }
}

/// Starts the task that runs a cluster's queued controller deletes; it
/// ends at shutdown or when the cluster is dropped. Without a Tokio
/// runtime nothing starts and deletes stay in place.
pub(crate) fn spawn(cs: &Arc<crate::server::ClusterState>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    cs.store.write(|i| i.gc.enabled = true);
    let weak = Arc::downgrade(cs);
    let wake = cs.store.gc_wake.clone();
    let mut shutdown = cs.shutdown.subscribe();
    rt.spawn(async move {
        loop {
            let next = {
                let Some(cs) = weak.upgrade() else { return };
                let due = cs.store.read(|i| i.gc.take_due());
                for p in due {
                    attempt(&cs, &p).await;
                }
                cs.store.read(|i| i.gc.next_due())
            };
            let sleep = match next {
                Some(t) => tokio::time::sleep_until(t.into()),
                None => tokio::time::sleep(Duration::from_secs(3600)),
            };
            tokio::select! {
                () = wake.notified() => {}
                () = sleep => {}
                r = shutdown.wait_for(|s| *s) => {
                    let _ = r;
                    return;
                }
            }
        }
    });
}

/// One attempt: a DELETE through admission, as the controller's client
/// sends it (the garbage collector with a uid precondition).
async fn attempt(cs: &crate::server::ClusterState, p: &Pending) {
    let Some(res) = cs.store.read(|i| i.info_for(&p.sk)) else {
        cs.store.write(|i| i.gc.items.remove(&p.uid));
        return;
    };
    let user = p.actor.user();
    let ns = (!p.ns.is_empty()).then_some(p.ns.as_str());
    let out = crate::admission::webhook::drive(cs, |i, pass| {
        if !i.still_due(p) {
            return Ok(());
        }
        let opts = super::DeleteOpts {
            propagation: Some(p.propagation),
            uid: (!matches!(p.actor, Actor::Namespace(_))).then(|| p.uid.clone()),
            user: Some(user.clone()),
            webhooks: pass,
            ..Default::default()
        };
        i.delete(&res, ns, &p.name, &opts).map(|_| ())
    })
    .await;
    cs.store.write(|i| i.attempted(p, out.map(|_| ())));
}

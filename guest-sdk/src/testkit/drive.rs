//! Running a plugin against a [`World`]: register, reconcile, map, apply
//! its actions, converge, and the assertions built on them.

use std::collections::BTreeMap;
use std::rc::Rc;

use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::action::{Action, ObjectRef, Outcome};
use crate::context::{Context, Phase, Request};
use crate::plugin::Plugin;
use crate::registration::Registration;
use crate::resource::ResourceType;
use rekon_rules::{PrimaryState, Step, step};

use super::error::TestkitError;
use super::store::{Key, check_permission, is_deleting, set_rv};
use super::world::World;

impl World {
    /// Calls `P::register` and validates the result as the host would,
    /// with no settings (see [`World::register_plugin`] for a world's).
    pub fn register<P: Plugin>() -> Result<Registration, TestkitError> {
        World::new().register_plugin::<P>()
    }

    /// Calls `P::register` with this world's settings
    /// ([`World::with_settings`]) and validates the result as the host
    /// would: invalid settings are refused with the plugin's reason
    /// (`invalid settings: …`), and settings given to a plugin that
    /// declares none are refused.
    pub fn register_plugin<P: Plugin>(&self) -> Result<Registration, TestkitError> {
        let backend = self.context().backend();
        let source: Rc<dyn crate::context::Backend> = Rc::clone(&backend);
        crate::settings::with_source(source, || crate::plugin::register_checked::<P>(&*backend))
            .map_err(|message| TestkitError::Register(crate::Error::terminal(message)))
    }

    /// Runs `P::reconcile` for `req` as the host would, deciding with the
    /// host's own rule ([`rekon_rules::step`]): an object that is not a
    /// primary (outside the primary clusters or the primary selector, and
    /// without the plugin's finalizer), or that is gone, is not reconciled
    /// at all (an empty outcome); a new primary first gets the finalizer;
    /// the plugin is told the [`Phase`] (live, deleting, leaving) and served
    /// only the reads its registration declares. The outcome is returned,
    /// not applied (see [`World::apply`]).
    pub fn reconcile<P: Plugin>(&mut self, req: &Request) -> Result<Outcome, TestkitError> {
        let reg = self.register_plugin::<P>()?;
        let phase = match self.step(&reg, req) {
            None | Some(Step::Ignore) => return Ok(Outcome::done()),
            Some(Step::AddFinalizer) => {
                self.ensure_finalizer(&reg, req);
                Phase::Live
            }
            Some(Step::Reconcile { phase, .. }) => phase,
        };
        let ctx = self.restricted_context(reg).with_phase(phase);
        let result =
            crate::settings::with_source(ctx.backend(), || P::reconcile_request(&ctx, req));
        self.state.borrow_mut().reads = None;
        result.map_err(|error| TestkitError::Reconcile {
            request: req.clone(),
            error,
        })
    }

    /// Runs `P::map` for an event on `object` (JSON) of `resource` in
    /// `cluster`, with the registration's read restrictions.
    pub fn map<P: Plugin>(
        &mut self,
        cluster: &str,
        resource: &ResourceType,
        object: &Value,
    ) -> Result<Vec<Request>, TestkitError> {
        let reg = self.register_plugin::<P>()?;
        let obj: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| TestkitError::Invalid {
                target: format!("{resource} in cluster {cluster}"),
                message: e.to_string(),
            })?;
        let ctx = self.restricted_context(reg);
        let requests =
            crate::settings::with_source(ctx.backend(), || P::map(&ctx, cluster, resource, &obj));
        self.state.borrow_mut().reads = None;
        Ok(requests)
    }

    /// Applies a reconcile's outcome for `req` as the host would: checks
    /// every action against `P`'s permissions first (nothing is written if
    /// one is forbidden), performs the actions in order per cluster (a
    /// failure stops the remaining actions of that cluster; other clusters
    /// go on), records events, and — when the outcome is `finalized`, every
    /// action succeeded and the primary is being deleted or leaving the
    /// primary scope — removes the plugin's finalizer. Returns whether the
    /// world changed (events do not count).
    ///
    /// # Errors
    ///
    /// A forbidden action, or the failed actions: the failure itself when
    /// one action failed, [`TestkitError::Writes`] when several did. What
    /// succeeded stays applied.
    pub fn apply<P: Plugin>(
        &mut self,
        req: &Request,
        outcome: &Outcome,
    ) -> Result<bool, TestkitError> {
        let reg = self.register_plugin::<P>()?;
        let release = matches!(
            self.step(&reg, req),
            Some(Step::Reconcile { release: true, .. })
        );
        let primary_cluster = self.primary_cluster();
        for action in &outcome.actions {
            check_permission(&reg, action, primary_cluster.as_deref())?;
        }
        // Per cluster, in order of first appearance (the host runs the
        // clusters concurrently; they are independent, so order across
        // clusters does not matter).
        let mut per_cluster: Vec<(&str, Vec<&Action>)> = Vec::new();
        for action in &outcome.actions {
            let cluster = action.cluster();
            match per_cluster.iter_mut().find(|(c, _)| *c == cluster) {
                Some((_, list)) => list.push(action),
                None => per_cluster.push((cluster, vec![action])),
            }
        }
        let mut changed = false;
        let mut failed = Vec::new();
        for (_, actions) in per_cluster {
            for action in actions {
                match self.perform_checked(&reg, action) {
                    Ok(c) => changed |= c,
                    Err(e) => {
                        failed.push(e);
                        break;
                    }
                }
            }
        }
        if !failed.is_empty() {
            return Err(if failed.len() == 1 {
                failed.remove(0)
            } else {
                TestkitError::Writes(failed)
            });
        }
        if outcome.finalized
            && release
            && let Some(finalizer) = &reg.finalizer
        {
            let key = Key::of(&ObjectRef {
                cluster: req.cluster.clone(),
                resource: reg.primary.clone(),
                namespace: req.namespace.clone(),
                name: req.name.clone(),
            });
            changed |= self.state.borrow_mut().remove_finalizer(&key, finalizer);
        }
        Ok(changed)
    }

    /// Reconciles `req` and applies the outcome until a round changes
    /// nothing; returns the outcomes of every round (the last one is the
    /// stable one). Fails if the plugin errs, writes something forbidden,
    /// a write fails (see [`World::apply`]) or it does not settle within
    /// `max_rounds`.
    pub fn converge<P: Plugin>(
        &mut self,
        req: &Request,
        max_rounds: usize,
    ) -> Result<Vec<Outcome>, TestkitError> {
        let mut outcomes = Vec::new();
        for _ in 0..max_rounds {
            let outcome = self.reconcile::<P>(req)?;
            let changed = self.apply::<P>(req, &outcome)?;
            outcomes.push(outcome);
            if !changed {
                return Ok(outcomes);
            }
        }
        Err(TestkitError::NotConverged {
            request: req.to_string(),
            rounds: max_rounds,
            last: Box::new(outcomes.pop().unwrap_or_default()),
        })
    }

    /// Like [`World::converge`] for every primary object (of the plugin's
    /// primary kind, in its primary clusters, matching its primary selector,
    /// or leaving that scope with the finalizer): each round reconciles and
    /// applies them all; stops after a round that changed nothing. Returns
    /// the number of rounds.
    pub fn converge_all<P: Plugin>(&mut self, max_rounds: usize) -> Result<usize, TestkitError> {
        let reg = self.register_plugin::<P>()?;
        let mut last = Outcome::done();
        for round in 1..=max_rounds {
            let mut changed = false;
            for req in self.primaries(&reg) {
                // A primary deleted earlier in this round is simply gone.
                let outcome = self.reconcile::<P>(&req)?;
                changed |= self.apply::<P>(&req, &outcome)?;
                last = outcome;
            }
            if !changed {
                return Ok(round);
            }
        }
        Err(TestkitError::NotConverged {
            request: "*".into(),
            rounds: max_rounds,
            last: Box::new(last),
        })
    }

    /// Panics unless a reconcile of `req` returns no writes at all (events
    /// allowed). For plugins that only write on differences (patch, create,
    /// delete); a plugin that server-side applies every time should use
    /// [`World::assert_stable`].
    ///
    /// # Panics
    ///
    /// On writes or on a reconcile error.
    pub fn assert_no_writes<P: Plugin>(&mut self, req: &Request) {
        match self.reconcile::<P>(req) {
            Ok(outcome) => assert!(
                !outcome.has_writes(),
                "expected no writes for {req}, got {:#?}",
                outcome.writes().collect::<Vec<_>>()
            ),
            Err(e) => panic!("expected no writes for {req}, got an error: {e}"),
        }
    }

    /// Panics unless reconciling `req` and applying the outcome changes
    /// nothing in the world.
    ///
    /// # Panics
    ///
    /// On a change or an error.
    pub fn assert_stable<P: Plugin>(&mut self, req: &Request) {
        let outcome = self
            .reconcile::<P>(req)
            .unwrap_or_else(|e| panic!("expected {req} to be stable, got an error: {e}"));
        let before = self.snapshot();
        match self.apply::<P>(req, &outcome) {
            Ok(false) => {}
            Ok(true) => {
                let after = self.snapshot();
                let diff: Vec<String> = after
                    .iter()
                    .filter(|(k, v)| before.get(*k) != Some(*v))
                    .map(|(k, v)| format!("{k}: {v}"))
                    .chain(
                        before
                            .keys()
                            .filter(|k| !after.contains_key(*k))
                            .map(|k| format!("{k}: deleted")),
                    )
                    .collect();
                panic!(
                    "expected {req} to be stable, but applying {outcome:#?} changed:\n{}",
                    diff.join("\n")
                );
            }
            Err(e) => panic!("expected {req} to be stable, applying its outcome failed: {e}"),
        }
    }

    pub(super) fn snapshot(&self) -> BTreeMap<String, Value> {
        self.state
            .borrow()
            .objects
            .iter()
            .map(|(k, s)| (k.to_string(), s.object.clone()))
            .collect()
    }

    pub(super) fn primary_cluster(&self) -> Option<String> {
        self.state
            .borrow()
            .clusters
            .iter()
            .find(|c| c.primary)
            .map(|c| c.name.clone())
    }

    pub(super) fn primaries(&self, reg: &Registration) -> Vec<Request> {
        let candidates: Vec<Request> = self
            .state
            .borrow()
            .objects
            .keys()
            .filter(|k| k.group == reg.primary.group && k.kind == reg.primary.kind)
            .map(|k| Request {
                cluster: k.cluster.clone(),
                namespace: k.namespace.clone(),
                name: k.name.clone(),
            })
            .collect();
        candidates
            .into_iter()
            .filter(|req| !matches!(self.step(reg, req), None | Some(Step::Ignore)))
            .collect()
    }

    /// The host's decision for the object `req` names (`None`: absent or
    /// in a cluster that is not engaged): the shared rule, fed the scope
    /// (primary clusters and selector), deletion and finalizer.
    pub(super) fn step(&self, reg: &Registration, req: &Request) -> Option<Step> {
        let primary = self.primary_cluster();
        let state = self.state.borrow();
        if !state.engaged(&req.cluster) {
            return None;
        }
        let key = Key::of(&ObjectRef {
            cluster: req.cluster.clone(),
            resource: reg.primary.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
        });
        let obj = &state.objects.get(&key)?.object;
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let has_finalizer = reg.finalizer.as_ref().is_some_and(|f| {
            obj.pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|list| list.iter().any(|x| x == f))
        });
        Some(step(
            reg.finalizer.is_some(),
            PrimaryState {
                in_scope: reg.in_primary_scope(&req.cluster, &labels, primary.as_deref()),
                deleting: is_deleting(obj),
                has_finalizer,
            },
        ))
    }

    /// Performs `action` and checks what it wrote against the rules of
    /// the plugin's CRDs (`crd_rules.rs`); a write they refuse is undone.
    fn perform_checked(
        &mut self,
        reg: &Registration,
        action: &Action,
    ) -> Result<bool, TestkitError> {
        let mut state = self.state.borrow_mut();
        // The object written: its target, or (a create with generateName)
        // the one object that was not there before.
        let target = action.target().ok().map(|t| Key::of(&t));
        let before: Option<std::collections::BTreeSet<Key>> = match (&target, action) {
            (None, Action::Create(_)) => Some(state.objects.keys().cloned().collect()),
            _ => None,
        };
        let key = match action {
            Action::Apply(a) => Key::of_json(&a.cluster, &a.object).ok(),
            _ => target,
        };
        let old = key.as_ref().and_then(|k| state.objects.get(k).cloned());
        let changed = state.perform(&reg.name, action)?;
        if !changed || matches!(action, Action::Delete(_) | Action::Event(_)) {
            return Ok(changed);
        }
        let key = key.or_else(|| {
            let before = before?;
            state.objects.keys().find(|k| !before.contains(k)).cloned()
        });
        let Some(key) = key else {
            return Ok(changed);
        };
        let Some(new) = state.objects.get(&key).map(|s| s.object.clone()) else {
            return Ok(changed);
        };
        if let Err(e) = super::crd_rules::check(reg, &key, old.as_ref().map(|s| &s.object), &new) {
            match old {
                Some(old) => state.objects.insert(key, old),
                None => state.objects.remove(&key),
            };
            return Err(e);
        }
        Ok(changed)
    }

    pub(super) fn restricted_context(&self, reg: Registration) -> Context {
        self.state.borrow_mut().reads = Some(reg);
        self.context()
    }

    /// The host adds the finalizer before the first reconcile.
    pub(super) fn ensure_finalizer(&mut self, reg: &Registration, req: &Request) {
        let Some(finalizer) = &reg.finalizer else {
            return;
        };
        let key = Key::of(&ObjectRef {
            cluster: req.cluster.clone(),
            resource: reg.primary.clone(),
            namespace: req.namespace.clone(),
            name: req.name.clone(),
        });
        let mut state = self.state.borrow_mut();
        let rv = state.next_rv;
        let Some(stored) = state.objects.get_mut(&key) else {
            return;
        };
        let meta = &mut stored.object["metadata"];
        if meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
            return;
        }
        let finalizers = meta.as_object_mut().map(|m| {
            let entry = m.entry("finalizers").or_insert_with(|| json!([]));
            if entry.is_null() {
                *entry = json!([]);
            }
            entry
        });
        if let Some(Value::Array(list)) = finalizers
            && !list.iter().any(|f| f == finalizer)
        {
            list.push(Value::String(finalizer.clone()));
            set_rv(&mut stored.object, rv);
            state.next_rv += 1;
        }
    }
}

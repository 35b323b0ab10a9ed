//! Deletes and the controller-like reactions after each write: garbage
//! collection (ownerReferences, foreground and orphan deletion), the
//! namespace controller and the CRD cleanup.

use super::*;

/// The namespace controller's status conditions: (type, status, reason, message).
/// `failed`: the errors of content deletes that failed (admission refused
/// them), one per resource.
pub(super) fn namespace_conditions(
    failed: &[String],
    remaining: Option<&str>,
    finalizers: Option<&str>,
) -> Vec<(&'static str, &'static str, &'static str, String)> {
    vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        if failed.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            )
        } else {
            // makeDeleteContentCondition: the messages sorted.
            let mut msgs = failed.to_vec();
            msgs.sort();
            (
                "NamespaceDeletionContentFailure",
                "True",
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            )
        },
        match remaining {
            Some(r) => (
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                format!("Some resources are remaining: {r}"),
            ),
            None => (
                "NamespaceContentRemaining",
                "False",
                "ContentRemoved",
                "All content successfully removed".into(),
            ),
        },
        match finalizers {
            Some(f) => (
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {f}"),
            ),
            None => (
                "NamespaceFinalizersRemaining",
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            ),
        },
    ]
}

impl Inner {
    // ----- deletes -----------------------------------------------------

    pub(crate) fn delete(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Deleted> {
        let key = Self::obj_key(res, ns, name);
        let sk = res.storage_key();
        let obj = self
            .lookup(&sk, &key)
            .ok_or_else(|| ApiError::not_found(res, name))?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&obj, "uid")
        {
            return Err(ApiError::conflict_msg(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&obj, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && Some(rv.as_str()) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict_msg(
                res,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&obj, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        if res.builtin
            && res.kind == "Namespace"
            && ["default", "kube-system", "kube-public"].contains(&name)
        {
            return Err(ApiError::forbidden(
                res,
                name,
                "this namespace may not be deleted",
            ));
        }
        // Admission sees the object at the request's version (converted by
        // a CRD's conversion webhook for a DELETE of the API).
        let view = match &opts.webhooks {
            webhook::Pass::Run(_) => webhook::conversion::view(self, res, &obj, &opts.webhooks)?,
            webhook::Pass::Off => obj.clone(),
        };
        let point = opts.point(res, &key.0, &key.1, Some(&view));
        webhook::mutation_point(self, &point, None)?;
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "DELETE",
                &key,
                None,
                None,
                Some(&view),
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        webhook::validation_point(self, &point, None)?;
        if opts.dry_run {
            let gone = !is_deleting(&obj) && finalizers(&obj).is_empty();
            return Ok(Deleted { obj, gone });
        }
        Ok(self.delete_stored(res, &sk, key, obj, opts.propagation))
    }

    /// Deletes a stored object: marks it when finalizers remain, else removes it.
    pub(super) fn delete_stored(
        &mut self,
        res: &ResourceInfo,
        sk: &StorageKey,
        key: ObjKey,
        obj: Arc<Value>,
        propagation: Option<Propagation>,
    ) -> Deleted {
        let mut fins = finalizers(&obj);
        let policy = propagation.unwrap_or_default();
        match policy {
            Propagation::Foreground if !fins.iter().any(|f| f == FG) => fins.push(FG.into()),
            Propagation::Orphan if !fins.iter().any(|f| f == ORPHAN) => fins.push(ORPHAN.into()),
            _ => {}
        }
        let is_ns = res.builtin && res.kind == "Namespace";
        let is_crd = **sk == *CRD_SK;
        if is_crd && !fins.iter().any(|f| f == CRD_CLEANUP) && !is_deleting(&obj) {
            fins.push(CRD_CLEANUP.into());
        }
        let ns_pending = is_ns
            && obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && !ns_pending {
            let gone = self.remove(sk, &key, None);
            return Deleted {
                obj: gone,
                gone: true,
            };
        }
        let mut new = (*obj).clone();
        let first = !is_deleting(&obj);
        set_finalizers(&mut new, &fins);
        if first {
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if res.generation.maintained() {
                let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                m.insert("generation".into(), json!(g + 1));
            }
            if is_ns && let Some(o) = new.as_object_mut() {
                o.insert("status".into(), json!({"phase": "Terminating"}));
            }
        }
        if is_crd {
            let name = key.1.clone();
            if let Err(e) =
                self.finish_object(res, &name, &mut new, Some(&obj), FieldValidation::Ignore)
            {
                tracing::warn!(error = %e, "failed to refresh crd status");
            }
        }
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        let out = if new == *obj {
            obj
        } else {
            self.persist(sk, key.clone(), Some(obj), new)
        };
        let fins = finalizers(&out);
        if fins.iter().any(|f| f == FG) {
            self.work.push_back(Work::Foreground(uid.clone()));
        }
        if fins.iter().any(|f| f == ORPHAN) {
            self.work.push_back(Work::Orphan(uid));
        }
        if is_ns {
            if first {
                self.ns_due
                    .insert(key.1.clone(), std::time::Instant::now() + self.ns_delay);
            }
            self.work.push_back(Work::Namespace(key.1.clone()));
        }
        if is_crd {
            self.work.push_back(Work::Crd(key.1.clone()));
        }
        Deleted {
            gone: false,
            obj: out,
        }
    }

    /// Internal delete by reference: the garbage collector's and the
    /// namespace controller's (`actor`; queued for admission when the
    /// cluster has any, see `gc`) and the CRD cleanup's (`None`: the
    /// apiextensions finalizer deletes through the storage, unadmitted).
    pub(super) fn delete_ref(
        &mut self,
        r: &ObjRef,
        propagation: Propagation,
        actor: Option<gc::Actor>,
    ) {
        let Some(obj) = self.lookup_ref(r) else {
            return;
        };
        let Some(res) = self.info_for(&r.sk) else {
            return;
        };
        let key = (r.ns.clone(), r.name.clone());
        let fins = finalizers(&obj);
        let already = is_deleting(&obj)
            && match propagation {
                Propagation::Foreground => fins.iter().any(|f| f == FG),
                Propagation::Orphan => fins.iter().any(|f| f == ORPHAN),
                Propagation::Background => true,
            };
        if already {
            return;
        }
        if let Some(actor) = actor
            && self.deletes_are_admitted()
        {
            self.queue_delete(&r.sk, &obj, propagation, actor);
            return;
        }
        self.delete_stored(&res, &r.sk, key, obj, Some(propagation));
    }

    /// Rewrites a stored object through `f` (finalizer and ownerRef edits).
    pub(super) fn edit_ref(&mut self, r: &ObjRef, f: impl FnOnce(&mut Value)) {
        let Some(old) = self.lookup_ref(r) else {
            return;
        };
        let mut new = (*old).clone();
        f(&mut new);
        if new == *old {
            return;
        }
        let key = (r.ns.clone(), r.name.clone());
        self.persist(&r.sk.clone(), key, Some(old), new);
    }

    /// The owner of `owner_uid` and its dependents, when it is being
    /// deleted and still holds `finalizer` (`foregroundDeletion` or
    /// `orphan`): the garbage collector's work for it is not done.
    fn deleting_owner_holding(
        &self,
        owner_uid: &str,
        finalizer: &str,
    ) -> Option<(ObjRef, Vec<ObjRef>)> {
        let or = self.uids.get(owner_uid).cloned()?;
        let owner = self.lookup_ref(&or)?;
        if !is_deleting(&owner) || !finalizers(&owner).iter().any(|f| f == finalizer) {
            return None;
        }
        let deps = self
            .dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        Some((or, deps))
    }

    pub(super) fn remove_finalizer(&mut self, r: &ObjRef, fin: &str) {
        self.edit_ref(r, |obj| {
            let f: Vec<String> = finalizers(obj).into_iter().filter(|x| x != fin).collect();
            set_finalizers(obj, &f);
        });
    }

    pub(super) fn strip_owner(&mut self, r: &ObjRef, owner: &str) {
        self.edit_ref(r, |obj| {
            let m = meta_mut(obj);
            if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
                refs.retain(|x| x.get("uid").and_then(Value::as_str) != Some(owner));
                if refs.is_empty() {
                    m.remove("ownerReferences");
                }
            }
        });
    }

    /// Runs the controller-like reactions until nothing is left to do.
    pub(crate) fn settle(&mut self) {
        let mut guard = 0usize;
        while let Some(w) = self.work.pop_front() {
            guard += 1;
            if guard > 1_000_000 {
                tracing::error!("failed to settle store: too many follow-up actions");
                self.work.clear();
                break;
            }
            match w {
                Work::Removed {
                    uid,
                    ns,
                    sk,
                    owners,
                } => {
                    if let Some(deps) = self.dependents.get(&uid) {
                        for d in deps.clone() {
                            self.work.push_back(Work::Dangling(d));
                        }
                    }
                    for o in owners {
                        if let Some(r) = self.uids.get(&o).cloned()
                            && let Some(owner) = self.lookup_ref(&r)
                            && finalizers(&owner).iter().any(|f| f == FG)
                        {
                            self.work.push_back(Work::Foreground(o));
                        }
                    }
                    if !ns.is_empty() && self.namespace_obj(&ns).is_some_and(|n| is_deleting(&n)) {
                        self.work.push_back(Work::Namespace(ns));
                    }
                    if let Some((group, plural)) = sk.split_once('/')
                        && !group.is_empty()
                    {
                        let crd = format!("{plural}.{group}");
                        if self
                            .lookup(&Arc::from(CRD_SK), &(String::new(), crd.clone()))
                            .is_some_and(|c| is_deleting(&c))
                        {
                            self.work.push_back(Work::Crd(crd));
                        }
                    }
                }
                Work::Dangling(r) => {
                    let Some(obj) = self.lookup_ref(&r) else {
                        continue;
                    };
                    let owners = owner_uids(&obj);
                    let missing: Vec<String> = owners
                        .iter()
                        .filter(|o| !self.uids.contains_key(*o))
                        .cloned()
                        .collect();
                    if missing.is_empty() {
                        continue;
                    }
                    if missing.len() == owners.len() {
                        if !is_deleting(&obj) {
                            self.delete_ref(&r, Propagation::Background, Some(gc::Actor::Dangling));
                        }
                    } else {
                        for m in missing {
                            self.strip_owner(&r, &m);
                        }
                    }
                }
                Work::Foreground(owner_uid) => {
                    let Some((or, deps)) = self.deleting_owner_holding(&owner_uid, FG) else {
                        continue;
                    };
                    for d in &deps {
                        let has_deps = self
                            .lookup_ref(d)
                            .and_then(|o| meta_str(&o, "uid").map(str::to_string))
                            .is_some_and(|u| self.dependents.contains_key(&u));
                        let policy = if has_deps {
                            Propagation::Foreground
                        } else {
                            Propagation::Background
                        };
                        self.delete_ref(d, policy, Some(gc::Actor::Foreground(owner_uid.clone())));
                    }
                    let blocking = self
                        .dependents
                        .get(&owner_uid)
                        .map(|s| {
                            s.iter().any(|d| {
                                self.lookup_ref(d).is_some_and(|o| {
                                    meta(&o)
                                        .and_then(|m| m.get("ownerReferences"))
                                        .and_then(Value::as_array)
                                        .is_some_and(|refs| {
                                            refs.iter().any(|x| {
                                                x.get("uid").and_then(Value::as_str)
                                                    == Some(owner_uid.as_str())
                                                    && x.get("blockOwnerDeletion")
                                                        .and_then(Value::as_bool)
                                                        == Some(true)
                                            })
                                        })
                                })
                            })
                        })
                        .unwrap_or(false);
                    if !blocking {
                        self.remove_finalizer(&or, FG);
                    }
                }
                Work::Orphan(owner_uid) => {
                    let Some((or, deps)) = self.deleting_owner_holding(&owner_uid, ORPHAN) else {
                        continue;
                    };
                    for d in &deps {
                        self.strip_owner(d, &owner_uid);
                    }
                    self.remove_finalizer(&or, ORPHAN);
                }
                Work::Namespace(ns) => self.namespace_controller(&ns),
                Work::Crd(name) => {
                    let crd_sk: StorageKey = Arc::from(CRD_SK);
                    let Some(crd) = self.lookup(&crd_sk, &(String::new(), name.clone())) else {
                        continue;
                    };
                    if !is_deleting(&crd) {
                        continue;
                    }
                    let Some(cr_sk) = self.registry.get_crd_storage_key(&name) else {
                        self.remove_finalizer(
                            &ObjRef {
                                sk: crd_sk,
                                ns: String::new(),
                                name,
                            },
                            CRD_CLEANUP,
                        );
                        continue;
                    };
                    let refs: Vec<ObjRef> = self
                        .tables
                        .get(&cr_sk)
                        .map(|t| {
                            t.objects
                                .iter()
                                .filter(|(_, o)| !is_deleting(o))
                                .map(|((ns, n), _)| ObjRef {
                                    sk: cr_sk.clone(),
                                    ns: ns.clone(),
                                    name: n.clone(),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    for r in &refs {
                        self.delete_ref(r, Propagation::Background, None);
                    }
                    let left = self.tables.get(&cr_sk).map_or(0, |t| t.objects.len());
                    if left == 0 {
                        self.remove_finalizer(
                            &ObjRef {
                                sk: crd_sk,
                                ns: String::new(),
                                name,
                            },
                            CRD_CLEANUP,
                        );
                    }
                }
            }
        }
    }

    /// One pass of the namespace controller over a terminating namespace:
    /// deletes its contents, reports progress in the status conditions,
    /// and drops the `kubernetes` finalizer (removing the namespace) once
    /// nothing is left. Waits until the namespace's start time (the delay
    /// after its DELETE), as the real controller answers asynchronously.
    pub(super) fn namespace_controller(&mut self, ns: &str) {
        let Some(nso) = self.namespace_obj(ns) else {
            self.ns_due.remove(ns);
            return;
        };
        if !is_deleting(&nso) {
            self.ns_due.remove(ns);
            return;
        }
        if self
            .ns_due
            .get(ns)
            .is_some_and(|t| *t > std::time::Instant::now())
        {
            return;
        }
        let mut to_delete = Vec::new();
        for (sk, t) in &self.tables {
            for ((ons, name), o) in t.objects.range((ns.to_string(), String::new())..) {
                if ons != ns {
                    break;
                }
                if !is_deleting(o) {
                    to_delete.push(ObjRef {
                        sk: sk.clone(),
                        ns: ns.to_string(),
                        name: name.clone(),
                    });
                }
            }
        }
        for r in &to_delete {
            self.delete_ref(
                r,
                Propagation::Background,
                Some(gc::Actor::Namespace(ns.to_string())),
            );
        }
        // What is left: objects per resource, finalizers per name.
        let mut by_resource: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
        for (sk, t) in &self.tables {
            let n = t
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(|((o, _), _)| o == ns)
                .inspect(|(_, o)| {
                    for f in finalizers(o) {
                        *by_finalizer.entry(f).or_default() += 1;
                    }
                })
                .count();
            if n > 0 {
                // GroupResource.String(): `resource.group`, `resource` for core.
                let gr = match sk.split_once('/') {
                    Some(("", plural)) => plural.to_string(),
                    Some((group, plural)) => format!("{plural}.{group}"),
                    None => sk.to_string(),
                };
                *by_resource.entry(gr).or_default() += n;
            }
        }
        let r = ObjRef {
            sk: storage_key_of("", "namespaces"),
            ns: String::new(),
            name: ns.to_string(),
        };
        let now = now_rfc3339();
        let remaining = (!by_resource.is_empty()).then(|| {
            by_resource
                .iter()
                .map(|(gr, n)| format!("{gr} has {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let fins = (!by_finalizer.is_empty()).then(|| {
            by_finalizer
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let failed = self.gc.namespace_errors(ns);
        let conditions = namespace_conditions(&failed, remaining.as_deref(), fins.as_deref());
        self.edit_ref(&r, |o| {
            let old: Vec<Value> = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let merged: Vec<Value> = conditions
                .into_iter()
                .map(|(ty, status, reason, message)| {
                    // The transition time moves only when the status does.
                    let prev = old.iter().find(|c| c["type"] == ty);
                    let time = match prev {
                        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
                        _ => json!(now),
                    };
                    json!({"type": ty, "status": status, "lastTransitionTime": time,
                           "reason": reason, "message": message})
                })
                .collect();
            if let Some(st) = o.get_mut("status").and_then(Value::as_object_mut) {
                st.insert("conditions".into(), Value::Array(merged));
            }
            if by_resource.is_empty()
                && let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("finalizers");
            }
        });
        if by_resource.is_empty()
            && let Some(n) = self.lookup_ref(&r)
            && !has_pending_finalizers(&n)
        {
            self.ns_due.remove(ns);
            self.remove(&r.sk.clone(), &(String::new(), ns.to_string()), None);
        }
    }

    /// Runs the namespace controller for namespaces whose start time has come.
    pub(crate) fn run_due_namespaces(&mut self) {
        let now = std::time::Instant::now();
        let due: Vec<String> = self
            .ns_due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for ns in due {
            self.work.push_back(Work::Namespace(ns));
        }
    }

    /// How long after its DELETE the namespace controller starts on a namespace.
    pub(crate) fn namespace_delay(&self) -> std::time::Duration {
        self.ns_delay
    }

    /// Sets the namespace controller's delay (tests, `/_sim/namespace-delay`).
    pub(crate) fn set_namespace_delay(&mut self, d: std::time::Duration) {
        self.ns_delay = d;
    }
}

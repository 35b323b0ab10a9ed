//! Updates, `/scale` writes and patches of every kind.

use super::*;

impl Inner {
    /// Completes an update of `old` to `new`: server-owned fields, status
    /// subresource scoping, finalizer rules, managedFields, generation.
    pub(super) fn prepare_update(
        &self,
        res: &ResourceInfo,
        old: &Value,
        mut new: Value,
        opts: &WriteOpts,
        record: bool,
    ) -> ApiResult<Value> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let name = meta_str(old, "name").unwrap_or_default().to_string();
        let ns_of = meta_str(old, "namespace").unwrap_or_default().to_string();
        // A `/scale` write met the mutating webhooks with its Scale.
        if !opts.is_scale() {
            webhook::mutation_point(
                self,
                &opts.point(res, "UPDATE", &ns_of, &name, Some(old)),
                Some(&mut new),
            )?;
        }
        validate_meta(res, &new)?;
        crate::resources::to_storage(res, &mut new);
        set_type(&mut new, res);
        let old_uid = meta_str(old, "uid").unwrap_or_default().to_string();
        if let Some(uid) = meta_str(&new, "uid")
            && !uid.is_empty()
            && uid != old_uid
        {
            return Err(ApiError::conflict_msg(
                res,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"
                ),
            ));
        }
        let empty = Map::new();
        let om = meta(old).unwrap_or(&empty);
        let is_status = opts.subresource.as_deref() == Some("status");
        let mut new = if is_status {
            // Only .status changes through /status.
            let mut out = old.clone();
            let new_status = new.get("status").cloned();
            let new_mf = meta(&new).and_then(|m| m.get("managedFields")).cloned();
            if let Some(o) = out.as_object_mut() {
                match new_status {
                    Some(s) => {
                        o.insert("status".into(), s);
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = new_mf {
                meta_mut(&mut out).insert("managedFields".into(), mf);
            }
            out
        } else {
            let m = meta_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "namespace",
                "name",
            ] {
                match om.get(f) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
            m.remove("selfLink");
            if res.status_subresource
                && let Some(o) = new.as_object_mut()
            {
                match old.get("status") {
                    Some(s) => {
                        o.insert("status".into(), s.clone());
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
            if res.builtin
                && res.kind == "Namespace"
                && let Some(o) = new.as_object_mut()
                && let Some(spec) = old.get("spec")
            {
                o.insert("spec".into(), spec.clone());
            }
            new
        };
        if is_deleting(old) {
            let old_f = finalizers(old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !old_f.contains(f))
                .collect();
            if !added.is_empty() {
                let list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(ApiError::invalid(
                    &res.kind,
                    &res.group,
                    &name,
                    &[(
                        "FieldValueForbidden",
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                        ),
                    )],
                ));
            }
        }
        crate::defaults::apply(res, &mut new, Some(old), &mut self.alloc.borrow_mut());
        self.finish_object(res, &name, &mut new, Some(old), opts.field_validation)?;
        if record {
            self.record_update(res, Some(old), &mut new, opts);
        }
        let bumped = match res.generation {
            Generation::None => false,
            Generation::Spec => spec_changed(old, &new, res.status_subresource),
            Generation::SpecOrAnnotations => {
                spec_changed(old, &new, res.status_subresource)
                    || old.pointer("/metadata/annotations") != new.pointer("/metadata/annotations")
            }
        };
        if bumped {
            let g = om.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        Ok(new)
    }

    /// Persists an update of `old` (stored) unless it changes nothing.
    /// `view` is `old` at the request's version (`old` itself unless a
    /// conversion webhook converts it), what admission sees; `new` is at
    /// the request's version until the storage conversion point. Returns
    /// the stored object.
    pub(super) fn commit_update(
        &mut self,
        res: &ResourceInfo,
        key: ObjKey,
        old: Arc<Value>,
        view: &Value,
        mut new: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        // Admission runs for no-op writes too, as on a real server.
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "UPDATE",
                &key,
                opts.subresource.as_deref(),
                Some(&new),
                Some(view),
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        match res.scale.as_deref().filter(|_| opts.is_scale()) {
            // A `/scale` write: the validating webhooks see the Scales.
            Some(paths) => {
                let served = if res.needs_conversion() {
                    crate::resources::to_served(res, &new)
                } else {
                    new.clone()
                };
                let mut scale = crate::scale::to_scale(paths, &served);
                let mut point = opts.point(res, "UPDATE", &key.0, &key.1, Some(view));
                point.scale = Some(paths);
                webhook::validation_point(self, &point, Some(&mut scale))?;
            }
            None => webhook::validation_point(
                self,
                &opts.point(res, "UPDATE", &key.0, &key.1, Some(view)),
                Some(&mut new),
            )?,
        }
        webhook::conversion::storage_point(self, res, Some(&old), &mut new, &opts.webhooks)?;
        let dry_run = opts.dry_run;
        // No-op detection: RV and managedFields timestamps do not count.
        if let Some(rv) = meta_str(&old, "resourceVersion") {
            meta_mut(&mut new).insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let old_mf = meta(&old).and_then(|m| m.get("managedFields"));
        let new_mf = meta(&new).and_then(|m| m.get("managedFields"));
        if old_mf != new_mf
            && same_but_times(old_mf, new_mf)
            && let Some(mf) = old_mf.cloned()
        {
            meta_mut(&mut new).insert("managedFields".into(), mf);
        }
        if new == *old {
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(new));
        }
        fits_in_etcd(&new)?;
        let sk = res.storage_key();
        Ok(self.persist(&sk, key, Some(old), new))
    }

    pub(crate) fn get(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let key = Self::obj_key(res, ns, name);
        self.lookup(&res.storage_key(), &key)
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    pub(crate) fn update(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        new: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let body_name = meta_str(&new, "name").unwrap_or_default();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if res.namespaced
            && let Some(body_ns) = meta_str(&new, "namespace")
            && !body_ns.is_empty()
            && Some(body_ns) != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let old = self.get(res, ns, name)?;
        if let Some(rv) = meta_str(&new, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(res, name));
        }
        let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
        let new = self.prepare_update(res, &view, new, opts, true)?;
        let key = Self::obj_key(res, ns, name);
        self.commit_update(res, key, old, &view, new, opts)
    }

    /// Reads and writes the `/scale` subresource: `f` turns the current
    /// Scale into the one the client wants (a PUT body, a patched Scale).
    pub(crate) fn scale(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        f: impl FnOnce(&Value) -> ApiResult<Option<Value>>,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let Some(paths) = res.scale.clone() else {
            return Err(ApiError::not_found(res, name));
        };
        let old = self.get(res, ns, name)?;
        let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
        let served = if res.needs_conversion() {
            crate::resources::to_served(res, &view)
        } else {
            (*view).clone()
        };
        let current = crate::scale::to_scale(&paths, &served);
        let Some(mut wanted) = f(&current)? else {
            return Ok(current);
        };
        // Admission webhooks see the Scales (autoscaling/v1, subResource
        // scale), as the server admits a `/scale` write.
        let (ns_of, _) = Self::obj_key(res, ns, name);
        let mut point = opts.point(res, "UPDATE", &ns_of, name, Some(&view));
        point.scale = Some(&paths);
        webhook::mutation_point(self, &point, Some(&mut wanted))?;
        if let Some(rv) = meta_str(&wanted, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(res, name));
        }
        let replicas = crate::scale::replicas(name, &wanted)?;
        let mut new = served;
        crate::scale::set_replicas(&paths, &mut new, replicas);
        let new = self.prepare_update(res, &view, new, opts, true)?;
        let key = Self::obj_key(res, ns, name);
        let stored = self.commit_update(res, key, old, &view, new, opts)?;
        let served = if res.needs_conversion() {
            crate::resources::to_served(res, &stored)
        } else {
            (*stored).clone()
        };
        Ok(crate::scale::to_scale(&paths, &served))
    }

    pub(crate) fn patch(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<(Arc<Value>, bool)> {
        let key = Self::obj_key(res, ns, name);
        let old = self.lookup(&res.storage_key(), &key);
        let map_err = |e: patch::PatchError| -> ApiError {
            match e {
                patch::PatchError::Conflict(c) => {
                    let mut d = Map::new();
                    d.insert("name".into(), json!(name));
                    if !res.group.is_empty() {
                        d.insert("group".into(), json!(res.group));
                    }
                    d.insert("kind".into(), json!(res.plural));
                    d.insert("causes".into(), Value::Array(c.causes()));
                    ApiError::conflict_raw(c.to_string(), Value::Object(d))
                }
                patch::PatchError::Unsupported(m) => ApiError::new(415, "UnsupportedMediaType", m),
                patch::PatchError::Malformed(m) => ApiError::bad_request(m),
                patch::PatchError::Invalid(m) => ApiError::unprocessable(m),
            }
        };
        let PatchKind::Apply { force } = kind else {
            let Some(old) = old else {
                return Err(ApiError::not_found(res, name));
            };
            let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
            let served = if res.needs_conversion() {
                crate::resources::to_served(res, &view)
            } else {
                (*view).clone()
            };
            let patched = match kind {
                PatchKind::Merge => {
                    if !body.is_object() {
                        return Err(ApiError::bad_request(
                            "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                        ));
                    }
                    let mut served = served;
                    patch::merge_patch_in_place(&mut served, body);
                    served
                }
                PatchKind::Json => patch::json_patch(&served, body).map_err(map_err)?,
                PatchKind::Strategic => {
                    if !res.builtin {
                        return Err(ApiError::unsupported_media(
                            "application/strategic-merge-patch+json",
                        ));
                    }
                    patch::strategic_merge_patch(&served, body, res.type_info()).map_err(map_err)?
                }
                PatchKind::Apply { .. } => unreachable!("handled above"),
            };
            // A patch carrying a resourceVersion is a precondition.
            if let Some(rv) = meta_str(&patched, "resourceVersion")
                && !rv.is_empty()
                && Some(rv) != meta_str(&old, "resourceVersion")
            {
                return Err(ApiError::conflict(res, name));
            }
            if meta_str(&patched, "name").is_some_and(|n| n != name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&patched, "name").unwrap_or_default()
                )));
            }
            let new = self.prepare_update(res, &view, patched, opts, true)?;
            return Ok((self.commit_update(res, key, old, &view, new, opts)?, false));
        };
        // Server-side apply.
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a YAML or JSON object",
            ));
        }
        if let Some(bn) = meta_str(body, "name")
            && bn != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({bn}) does not match the name on the URL ({name})"
            )));
        }
        if opts.manager.is_none() {
            return Err(ApiError::bad_request(
                "PATCH, fieldManager is required for apply requests",
            ));
        }
        self.check_typed_patch(res, ns, name, body)?;
        let manager = patch::Manager {
            name: opts.manager.clone().unwrap_or_default(),
            operation: patch::Operation::Apply,
            api_version: res.api_version(),
            subresource: opts.subresource.clone(),
            time: Utc::now(),
        };
        match old {
            // The status subresource never creates: the apiserver's status
            // REST updates with `forceAllowCreate = false` (NotFound).
            None if opts.subresource.is_some() => Err(ApiError::not_found(res, name)),
            None => {
                let mut applied =
                    patch::apply(None, body, &manager, force, res.type_info()).map_err(map_err)?;
                meta_mut(&mut applied).insert("name".into(), json!(name));
                webhook::mutation_point(
                    self,
                    &opts.point(res, "CREATE", &key.0, name, None),
                    Some(&mut applied),
                )?;
                crate::resources::to_storage(res, &mut applied);
                set_type(&mut applied, res);
                {
                    let m = meta_mut(&mut applied);
                    m.insert("name".into(), json!(name));
                }
                let key = self.prepare_create(res, ns, &mut applied, opts.field_validation)?;
                let key = self.admit_created(res, key, &mut applied, opts)?;
                if opts.dry_run {
                    return Ok((Arc::new(applied), true));
                }
                fits_in_etcd(&applied)?;
                let sk = res.storage_key();
                Ok((self.persist(&sk, key, None, applied), true))
            }
            Some(old) => {
                let view = webhook::conversion::view(self, res, &old, &opts.webhooks)?;
                let served = if res.needs_conversion() {
                    crate::resources::to_served(res, &view)
                } else {
                    (*view).clone()
                };
                let applied = if opts.subresource.as_deref() == Some("status") {
                    // Scope the apply to what /status may change.
                    let mut live = served.clone();
                    let mut body = body.clone();
                    if let Some(o) = live.as_object_mut() {
                        o.retain(|k, _| {
                            k == "apiVersion" || k == "kind" || k == "metadata" || k == "status"
                        });
                    }
                    if let Some(o) = body.as_object_mut() {
                        o.retain(|k, _| {
                            k == "apiVersion" || k == "kind" || k == "metadata" || k == "status"
                        });
                    }
                    patch::apply(Some(&live), &body, &manager, force, res.type_info())
                        .map_err(map_err)?
                } else {
                    patch::apply(Some(&served), body, &manager, force, res.type_info())
                        .map_err(map_err)?
                };
                let new = self.prepare_update(res, &view, applied, opts, false)?;
                Ok((self.commit_update(res, key, old, &view, new, opts)?, false))
            }
        }
    }
}

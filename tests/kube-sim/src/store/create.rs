//! Creates: a new object normalized, defaulted, validated and admitted.

use super::*;

impl Inner {
    /// Normalizes and validates a new object; returns its key.
    pub(super) fn prepare_create(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        obj: &mut Value,
        fv: FieldValidation,
    ) -> ApiResult<ObjKey> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        validate_meta(res, obj)?;
        if res.namespaced {
            let url_ns = ns.unwrap_or_default();
            let m = meta_mut(obj);
            match m.get("namespace").and_then(Value::as_str) {
                Some(body_ns) if !body_ns.is_empty() && !url_ns.is_empty() && body_ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                Some(body_ns) if !body_ns.is_empty() && url_ns.is_empty() => {}
                _ => {
                    m.insert("namespace".into(), Value::String(url_ns.to_string()));
                }
            }
        } else {
            meta_mut(obj).remove("namespace");
        }
        let m = meta_mut(obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", generate_suffix());
                    m.insert("name".into(), Value::String(name.clone()));
                }
                _ => {
                    return Err(ApiError::invalid(
                        &res.kind,
                        &res.group,
                        "",
                        &[(
                            "FieldValueRequired",
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            }
        }
        validate_name(res, &name)?;
        let ns_name = m
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if res.namespaced {
            match self.namespace_obj(&ns_name) {
                None => return Err(ApiError::namespace_not_found(&ns_name)),
                Some(n) if is_deleting(&n) => {
                    return Err(ApiError::forbidden(
                        res,
                        &name,
                        &format!(
                            "unable to create new content in namespace {ns_name} because it is being terminated"
                        ),
                    ));
                }
                _ => {}
            }
        }
        let key = (ns_name, name);
        if self.lookup(&res.storage_key(), &key).is_some() {
            return Err(ApiError::already_exists(res, &key.1));
        }
        // Server-owned metadata.
        let m = meta_mut(obj);
        m.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if res.generation.maintained() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if let Some(o) = obj.as_object_mut() {
            if res.drop_status_on_create {
                o.remove("status");
            }
            match res.kind.as_str() {
                // PrepareForCreate (PersistentVolumeLastPhaseTransitionTime,
                // GA in 1.31): the phase starts Pending, now.
                "PersistentVolume" if res.builtin => {
                    o.insert(
                        "status".into(),
                        json!({"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()}),
                    );
                }
                // PrepareForCreate: the `kubernetes` finalizer is required
                // on create (appended to the client's own).
                "Namespace" if res.builtin => {
                    let spec = o.entry("spec").or_insert_with(|| json!({}));
                    if !spec.is_object() {
                        *spec = json!({});
                    }
                    if let Some(f) = spec
                        .as_object_mut()
                        .map(|s| s.entry("finalizers").or_insert_with(|| json!([])))
                    {
                        if !f.is_array() {
                            *f = json!([]);
                        }
                        if let Some(a) = f.as_array_mut()
                            && !a.iter().any(|x| x == "kubernetes")
                        {
                            a.push(json!("kubernetes"));
                        }
                    }
                }
                // SetDefaults_Secret: an empty type is Opaque.
                "Secret"
                    if res.builtin
                        && o.get("type")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty) =>
                {
                    o.insert("type".into(), json!("Opaque"));
                }
                _ => {}
            }
        }
        crate::defaults::apply(res, obj, None, &mut self.alloc.borrow_mut());
        self.finish_object(res, &key.1, obj, None, fv)?;
        Ok(key)
    }

    /// Per-kind defaulting and validation shared by create and update.
    pub(super) fn finish_object(
        &self,
        res: &ResourceInfo,
        name: &str,
        obj: &mut Value,
        old: Option<&Value>,
        fv: FieldValidation,
    ) -> ApiResult<()> {
        crate::defaults::drop_empty_metadata(obj);
        if !res.builtin
            && let Some(schema) = &res.schema
        {
            crate::validate::apply_defaults(obj, schema);
        }
        self.validate_fields(res, name, obj, old, fv)?;
        if !res.builtin
            && let Some(schema) = &res.schema
        {
            prune(obj, schema);
        }
        if res.builtin
            && res.group == "admissionregistration.k8s.io"
            && res.kind.ends_with("WebhookConfiguration")
        {
            let errs = webhook::validate_configuration(obj, res.kind.starts_with("Mutating"));
            if !errs.is_empty() {
                return Err(ApiError::invalid(&res.kind, &res.group, name, &errs));
            }
        }
        if res.builtin && res.kind == "CustomResourceDefinition" {
            let infos = crate::resources::crd_resources(obj).map_err(|msg| {
                let (field, m) = msg.split_once(": ").unwrap_or(("spec", msg.as_str()));
                ApiError::invalid(
                    &res.kind,
                    &res.group,
                    name,
                    &[("FieldValueInvalid", field.to_string(), m.to_string())],
                )
            })?;
            let info = &infos[0];
            if let Some(spec_names) = obj
                .pointer_mut("/spec/names")
                .and_then(Value::as_object_mut)
            {
                spec_names
                    .entry("singular")
                    .or_insert_with(|| json!(info.singular));
                spec_names
                    .entry("listKind")
                    .or_insert_with(|| json!(info.list_kind));
            }
            let accepted = obj.pointer("/spec/names").cloned().unwrap_or(Value::Null);
            let mut stored: Vec<String> = old
                .and_then(|o| o.pointer("/status/storedVersions"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !stored.contains(&info.storage_version) {
                stored.push(info.storage_version.clone());
            }
            let old_conditions = old.and_then(|o| o.pointer("/status/conditions")).cloned();
            let now = now_rfc3339();
            let cond_time = |t: &str| -> String {
                old_conditions
                    .as_ref()
                    .and_then(Value::as_array)
                    .and_then(|a| {
                        a.iter()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
                    })
                    .and_then(|c| c.get("lastTransitionTime"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| now.clone())
            };
            let mut conditions = vec![
                json!({"type": "NamesAccepted", "status": "True", "lastTransitionTime": cond_time("NamesAccepted"),
                       "reason": "NoConflicts", "message": "no conflicts found"}),
                json!({"type": "Established", "status": "True", "lastTransitionTime": cond_time("Established"),
                       "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}),
            ];
            if is_deleting(obj) {
                conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": cond_time("Terminating"),
                    "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
            }
            if let Some(o) = obj.as_object_mut() {
                o.insert(
                    "status".into(),
                    json!({"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}),
                );
            }
        }
        Ok(())
    }

    /// Server-side apply converts the patch to its typed form first: a field
    /// the schema does not declare fails the request whatever
    /// `fieldValidation` says, with structured-merge-diff's message (the
    /// apiserver answers 500 with no reason for it, as of 1.32).
    pub(super) fn check_typed_patch(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        body: &Value,
    ) -> ApiResult<()> {
        // The schema is the stored version's; a converted body is checked
        // after conversion, by `validate_fields`.
        if res.needs_conversion() {
            return Ok(());
        }
        let Some((schema, defs)) = crate::openapi::schema_of(res) else {
            return Ok(());
        };
        let mut copy = body.clone();
        let mut f = crate::validate::Findings::default();
        crate::validate::walk(&mut copy, schema, defs, "", true, false, &mut f);
        if f.unknown.is_empty() {
            return Ok(());
        }
        let errs: Vec<String> = f
            .unknown
            .iter()
            .map(|p| {
                let path = res
                    .type_info()
                    .smd_path(body, &crate::validate::segments(p));
                format!("{path}: field not declared in schema")
            })
            .collect();
        let errs = if errs.len() == 1 {
            errs[0].clone()
        } else {
            format!("errors:\n  {}", errs.join("\n  "))
        };
        Err(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({}/{name}; {}/{}, Kind={}): {errs}",
                if res.namespaced {
                    ns.unwrap_or_default()
                } else {
                    ""
                },
                res.group,
                res.version,
                res.kind
            ),
        ))
    }

    /// Unknown fields per `fieldValidation`; a custom resource's value
    /// constraints and `x-kubernetes-validations` rules (422, one error
    /// list as the server's strategy builds it).
    pub(super) fn validate_fields(
        &self,
        res: &ResourceInfo,
        name: &str,
        obj: &mut Value,
        old: Option<&Value>,
        fv: FieldValidation,
    ) -> ApiResult<()> {
        let Some((schema, defs)) = crate::openapi::schema_of(res) else {
            return Ok(());
        };
        let mut f = crate::validate::Findings::default();
        crate::validate::walk(obj, schema, defs, "", true, !res.builtin, &mut f);
        if !res.builtin {
            // A custom resource's metadata is a typed ObjectMeta all the same.
            let b = crate::openapi::builtins();
            if let Some(meta_schema) = b
                .defs
                .get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
                && let Some(m) = obj.get_mut("metadata")
            {
                crate::validate::walk(
                    m,
                    meta_schema,
                    Some(&b.defs),
                    "metadata",
                    false,
                    false,
                    &mut f,
                );
            }
        }
        if !f.unknown.is_empty() {
            match fv {
                FieldValidation::Strict => {
                    return Err(ApiError::bad_request(crate::validate::strict_message(
                        &res.kind,
                        &res.version,
                        &f.unknown,
                    )));
                }
                FieldValidation::Warn => {
                    let mut w = self.warnings.borrow_mut();
                    for u in &f.unknown {
                        w.push(format!("unknown field \"{u}\""));
                    }
                }
                FieldValidation::Ignore => {}
            }
        }
        let mut invalid = f.invalid;
        if let Some(rules) = res.crd_rules() {
            match crate::admission::crd_rules::blocking(&invalid) {
                Some(e) => invalid.push(e),
                None => {
                    let (errors, warnings) = rules.validate(obj, old);
                    invalid.extend(errors);
                    self.warnings.borrow_mut().extend(warnings);
                }
            }
        }
        if !invalid.is_empty() {
            return Err(ApiError::invalid(&res.kind, &res.group, name, &invalid));
        }
        Ok(())
    }

    pub(crate) fn create(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        let ns_of = if res.namespaced {
            ns.unwrap_or_default()
        } else {
            ""
        };
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        webhook::mutation_point(
            self,
            &opts.point(res, "CREATE", ns_of, &name, None),
            Some(&mut obj),
        )?;
        crate::resources::to_storage(res, &mut obj);
        set_type(&mut obj, res);
        let key = self.prepare_create(res, ns, &mut obj, opts.field_validation)?;
        self.record_update(res, None, &mut obj, opts);
        let key = self.admit_created(res, key, &mut obj, opts)?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        fits_in_etcd(&obj)?;
        let sk = res.storage_key();
        Ok(self.persist(&sk, key, None, obj))
    }

    /// Validating admission of a create: the policies, then the
    /// validating webhooks' point (which may put in the object they
    /// admitted, whose generated name then keys it).
    pub(super) fn admit_created(
        &self,
        res: &ResourceInfo,
        key: ObjKey,
        obj: &mut Value,
        opts: &WriteOpts,
    ) -> ApiResult<ObjKey> {
        if !opts.webhooks.validated() {
            self.admit(
                res,
                "CREATE",
                &key,
                opts.subresource.as_deref(),
                Some(obj),
                None,
                opts.dry_run,
                opts.user.as_ref(),
            )?;
        }
        webhook::validation_point(
            self,
            &opts.point(res, "CREATE", &key.0, &key.1, None),
            Some(obj),
        )?;
        webhook::conversion::storage_point(self, res, None, obj, &opts.webhooks)?;
        let name = meta_str(obj, "name").unwrap_or_default().to_string();
        if name != key.1
            && self
                .lookup(&res.storage_key(), &(key.0.clone(), name.clone()))
                .is_some()
        {
            return Err(ApiError::already_exists(res, &name));
        }
        Ok((key.0, name))
    }
}

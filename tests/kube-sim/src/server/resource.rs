//! The Kubernetes API of one resource: get, list, watch, create, update,
//! patch, delete (one or a collection) and the `/status` and `/scale`
//! subresources.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) async fn resource(
    cs: &Arc<ClusterState>,
    req: Request,
    params: Params,
    res: Arc<ResourceInfo>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
) -> ApiResult<Response> {
    let method = req.method().clone();
    let user = req.extensions().get::<crate::auth::UserInfo>().cloned();
    let shape = negotiate(req.headers(), &params)?;
    // Tables are for reads; writes answer the object.
    let shape = if matches!(shape, Shape::Table { .. }) && req.method() != Method::GET {
        Shape::Full
    } else {
        shape
    };
    let nsr = ns.as_deref();
    if sub.as_deref() == Some("scale")
        && let Some(name) = &name
    {
        return scale(cs, req, &params, &res, nsr, name, &sub).await;
    }
    match (method, name) {
        (Method::GET, name) if params.bool("watch")? => {
            let field = match &name {
                Some(n) => FieldSelector::name(n),
                None => FieldSelector::parse(
                    params.get("fieldSelector").unwrap_or_default(),
                    &res.kind,
                )?,
            };
            let label = LabelSelector::parse(params.get("labelSelector").unwrap_or_default())?;
            let send_initial = match params.get("sendInitialEvents") {
                None | Some("") => None,
                Some(_) => Some(params.bool("sendInitialEvents")?),
            };
            let rv_match = params.non_empty("resourceVersionMatch");
            let rv = params.non_empty("resourceVersion");
            if send_initial == Some(true) && rv_match != Some("NotOlderThan") {
                return Err(list_validation(
                    "resourceVersionMatch",
                    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if send_initial.is_none() && rv_match.is_some() {
                return Err(list_validation(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            let from = match (send_initial, rv) {
                (Some(true), _) => None,
                (_, None | Some("0")) => None,
                (_, Some(v)) => Some(parse_rv(v)?),
            };
            let timeout =
                match params.non_empty("timeoutSeconds") {
                    Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
                    })?),
                    None => Duration::ZERO,
                };
            // Absent or 0: the apiserver's default of 30-60 minutes.
            let timeout = if timeout.is_zero() {
                Duration::from_secs(rand::rng().random_range(1800..3600))
            } else {
                timeout
            };
            let start = cs.store.read(|i| {
                // At a converted version the watch selects on the
                // converted labels itself (`watch::Select`).
                let everything = LabelSelector::default();
                let stored_label = if res.webhook_converted() {
                    &everything
                } else {
                    &label
                };
                i.watch_start(&res, nsr, stored_label, &field, from)
            });
            let body = match start {
                Ok(start) => crate::watch::body(
                    cs.clone(),
                    WatchSpec {
                        res,
                        ns,
                        label,
                        field,
                        bookmarks: params.bool("allowWatchBookmarks")?,
                        initial_end: send_initial == Some(true),
                        timeout,
                        shape,
                        from,
                    },
                    start,
                ),
                // Watch errors travel inside a 200 stream.
                Err(e) => crate::watch::error_body(&e),
            };
            let mut r = Response::new(body);
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            );
            Ok(r)
        }
        (Method::GET, Some(name)) => {
            let obj = cs.store.read(|i| i.get(&res, nsr, &name))?;
            let obj = conversion::served_one(cs, &res, obj).await?;
            Ok(object_response(200, &res, shape, &obj))
        }
        (Method::GET, None) => {
            let label = LabelSelector::parse(params.get("labelSelector").unwrap_or_default())?;
            let field =
                FieldSelector::parse(params.get("fieldSelector").unwrap_or_default(), &res.kind)?;
            let rv = params.non_empty("resourceVersion");
            let rv_match = params.non_empty("resourceVersionMatch");
            let cont = params.non_empty("continue").map(str::to_string);
            if params.get("sendInitialEvents").is_some() {
                return Err(list_validation(
                    "sendInitialEvents",
                    "Forbidden: sendInitialEvents is forbidden for list",
                ));
            }
            if rv_match.is_some() && rv.is_none() {
                return Err(list_validation(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if rv_match.is_some() && cont.is_some() {
                return Err(list_validation(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            let limit = match params.non_empty("limit") {
                Some(l) => Some(
                    l.parse::<i64>()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
                ),
                None => None,
            };
            let exact_rv = match (rv_match, rv) {
                (Some("Exact"), Some("0")) => {
                    return Err(list_validation(
                        "resourceVersionMatch",
                        "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                (Some("Exact"), Some(v)) => Some(parse_rv(v)?),
                (Some("NotOlderThan"), Some(v)) => {
                    parse_rv(v)?;
                    None
                }
                (Some(other), _) => {
                    let mut e = ApiError::invalid(
                        "ListOptions",
                        "meta.k8s.io",
                        "",
                        &[(
                            "FieldValueNotSupported",
                            "resourceVersionMatch".into(),
                            format!(
                                "Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                            ),
                        )],
                    );
                    e.message = format!(
                        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"{other}\""
                    );
                    return Err(e);
                }
                (None, Some(v)) if v != "0" && limit.is_some_and(|l| l > 0) && cont.is_none() => {
                    Some(parse_rv(v)?)
                }
                (None, Some(v)) => {
                    parse_rv(v)?;
                    None
                }
                (None, None) => None,
            };
            let opts = ListOpts {
                limit: limit.filter(|l| *l > 0).map(|l| l as usize),
                cont,
                exact_rv,
            };
            // At a version a webhook converts to, labels are the converted
            // object's (the webhook may change them): the server filters
            // the objects it decoded at the request's version. A page may
            // then hold fewer than `limit` items, which the API allows.
            let after = res.webhook_converted() && !label.is_empty();
            let stored_label = if after {
                LabelSelector::default()
            } else {
                label.clone()
            };
            let lr = cs
                .store
                .read(|i| i.list(&res, nsr, &stored_label, &field, &opts))?;
            let mut items = conversion::served(cs, &res, lr.items).await?;
            if after {
                items.retain(|o| label.matches(o));
            }
            Ok(list_response(&res, shape, &items, lr.rv, lr.cont))
        }
        (Method::POST, None) => {
            if sub.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            let (headers, _, body) = read_body(req).await?;
            let ct = content_type(&headers);
            let obj = parse_body(&ct, &body)?;
            check_type(&res, &obj)?;
            let mut opts = write_opts(&params, &headers, &sub)?;
            opts.user = user.clone();
            let ((created, cached), warnings) = webhook::drive(cs, |i, pass| {
                let opts = WriteOpts {
                    webhooks: pass,
                    ..opts.clone()
                };
                let o = i.create(&res, nsr, obj.clone(), &opts)?;
                let b = i.cached_bytes(&o);
                Ok((o, b))
            })
            .await?;
            let created = conversion::served_one(cs, &res, created).await?;
            Ok(with_warnings(
                written_response(201, &res, shape, &created, cached),
                &warnings,
            ))
        }
        (Method::PUT, Some(name)) => {
            let (headers, _, body) = read_body(req).await?;
            let ct = content_type(&headers);
            let obj = parse_body(&ct, &body)?;
            check_type(&res, &obj)?;
            let mut opts = write_opts(&params, &headers, &sub)?;
            opts.user = user.clone();
            let ((updated, cached), warnings) = webhook::drive(cs, |i, pass| {
                let opts = WriteOpts {
                    webhooks: pass,
                    ..opts.clone()
                };
                let o = i.update(&res, nsr, &name, obj.clone(), &opts)?;
                let b = i.cached_bytes(&o);
                Ok((o, b))
            })
            .await?;
            let updated = conversion::served_one(cs, &res, updated).await?;
            Ok(with_warnings(
                written_response(200, &res, shape, &updated, cached),
                &warnings,
            ))
        }
        (Method::PATCH, Some(name)) => {
            let (headers, _, body) = read_body(req).await?;
            let ct = content_type(&headers);
            let kind = match ct.as_str() {
                "application/merge-patch+json" => PatchKind::Merge,
                "application/json-patch+json" => PatchKind::Json,
                "application/strategic-merge-patch+json" => {
                    if !res.builtin {
                        return Err(ApiError::unsupported_media(&ct));
                    }
                    PatchKind::Strategic
                }
                "application/apply-patch+yaml"
                | "application/apply-patch+json"
                | "application/apply-patch+cbor" => {
                    if ct.ends_with("cbor") {
                        return Err(ApiError::unsupported_media(&ct));
                    }
                    PatchKind::Apply {
                        force: params.bool("force")?,
                    }
                }
                _ => return Err(ApiError::unsupported_media(&ct)),
            };
            let patch_body = match kind {
                PatchKind::Apply { .. } => serde_yaml::from_slice::<Value>(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
                _ => serde_json::from_slice::<Value>(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
            };
            if matches!(kind, PatchKind::Apply { .. }) {
                check_type(&res, &patch_body)?;
            } else if params.get("force").is_some() {
                return Err(ApiError::bad_request(
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            let mut opts = write_opts(&params, &headers, &sub)?;
            opts.user = user.clone();
            let ((obj, created, cached), warnings) = webhook::drive(cs, |i, pass| {
                let opts = WriteOpts {
                    webhooks: pass,
                    ..opts.clone()
                };
                let (o, created) = i.patch(&res, nsr, &name, kind, &patch_body, &opts)?;
                let b = i.cached_bytes(&o);
                Ok((o, created, b))
            })
            .await?;
            let obj = conversion::served_one(cs, &res, obj).await?;
            Ok(with_warnings(
                written_response(if created { 201 } else { 200 }, &res, shape, &obj, cached),
                &warnings,
            ))
        }
        (Method::DELETE, name) => {
            if sub.is_some() {
                return Err(ApiError::method_not_allowed());
            }
            let (headers, _, body) = read_body(req).await?;
            let mut dopts = delete_opts(&params, &headers, &body)?;
            dopts.user = user.clone();
            match name {
                Some(name) => {
                    let (d, warnings) = webhook::drive(cs, |i, pass| {
                        let dopts = DeleteOpts {
                            webhooks: pass,
                            ..dopts.clone()
                        };
                        i.delete(&res, nsr, &name, &dopts)
                    })
                    .await?;
                    if res.builtin && res.kind == "Namespace" && !d.gone && !dopts.dry_run {
                        spawn_namespace_controller(cs);
                    }
                    if d.gone && !res.delete_returns_object {
                        let uid = d
                            .obj
                            .pointer("/metadata/uid")
                            .cloned()
                            .unwrap_or(Value::Null);
                        let mut details = serde_json::Map::new();
                        details.insert("name".into(), json!(name));
                        if !res.group.is_empty() {
                            details.insert("group".into(), json!(res.group));
                        }
                        details.insert("kind".into(), json!(res.plural));
                        details.insert("uid".into(), uid);
                        Ok(with_warnings(
                            json_response(
                                200,
                                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                            ),
                            &warnings,
                        ))
                    } else {
                        let obj = conversion::served_one(cs, &res, d.obj).await?;
                        Ok(with_warnings(
                            object_response(200, &res, shape, &obj),
                            &warnings,
                        ))
                    }
                }
                None => {
                    let label =
                        LabelSelector::parse(params.get("labelSelector").unwrap_or_default())?;
                    let field = FieldSelector::parse(
                        params.get("fieldSelector").unwrap_or_default(),
                        &res.kind,
                    )?;
                    // With webhooks registered each item is one DELETE they
                    // see (as the server admits each), outside the lock; so
                    // too when the selector must see converted labels.
                    if cs.store.read(|i| webhook::configured(i))
                        || (res.webhook_converted() && !label.is_empty())
                    {
                        let (items, rv, warnings) =
                            webhook::delete_each(cs, &res, nsr, &label, &field, &dopts).await?;
                        let items = conversion::served(cs, &res, items).await?;
                        return Ok(with_warnings(
                            list_response(&res, shape, &items, rv, None),
                            &warnings,
                        ));
                    }
                    let (items, rv) = cs.store.write(|i| -> ApiResult<_> {
                        let lr = i.list(&res, nsr, &label, &field, &ListOpts::default())?;
                        let mut out = Vec::new();
                        for obj in lr.items {
                            let n = obj
                                .pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string();
                            let ons = obj
                                .pointer("/metadata/namespace")
                                .and_then(Value::as_str)
                                .map(str::to_string);
                            match i.delete(&res, ons.as_deref(), &n, &dopts) {
                                Ok(d) => out.push(d.obj),
                                Err(e) if e.code == 404 => {}
                                Err(e) => return Err(e),
                            }
                        }
                        Ok((out, i.rv))
                    })?;
                    let items = conversion::served(cs, &res, items).await?;
                    Ok(list_response(&res, shape, &items, rv, None))
                }
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Turns the current Scale into the one a PUT or PATCH asks for (once per
/// admission pass).
pub(super) type ScaleEdit = dyn Fn(&Value) -> ApiResult<Option<Value>> + Send + Sync;

/// `GET`, `PUT` and `PATCH` of `/scale` (autoscaling/v1 Scale).
pub(super) async fn scale(
    cs: &Arc<ClusterState>,
    req: Request,
    params: &Params,
    res: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: &Option<String>,
) -> ApiResult<Response> {
    let method = req.method().clone();
    let user = req.extensions().get::<crate::auth::UserInfo>().cloned();
    if method == Method::GET {
        // Driven like a write: the live object may need a conversion webhook.
        let (scale, _) = webhook::drive(cs, |i, pass| {
            let opts = WriteOpts {
                webhooks: pass,
                ..WriteOpts::default()
            };
            i.scale(res, ns, name, |_| Ok(None), &opts)
        })
        .await?;
        return Ok(json_response(200, &scale));
    }
    let (headers, _, body) = read_body(req).await?;
    let ct = content_type(&headers);
    let mut opts = write_opts(params, &headers, sub)?;
    opts.user = user;
    let edit: Box<ScaleEdit> = match method {
        Method::PUT => {
            let body = parse_body(&ct, &body)?;
            if let Some(k) = body.get("kind").and_then(Value::as_str)
                && k != "Scale"
            {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind (Scale)"
                )));
            }
            Box::new(move |_| Ok(Some(body.clone())))
        }
        Method::PATCH => {
            let patch: Value = match ct.as_str() {
                "application/apply-patch+yaml" => serde_yaml::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
                _ => serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
            };
            match ct.as_str() {
                // A Scale has no lists: strategic merge and apply act as merge.
                "application/merge-patch+json"
                | "application/strategic-merge-patch+json"
                | "application/apply-patch+yaml" => Box::new(move |cur: &Value| {
                    let mut s = cur.clone();
                    crate::patch::merge_patch_in_place(&mut s, &patch);
                    Ok(Some(s))
                }),
                "application/json-patch+json" => Box::new(move |cur: &Value| {
                    crate::patch::json_patch(cur, &patch)
                        .map(Some)
                        .map_err(|e| ApiError::unprocessable(e.to_string()))
                }),
                _ => return Err(ApiError::unsupported_media(&ct)),
            }
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let (scale, warnings) = webhook::drive(cs, |i, pass| {
        let opts = WriteOpts {
            webhooks: pass,
            ..opts.clone()
        };
        i.scale(res, ns, name, |cur| edit(cur), &opts)
    })
    .await?;
    Ok(with_warnings(json_response(200, &scale), &warnings))
}

/// Runs the namespace controller once the delay after a namespace's
/// DELETE has passed (the DELETE answers with the namespace Terminating).
pub(super) fn spawn_namespace_controller(cs: &Arc<ClusterState>) {
    let cs = cs.clone();
    let delay = cs.store.read(|i| i.namespace_delay());
    tokio::spawn(async move {
        let mut shutdown = cs.shutdown.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(delay + Duration::from_millis(1)) => {
                cs.store.write(|i| i.run_due_namespaces());
            }
            _ = shutdown.wait_for(|s| *s) => {}
        }
    });
}

/// Rejects a body whose apiVersion/kind names another type.
pub(super) fn check_type(res: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != res.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            res.api_version()
        )));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != res.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            res.kind
        )));
    }
    Ok(())
}

pub(super) fn delete_opts(
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    let parsed = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        parse_body(&content_type(headers), body)?
    };
    let policy = |s: &str| -> ApiResult<Propagation> {
        match s {
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            "Orphan" => Ok(Propagation::Orphan),
            other => Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                &[(
                    "FieldValueNotSupported",
                    "propagationPolicy".into(),
                    format!(
                        "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                    ),
                )],
            )),
        }
    };
    if let Some(p) = parsed.get("propagationPolicy").and_then(Value::as_str) {
        o.propagation = Some(policy(p)?);
    } else if parsed.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
        o.propagation = Some(Propagation::Orphan);
    }
    if let Some(p) = params.non_empty("propagationPolicy") {
        o.propagation = Some(policy(p)?);
    } else if params.bool("orphanDependents")? && o.propagation.is_none() {
        o.propagation = Some(Propagation::Orphan);
    }
    o.uid = parsed
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    o.resource_version = parsed
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let body_dry = parsed
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    o.dry_run = params.dry_run()? || body_dry;
    if let Some(g) = params.non_empty("gracePeriodSeconds") {
        g.parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?;
    }
    Ok(o)
}

//! The `/_sim` test hooks (faults, latency, stalls, resets, counters):
//! outside the Kubernetes API, never affected by faults or authentication.

use super::*;

/// The `/_sim` test API (see the crate docs for the paths).
pub(super) async fn sim_api(cs: &Arc<ClusterState>, req: Request) -> ApiResult<Response> {
    let method = req.method().clone();
    let path = req
        .uri()
        .path()
        .trim_start_matches("/_sim")
        .trim_matches('/')
        .to_string();
    let params = Params::parse(req.uri())?;
    let (headers, _, body) = read_body(req).await?;
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        parse_body(&content_type(&headers), &body)?
    };
    let arg = |k: &str| -> Option<String> {
        params
            .non_empty(k)
            .map(str::to_string)
            .or_else(|| match body.get(k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(v @ Value::Number(_)) => Some(v.to_string()),
                _ => None,
            })
    };
    let num = |k: &str| -> ApiResult<Option<u64>> {
        arg(k)
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("{k} must be a number")))
            })
            .transpose()
    };
    let ok = |v: Value| Ok(json_response(200, &v));
    match (method, path.as_str()) {
        (Method::GET, "rv") => ok(json!({"resourceVersion": cs.store.current_rv().to_string()})),
        (Method::POST, "compact") => {
            let rv = cs.store.read(|i| i.compact());
            ok(json!({"compactedResourceVersion": rv.to_string()}))
        }
        (Method::POST, "close-watches") => {
            cs.close_watches();
            ok(json!({"closed": true}))
        }
        (Method::POST, "fail") => {
            let status = num("status")?.unwrap_or(500);
            let status = u16::try_from(status)
                .ok()
                .filter(|s| (400..600).contains(s))
                .ok_or_else(|| ApiError::bad_request("status must be 400..599"))?;
            let count = num("count")?.unwrap_or(1);
            let rule = FaultRule {
                verb: arg("verb"),
                path_contains: arg("path"),
                count: u32::try_from(count).unwrap_or(u32::MAX),
                status,
                retry_after: num("retryAfter")?,
                message: arg("message"),
                user_agent_contains: arg("userAgent"),
            };
            cs.faults.fail_next(rule);
            ok(json!({"ok": true}))
        }
        (Method::POST, "clear-faults") => {
            cs.faults.clear();
            ok(json!({"ok": true}))
        }
        (Method::POST, "latency") => {
            cs.faults
                .set_latency(Duration::from_millis(num("ms")?.unwrap_or(0)));
            ok(json!({"ok": true}))
        }
        (Method::POST, "stall") => {
            cs.faults.stall();
            ok(json!({"stalled": true}))
        }
        (Method::POST, "resume") => {
            cs.faults.resume();
            ok(json!({"stalled": false}))
        }
        (Method::POST, "namespace-delay") => {
            let ms = num("ms")?.ok_or_else(|| ApiError::bad_request("ms is required"))?;
            cs.store
                .write(|i| i.set_namespace_delay(Duration::from_millis(ms)));
            ok(json!({"ok": true}))
        }
        (Method::POST, "bookmark-interval") => {
            let ms = num("ms")?.ok_or_else(|| ApiError::bad_request("ms is required"))?;
            cs.set_bookmark_interval(Duration::from_millis(ms));
            ok(json!({"ok": true}))
        }
        (Method::POST, "webhook-service") => {
            let service =
                arg("service").ok_or_else(|| ApiError::bad_request("service is required"))?;
            let address =
                arg("address").ok_or_else(|| ApiError::bad_request("address is required"))?;
            cs.webhook_services.map(&service, &address);
            ok(json!({"ok": true}))
        }
        (Method::GET, "requests") => ok(json!(cs.faults.request_counts())),
        (Method::GET, "admission-audit") => {
            let records: Vec<crate::admission::AuditRecord> = cs
                .store
                .read(|i| i.admission_audit.borrow().iter().cloned().collect());
            ok(json!({"items": records}))
        }
        (Method::GET, "request-log") => ok(json!({"items": cs.faults.request_log()})),
        (Method::DELETE, "requests") => {
            cs.faults.reset_counts();
            ok(json!({"ok": true}))
        }
        (Method::POST, "reset") => {
            cs.store.reset();
            cs.faults.clear();
            cs.faults.resume();
            cs.faults.reset_counts();
            cs.close_watches();
            ok(json!({"resourceVersion": cs.store.current_rv().to_string()}))
        }
        (Method::GET, "") => ok(json!({
            "cluster": cs.name,
            "resourceVersion": cs.store.current_rv().to_string(),
            "objects": cs.store.read(|i| i.object_count()),
            "stalled": cs.faults.is_stalled(),
        })),
        _ => Err(ApiError::unknown_path()),
    }
}

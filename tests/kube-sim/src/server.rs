//! The HTTP front: routing, parameters, content negotiation, the
//! Kubernetes verbs, discovery, and the `/_sim` test API.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::FutureExt;
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::admission::webhook;
use crate::admission::webhook::conversion;
use crate::error::{ApiError, ApiResult};
use crate::faults::{FaultRule, Faults};
use crate::protobuf::ProtoError;
use crate::rbac::Attributes;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, ListOpts, PatchKind, Propagation, Store, WriteOpts};
use crate::watch::{Include, Shape, WatchSpec, render};

/// Largest request body accepted: the API server's `MaxRequestBodyBytes`
/// (3 MiB); beyond, 413 `Request entity too large: limit is 3145728`.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// How much of a body over [`MAX_BODY`] is read and dropped before the
/// 413 goes out, so a client still writing it reads the answer rather than
/// a reset connection.
const DRAIN_BODY: usize = 64 * 1024 * 1024;

/// The body of `body`, or the API server's 413 when it exceeds
/// [`MAX_BODY`] (any other read failure is a 400). Read frame by frame
/// rather than with `to_bytes`'s limit, which stops reading at the limit.
async fn limited_bytes(body: Body) -> ApiResult<bytes::Bytes> {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let mut bytes = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= MAX_BODY {
            bytes.extend_from_slice(&data);
        } else if seen > DRAIN_BODY {
            break;
        }
    }
    if seen > MAX_BODY {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {MAX_BODY}"),
        ));
    }
    Ok(bytes.freeze())
}

/// Shared state of one simulated cluster.
pub struct ClusterState {
    /// Cluster name.
    pub name: String,
    /// The object store.
    pub store: Store,
    /// Fault injection.
    pub faults: Faults,
    /// Bumped to close every open watch.
    pub(crate) watch_epoch: watch::Sender<u64>,
    /// Set to true on shutdown.
    pub(crate) shutdown: watch::Sender<bool>,
    bookmark_interval: Mutex<Duration>,
    /// `host:port` for `/api` serverAddressByClientCIDRs.
    pub(crate) address: Mutex<String>,
    /// TLS, authentication and authorization (contract section 14).
    pub(crate) security: crate::auth::Security,
    /// Where admission webhook Services are (`KUBE_SIM_WEBHOOK_SERVICES`).
    pub(crate) webhook_services: crate::admission::webhook::Services,
}

impl ClusterState {
    pub(crate) fn new(name: &str, history: usize, channel: usize, bookmark: Duration) -> Self {
        Self {
            name: name.to_string(),
            store: Store::new(history, channel),
            faults: Faults::default(),
            watch_epoch: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            bookmark_interval: Mutex::new(bookmark),
            address: Mutex::new(String::new()),
            security: crate::auth::Security::default(),
            webhook_services: crate::admission::webhook::Services::from_env(),
        }
    }

    /// Interval of periodic watch bookmarks for new watches.
    pub fn bookmark_interval(&self) -> Duration {
        *self.bookmark_interval.lock()
    }

    /// Sets the bookmark interval of watches opened from now on.
    pub fn set_bookmark_interval(&self, d: Duration) {
        *self.bookmark_interval.lock() = d.max(Duration::from_millis(10));
    }

    /// Ends every open watch (clients see the stream close).
    pub fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }
}

fn json_response(code: u16, v: &Value) -> Response {
    bytes_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// A JSON body ends with `\n`, as Go's encoder writes it.
fn bytes_response(code: u16, mut body: Vec<u8>) -> Response {
    if body.last() != Some(&b'\n') {
        body.push(b'\n');
    }
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(crate) fn error_response(e: &ApiError) -> Response {
    let mut r = with_warnings(json_response(e.code, &e.to_status()), &e.warnings);
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Query parameters (last value wins).
struct Params(HashMap<String, String>);

impl Params {
    fn parse(uri: &axum::http::Uri) -> ApiResult<Self> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
        Ok(Self(pairs.into_iter().collect()))
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    fn non_empty(&self, k: &str) -> Option<&str> {
        self.get(k).filter(|s| !s.is_empty())
    }

    /// Go `strconv.ParseBool`.
    fn bool(&self, k: &str) -> ApiResult<bool> {
        match self.get(k) {
            None | Some("") => Ok(false),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(v) => Err(ApiError::bad_request(format!(
                "strconv.ParseBool: parsing \"{v}\": invalid syntax (parameter {k})"
            ))),
        }
    }

    fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(ApiError::bad_request(format!(
                "Invalid dry run value: \"{v}\"; supported values are \"All\""
            ))),
        }
    }
}

enum Route {
    Version,
    Api,
    Apis,
    Group(String),
    ResourceList(String, String),
    OpenApiV2,
    OpenApiV3Index,
    OpenApiV3(String, String),
    Health,
    Resource {
        res: Arc<ResourceInfo>,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
    NotFound,
}

fn route(cs: &ClusterState, path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["openapi", "v2"] => return Route::OpenApiV2,
        ["openapi", "v3"] => return Route::OpenApiV3Index,
        ["openapi", "v3", "api", v] => return Route::OpenApiV3(String::new(), (*v).to_string()),
        ["openapi", "v3", "apis", g, v] => {
            return Route::OpenApiV3((*g).to_string(), (*v).to_string());
        }
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => return Route::Group((*g).to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let lookup = |plural: &str| cs.store.read(|i| i.registry.get(group, version, plural));
    if rest.is_empty() {
        return Route::ResourceList(group.to_string(), version.to_string());
    }
    let resource =
        |ns: Option<&str>, plural: &str, name: Option<&&str>, sub: Option<&&str>| -> Route {
            let Some(res) = lookup(plural) else {
                return Route::NotFound;
            };
            if ns.is_some() != res.namespaced && !(ns.is_none() && name.is_none()) {
                return Route::NotFound;
            }
            if let Some(s) = sub
                && !(*s == "status" && res.status_subresource)
                && !(*s == "scale" && res.scale.is_some())
            {
                return Route::NotFound;
            }
            Route::Resource {
                res,
                ns: ns.map(str::to_string),
                name: name.map(|s| (*s).to_string()),
                sub: sub.map(|s| (*s).to_string()),
            }
        };
    match rest {
        ["namespaces", ns, plural, tail @ ..]
            if tail.len() <= 2 && lookup(plural).is_some_and(|r| r.namespaced) =>
        {
            resource(Some(ns), plural, tail.first(), tail.get(1))
        }
        [plural, tail @ ..] if tail.len() <= 2 => resource(None, plural, tail.first(), tail.get(1)),
        _ => Route::NotFound,
    }
}

/// Chooses the response shape from `Accept`.
fn negotiate(headers: &HeaderMap, params: &Params) -> ApiResult<Shape> {
    let include = match params.get("includeObject") {
        None | Some("" | "Metadata") => Include::Metadata,
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: \"{v}\": supported values: \"Metadata\", \"None\", \"Object\""
            )));
        }
    };
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Shape::Full);
    };
    if accept.trim().is_empty() {
        return Ok(Shape::Full);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        if !matches!(
            mime.as_str(),
            "application/json" | "*/*" | "application/*" | "application/yaml" | "*"
        ) {
            continue;
        }
        match params.get("as").map(String::as_str) {
            None => return Ok(Shape::Full),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if params.get("g").is_none_or(|g| g == "meta.k8s.io") =>
            {
                return Ok(Shape::Meta);
            }
            Some("Table") if params_ok_table(&params) => {
                return Ok(Shape::Table {
                    beta: params.get("v").map(String::as_str) == Some("v1beta1"),
                    include,
                });
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(accept))
}

fn params_ok_table(p: &HashMap<String, String>) -> bool {
    p.get("g").is_none_or(|g| g == "meta.k8s.io")
        && p.get("v").is_none_or(|v| v == "v1" || v == "v1beta1")
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Parses a JSON, YAML or (for the kinds in [`crate::protobuf`]) protobuf body.
fn parse_body(ct: &str, body: &[u8]) -> ApiResult<Value> {
    if ct == "application/vnd.kubernetes.protobuf" {
        return crate::protobuf::decode(body).map_err(|e| match e {
            ProtoError::Malformed(_) => ApiError::bad_request(e.to_string()),
            ProtoError::UnsupportedKind { .. } | ProtoError::UnsupportedEncoding(_) => {
                ApiError::new(415, "UnsupportedMediaType", e.to_string())
            }
        });
    }
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media(ct));
    }
    if ct.contains("yaml") {
        return serde_yaml::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok(v),
        Err(e) if ct.is_empty() || ct == "application/json" => {
            // Not JSON: accept YAML too, as the apiserver's decoder does.
            serde_yaml::from_slice::<Value>(body).map_err(|_| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            })
        }
        Err(e) => Err(ApiError::bad_request(format!("json parse error: {e}"))),
    }
}

fn user_agent_manager(headers: &HeaderMap) -> Option<String> {
    let ua = headers.get(header::USER_AGENT)?.to_str().ok()?;
    let m = ua.split('/').next()?.trim();
    (!m.is_empty()).then(|| m.to_string())
}

fn verb_of(method: &Method, route: &Route, watch: bool) -> &'static str {
    let named = matches!(route, Route::Resource { name: Some(_), .. });
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET if matches!(route, Route::Resource { .. }) => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

/// The single entry point of every request.
pub(crate) async fn handle(State(cs): State<Arc<ClusterState>>, mut req: Request) -> Response {
    let path = req.uri().path().to_string();
    if path == "/_sim" || path.starts_with("/_sim/") {
        return match sim_api(&cs, req).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
    }
    let rt = route(&cs, &path);
    let watch_flag = Params::parse(req.uri())
        .ok()
        .and_then(|p| p.bool("watch").ok())
        .unwrap_or(false);
    let verb = verb_of(req.method(), &rt, watch_flag);
    cs.faults.count(verb);
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let method = req.method().as_str().to_owned();
    let info = crate::faults::RequestInfo {
        verb,
        method: &method,
        path: &path,
        user_agent: &user_agent,
    };
    // Logged with its arrival time, so a request held by a stall or
    // latency counts from when it was sent.
    let arrived = std::time::SystemTime::now();
    if cs.faults.is_stalled() {
        let mut shutdown = cs.shutdown.subscribe();
        tokio::select! {
            _ = cs.faults.wait_unstalled() => {}
            _ = shutdown.wait_for(|s| *s) => {
                return error_response(&ApiError::for_code(503, Some("cluster is shutting down".into()), None));
            }
        }
    }
    let latency = cs.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let fault = cs.faults.take(&info);
    cs.faults.log(&info, arrived, fault.is_some());
    if let Some(rule) = fault {
        tracing::debug!(cluster = %cs.name, verb, path, status = rule.status, "injecting fault");
        return error_response(&ApiError::for_code(
            rule.status,
            rule.message,
            rule.retry_after,
        ));
    }
    if cs.security.enforcing() || path.starts_with("/apis/auth") || path.ends_with("/token") {
        match secure(&cs, &rt, req).await {
            Ok(r) => req = r,
            Err(r) => return r,
        }
    }
    // A bug must cost one request a 500, never the connection.
    match AssertUnwindSafe(dispatch(&cs, rt, req))
        .catch_unwind()
        .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => error_response(&e),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            tracing::error!(cluster = %cs.name, path, error = %msg, "request handler panicked");
            error_response(&ApiError::internal(msg))
        }
    }
}

/// Authenticates and authorizes a request (contract section 14) and serves
/// the review APIs and TokenRequest; `Ok` hands the request on.
async fn secure(cs: &ClusterState, rt: &Route, req: Request) -> Result<Request, Response> {
    let path = req.uri().path();
    let peer = req.extensions().get::<ConnectInfo<crate::tls::Peer>>();
    let user = crate::auth::authenticate(cs, req.headers(), peer, path)
        .and_then(|u| crate::auth::impersonate(cs, u, req.headers()))
        .map_err(|e| error_response(&e))?;
    let attrs = Attributes::from_request(req.method().as_str(), path, req.uri().query());
    let mode = cs.security.mode;
    let decision = crate::rbac::authorize(mode, &cs.store, &user, &attrs);
    cs.security.record(&user, &attrs, decision.allowed);
    if !decision.allowed {
        return Err(error_response(
            &attrs.forbidden(&user.name, &decision.reason),
        ));
    }
    // An apply that creates needs `create` as well (create-on-update).
    if let Route::Resource {
        res,
        ns,
        name: Some(name),
        sub: None,
    } = rt
        && attrs.verb == "patch"
        && content_type(req.headers()).starts_with("application/apply-patch")
        && cs.store.read(|i| i.get(res, ns.as_deref(), name)).is_err()
    {
        let create = crate::rbac::authorize(mode, &cs.store, &user, &attrs.with_verb("create"));
        cs.security
            .record(&user, &attrs.with_verb("create"), create.allowed);
        if !create.allowed {
            let mut e = attrs.with_verb("create").forbidden(&user.name, "");
            e.message = format!(
                "{} {name:?} is forbidden: {}",
                crate::error::qualified(res),
                create.reason
            );
            return Err(error_response(&e));
        }
    }
    // A subject cannot grant what it lacks (the body is read and put back).
    let req = if crate::rbac::checks_escalation(mode, &attrs) {
        let (parts, body) = req.into_parts();
        let bytes = limited_bytes(body).await.map_err(|e| error_response(&e))?;
        // An unreadable body is left to the handler's 400.
        if let Ok(obj) = parse_body(&content_type(&parts.headers), &bytes) {
            crate::rbac::confirm_no_escalation(mode, &cs.store, &user, &attrs, &obj)
                .map_err(|e| error_response(&e))?;
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        req
    };
    // Admission's `request.userInfo`.
    let mut req = req;
    req.extensions_mut().insert(user.clone());
    if !crate::auth::is_virtual(&attrs) {
        return Ok(req);
    }
    let served = async {
        let (headers, _, body) = read_body(req).await?;
        let body = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            parse_body(&content_type(&headers), &body)?
        };
        crate::auth::serve_virtual(cs, &user, &attrs, body)
    };
    Err(match served.await {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    })
}

async fn read_body(req: Request) -> ApiResult<(HeaderMap, axum::http::Uri, Vec<u8>)> {
    let (parts, body) = req.into_parts();
    let bytes = limited_bytes(body).await?;
    Ok((parts.headers, parts.uri, bytes.to_vec()))
}

async fn dispatch(cs: &Arc<ClusterState>, rt: Route, req: Request) -> ApiResult<Response> {
    let method = req.method().clone();
    let params = Params::parse(req.uri())?;
    let is_get = method == Method::GET || method == Method::HEAD;
    match rt {
        Route::Version if is_get => Ok(json_response(
            200,
            &json!({
                "major": "1",
                "minor": "32",
                "emulationMajor": "1",
                "emulationMinor": "32",
                "minCompatibilityMajor": "1",
                "minCompatibilityMinor": "31",
                "gitVersion": "v1.32.0-kube-sim",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2024-12-11T00:00:00Z",
                "goVersion": "go1.23.4",
                "compiler": "gc",
                "platform": "linux/amd64"
            }),
        )),
        Route::Health if is_get => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Ok(r)
        }
        Route::OpenApiV2
            if is_get
                && req
                    .headers()
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|a| a.starts_with("application/json")) =>
        {
            Ok(bytes_response(200, crate::openapi::v2_document().to_vec()))
        }
        Route::OpenApiV3Index if is_get => {
            let v = cs.store.read(|i| crate::openapi::v3_index(&i.registry));
            Ok(json_response(200, &v))
        }
        Route::OpenApiV3(g, v) if is_get => cs
            .store
            .read(|i| crate::openapi::v3_document(&i.registry, &g, &v))
            .map(|d| json_response(200, &d))
            .ok_or_else(ApiError::unknown_path),
        Route::OpenApiV2 if is_get => {
            let mut r = Response::new(Body::empty());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            Ok(r)
        }
        Route::Api if is_get => {
            let addr = cs.address.lock().clone();
            Ok(json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]}),
            ))
        }
        Route::Apis if is_get => {
            let mut v = cs.store.read(|i| i.registry.api_group_list());
            crate::auth::discovery_group_list(&mut v);
            Ok(json_response(200, &v))
        }
        Route::Group(g) if is_get => cs
            .store
            .read(|i| i.registry.api_group(&g))
            .or_else(|| crate::auth::discovery_group(&g))
            .map(|v| json_response(200, &v))
            .ok_or_else(ApiError::unknown_path),
        Route::ResourceList(g, v) if is_get => {
            let served = cs.store.read(|i| i.registry.api_resource_list(&g, &v));
            crate::auth::discovery_resources(&g, &v, served)
                .map(|v| json_response(200, &v))
                .ok_or_else(ApiError::unknown_path)
        }
        Route::Resource { res, ns, name, sub } => {
            resource(cs, req, params, res, ns, name, sub).await
        }
        Route::NotFound => Err(ApiError::unknown_path()),
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn write_opts(params: &Params, headers: &HeaderMap, sub: &Option<String>) -> ApiResult<WriteOpts> {
    let field_validation = match params.get("fieldValidation") {
        Some("Strict") => crate::validate::FieldValidation::Strict,
        Some("Ignore") => crate::validate::FieldValidation::Ignore,
        None | Some("" | "Warn") => crate::validate::FieldValidation::Warn,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {v:?}"
            )));
        }
    };
    let manager = match params.non_empty("fieldManager") {
        Some(m) if m.len() > 128 => {
            return Err(ApiError::bad_request(
                "fieldManager: Too long: may not be longer than 128",
            ));
        }
        Some(m) => Some(m.to_string()),
        None => None,
    };
    Ok(WriteOpts {
        dry_run: params.dry_run()?,
        manager,
        subresource: sub.clone(),
        field_validation,
        user: None,
        webhooks: Default::default(),
    })
    .map(|mut o| {
        if o.manager.is_none() {
            o.manager = user_agent_manager(headers);
        }
        o
    })
}

/// Adds `Warning: 299 - "..."` headers, as the apiserver reports dropped
/// unknown fields under `fieldValidation=Warn`.
fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// An object response; `cached` is the object's serialization from the
/// write that stored it (reused instead of serializing again).
fn written_response(
    code: u16,
    res: &ResourceInfo,
    shape: Shape,
    obj: &Value,
    cached: Option<bytes::Bytes>,
) -> Response {
    if shape == Shape::Full
        && !res.needs_conversion()
        && let Some(b) = cached
    {
        let mut body = Vec::with_capacity(b.len() + 1);
        body.extend_from_slice(&b);
        body.push(b'\n');
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    object_response(code, res, shape, obj)
}

fn object_response(code: u16, res: &ResourceInfo, shape: Shape, obj: &Value) -> Response {
    if shape == Shape::Full && !res.needs_conversion() {
        return bytes_response(code, serde_json::to_vec(obj).unwrap_or_default());
    }
    json_response(code, &render(res, shape, obj))
}

fn list_response(
    res: &ResourceInfo,
    shape: Shape,
    items: &[Arc<Value>],
    rv: u64,
    cont: Option<String>,
) -> Response {
    let (kind, av) = match shape {
        Shape::Full => (res.list_kind.clone(), res.api_version()),
        Shape::Meta => (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        ),
        Shape::Table { beta, include } => {
            let served: Vec<Value> = items.iter().map(|o| render(res, Shape::Full, o)).collect();
            let t = crate::watch::table(res, beta, include, &served, Some(rv), cont.as_deref());
            return json_response(200, &t);
        }
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = Value::String(c);
    }
    let mut out = Vec::with_capacity(256 + items.len() * 512);
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(&serde_json::to_vec(&kind).unwrap_or_default());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(&serde_json::to_vec(&av).unwrap_or_default());
    out.extend_from_slice(b",\"metadata\":");
    out.extend_from_slice(&serde_json::to_vec(&meta).unwrap_or_default());
    out.extend_from_slice(b",\"items\":[");
    let fast = shape == Shape::Full && !res.needs_conversion();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if fast {
            let _ = serde_json::to_writer(&mut out, &**item);
        } else {
            let _ = serde_json::to_writer(&mut out, &render(res, shape, item));
        }
    }
    out.extend_from_slice(b"]}");
    bytes_response(200, out)
}

fn list_validation(field: &str, msg: &str) -> ApiError {
    let mut e = ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        &[("FieldValueForbidden", field.to_string(), msg.to_string())],
    );
    e.message = format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: {msg}");
    e
}

fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version \"{s}\": expected a decimal number"
        ))
    })
}

#[allow(clippy::too_many_arguments)]
async fn resource(
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
            let start = cs
                .store
                .read(|i| i.watch_start(&res, nsr, &label, &field, from));
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
            let lr = cs
                .store
                .read(|i| i.list(&res, nsr, &label, &field, &opts))?;
            let items = conversion::served(cs, &res, lr.items).await?;
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
                    // see (as the server admits each), outside the lock.
                    if cs.store.read(|i| webhook::configured(i)) {
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
type ScaleEdit = dyn Fn(&Value) -> ApiResult<Option<Value>> + Send + Sync;

/// `GET`, `PUT` and `PATCH` of `/scale` (autoscaling/v1 Scale).
async fn scale(
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
fn spawn_namespace_controller(cs: &Arc<ClusterState>) {
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
fn check_type(res: &ResourceInfo, obj: &Value) -> ApiResult<()> {
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

fn delete_opts(params: &Params, headers: &HeaderMap, body: &[u8]) -> ApiResult<DeleteOpts> {
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

/// The `/_sim` test API (see the crate docs for the paths).
async fn sim_api(cs: &Arc<ClusterState>, req: Request) -> ApiResult<Response> {
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

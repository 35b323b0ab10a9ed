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

mod resource;
mod sim_api;

use resource::*;
use sim_api::*;

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

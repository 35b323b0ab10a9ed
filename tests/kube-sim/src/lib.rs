//! kube-sim: a faithful in-memory Kubernetes API server for tests,
//! benchmarks and the demo.
//!
//! One [`SimCluster`] is one cluster: its own HTTP/1.1 server on
//! `127.0.0.1`, its own object store and one global resourceVersion
//! counter. kube-rs (`Api`, watcher, reflector, Controller, finalizer
//! helper, events Recorder, Lease), `kubectl` and the Python client's watch
//! work against it unmodified. The behaviour it reproduces is specified in
//! `docs/apiserver-semantics.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_sim::SimError> {
//! use kube_sim::{FaultRule, Sim};
//! let sim = Sim::start(&["main", "sub"]).await?;
//! // kubeconfig with contexts "main" and "sub"
//! let path = sim.kubeconfig_path();
//! let main = sim.cluster("main");
//! main.fail_next(FaultRule::new(503, 2).verb("list").path("configmaps"));
//! main.compact(); // the next watch from an old resourceVersion gets 410
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Fidelity notes
//!
//! - One mutex per cluster guards the store; no lock is held across an
//!   await. Each persisted change is serialized once and fanned out to
//!   watchers through a per-resource broadcast channel; a watcher that falls
//!   behind is resynced from the bounded history, or gets 410 if it fell
//!   off the end.
//! - Garbage collection, CRD cleanup and CRD establishment run
//!   synchronously after the write that triggers them. Namespace deletion
//!   is asynchronous, as the namespace controller does it: the DELETE
//!   answers with the namespace Terminating, its contents go after a delay
//!   (500 ms, `/_sim/namespace-delay`), with the controller's conditions.
//!   Once a cluster has admission webhooks or ValidatingAdmissionPolicies,
//!   the garbage collector's and the namespace controller's deletes go
//!   through admission as their service accounts, shortly after the
//!   write, retried while refused (`store::gc`, README "The controllers'
//!   deletes").
//! - Built-ins are defaulted as the apiserver's defaulters and admission
//!   do it (`defaults`: Service IPs/ports, pod specs, workloads, Jobs,
//!   Secret `stringData`), and pass through their OpenAPI schema
//!   (`openapi`, from k8s-openapi): unknown fields follow
//!   `fieldValidation` (Strict → 400, Warn → `Warning` header, Ignore),
//!   empty `omitempty` maps and lists are dropped. Custom resources get
//!   their schema's `default`s and are validated against their structural
//!   schema (type, required, enum, bounds, length, pattern → 422) and its
//!   `x-kubernetes-validations` CEL rules; ValidatingAdmissionPolicies and
//!   their bindings are enforced on every write ([`admission`]; the README
//!   lists what is covered and where CEL differs from the server's).
//! - Built-ins follow their REST strategies (`pkg/registry/*/strategy.go`,
//!   one table in `resources`): which kinds reset a client's `status` on
//!   create, which maintain `metadata.generation` (and what bumps it), which
//!   answer a DELETE with the object. Their status is written as Go's
//!   typed encoding writes it (fields without `omitempty` as zeros,
//!   non-pointer structs as objects; `defaults::encode_status`, from the
//!   Go struct tags in `data/protobuf-messages.txt`), so clients generated
//!   from the API types (the Python client's models) accept every
//!   response. The README lists the kinds and fields covered.
//! - Lists with `limit`/`continue` or an Exact resourceVersion are served
//!   from a snapshot rebuilt from the watch history.
//! - Protobuf request bodies are decoded for every built-in kind (what
//!   kubectl's imperative `create` subcommands send); custom resources get
//!   415. Responses are always JSON (kubectl also accepts
//!   `application/json`).
//! - OpenAPI: `/openapi/v3` and `/openapi/v3/{api/v1,apis/g/v}` with
//!   built-in and CRD schemas (`kubectl explain`, kubectl's
//!   query-parameter check); `/openapi/v2` as JSON when asked for JSON,
//!   else an empty protobuf document. The schemas carry no
//!   `x-kubernetes-patch-*` / `list-type` extensions (k8s-openapi drops
//!   them), so kubectl builds strategic merge patches from its compiled-in
//!   types, as it does for a server without OpenAPI.
//! - Admission webhooks (MutatingWebhookConfiguration,
//!   ValidatingWebhookConfiguration) are called over HTTPS outside the
//!   store's lock; services resolve through `KUBE_SIM_WEBHOOK_SERVICES` /
//!   [`SimCluster::map_webhook_service`] (README, "Admission").
//! - CRD conversion webhooks (`conversion.strategy: Webhook`): reads,
//!   writes, lists and watches at a version other than the storage version
//!   are converted by calling the webhook outside the store's lock (README,
//!   "Conversion webhooks"); with strategy `None` only `apiVersion` is
//!   rewritten.
//! - Not served: protobuf responses, CBOR, aggregated discovery, workload
//!   controllers (no Pods for Jobs, no status updates).
//!
//! # Security (off by default)
//!
//! [`SimConfig::tls`] serves HTTPS with a per-cluster CA that kubeconfigs
//! carry; [`SimConfig::auth`] requires authentication (client
//! certificates, static tokens, ServiceAccount tokens from TokenRequest;
//! 401 otherwise) and authorizes with RBAC (403 with the apiserver's
//! message). The kubeconfig's user is then `kubernetes-admin` in
//! `system:masters` (a client certificate with TLS, a token without).
//! kubectl, like all client-go programs, sends credentials only over TLS:
//! pair `auth` with `tls` for kubectl. The review APIs (`kubectl auth
//! can-i`, `auth can-i --list`, `auth whoami`) answer in every mode;
//! without RBAC everything is allowed. [`SimCluster::audit_log`] lists
//! every authorization decision. See [`auth`] and [`rbac`]. The `/_sim`
//! API needs no credentials.
//!
//! # Test API over HTTP (`/_sim/...`)
//!
//! Never affected by injected faults or stalls. Parameters go in the query
//! string or a JSON body.
//!
//! | Request | Effect |
//! |---|---|
//! | `GET /_sim` | cluster name, current RV, object count, stalled |
//! | `GET /_sim/rv` | `{"resourceVersion":"N"}` |
//! | `POST /_sim/compact` | drop all watch history (re-watch from older RVs → 410) |
//! | `POST /_sim/close-watches` | end every open watch stream |
//! | `POST /_sim/fail?status=503&count=2&verb=list&path=configmaps&retryAfter=1&message=..` | fail the next `count` matching requests (verb: Kubernetes verb or HTTP method; path: substring) |
//! | `POST /_sim/clear-faults` | remove fail rules and latency |
//! | `POST /_sim/latency?ms=200` | delay every API request (0 disables) |
//! | `POST /_sim/stall` / `POST /_sim/resume` | hold every API request (connections are accepted) / release |
//! | `POST /_sim/bookmark-interval?ms=500` | bookmark period of new watches |
//! | `POST /_sim/namespace-delay?ms=500` | delay between a namespace's DELETE and the deletion of its contents |
//! | `GET /_sim/requests` / `DELETE /_sim/requests` | requests counted per verb / reset the counters |
//! | `GET /_sim/admission-audit` | what policy bindings' Audit action recorded |
//! | `POST /_sim/reset` | drop all objects and CRDs, close watches, clear faults |
//!
//! # Layout
//! - `cluster`: [`SimCluster`], [`Sim`], [`SimConfig`], kubeconfig files.
//! - `server`: HTTP routing, parameters, content negotiation, verbs, `/_sim`.
//! - `store`: tables, resourceVersions, history, finalizers, GC, namespaces, CRDs
//!   (`store/gc.rs`: the controllers' deletes through admission).
//! - `watch`: watch streams (bookmarks, timeouts, selector transitions).
//! - `resources`: built-in and CRD resources, discovery documents.
//! - `selectors`: label and field selectors.
//! - `table`: server-side printing (`as=Table`) for `kubectl get`.
//! - `defaults`: built-in defaulting (defaults.go, admission), Secret
//!   `stringData`, Go's encoding of built-in statuses.
//! - [`openapi`]: OpenAPI v2/v3 documents, schema lookups.
//! - [`validate`]: unknown fields (`fieldValidation`), CR schema constraints
//!   and structural defaults.
//! - [`admission`]: CRD `x-kubernetes-validations`, ValidatingAdmissionPolicy
//!   (CEL through kube-cel), mutating and validating webhooks.
//! - `scale`: the `/scale` subresource (autoscaling/v1 Scale).
//! - `faults`: fault injection and request counters.
//! - [`tls`]: the cluster CA, serving and client certificates, the TLS listener.
//! - [`auth`]: authentication, ServiceAccount tokens, the review APIs.
//! - [`rbac`]: request attributes and the RBAC authorizer.
//! - `error`: `metav1.Status` errors.
//! - [`patch`]: patch algebra and managedFields.
//! - [`protobuf`]: protobuf request bodies (kubectl `create` subcommands) to
//!   JSON, driven by `data/protobuf-messages.txt` (generated from upstream).

pub mod admission;
pub mod auth;
pub mod cluster;
mod defaults;
pub mod error;
pub mod faults;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod resources;
mod scale;
pub mod selectors;
pub mod server;
pub mod store;
mod table;
pub mod tls;
pub mod validate;
pub mod watch;

pub use auth::{ADMIN_USER, AuditRecord, TokenUser, UserInfo};
pub use cluster::{
    Credentials, Sim, SimCluster, SimConfig, SimError, kubeconfig_yaml, write_kubeconfig,
};
pub use error::ApiError;
pub use faults::{FaultRule, Faults};
pub use rbac::Mode as AuthorizationMode;

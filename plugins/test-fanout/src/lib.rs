//! # test-fanout — a `Test` fans a Job out to every cluster
//!
//! A rekon seed plugin (see `docs/design.md`, "The seed plugins"). A
//! [`Test`] (`tests.job.lailin.xyz/v1`, namespaced) in the primary cluster
//! gets a Job named after it, in its namespace, in **every engaged cluster**
//! (primary included). The Test is `finished` as soon as any of those Jobs
//! has completed, and stays finished.
//!
//! # Layout
//!
//! | item | what |
//! |---|---|
//! | [`Test`], [`TestSpec`], [`TestStatus`] | the custom resource (CRD generated from the types) |
//! | [`TestFanout`] | the [`Plugin`]: registration and reconcile |
//! | [`job_for`] | the Job a Test wants in one cluster |
//! | [`FanoutSettings`] | what an operator configures: the clusters Jobs go to, Job defaults |
//! | [`job_state`] | how a Job's status reads |
//! | [`admission`] | the webhooks: a Test is validated and defaulted before it is stored |
//!
//! # Behaviour
//!
//! - **Admission** ([`admission`]). Before a Test is stored, the API server
//!   checks the CRD's CEL rules (an image is given, no cluster named twice,
//!   the spec is immutable) and asks the plugin: `spec.image` must be an
//!   image reference and each cluster of `spec.clusters` one the plugin
//!   fans out to (422, worded as the API server words it); an image without
//!   tag or digest is stored with `:latest`.
//! - **Fan-out.** Per engaged cluster (of `spec.clusters` when the Test
//!   names some): a Job `<test>` in namespace `<ns>`,
//!   one container `<test>` running `spec.image`, `restartPolicy: Never`,
//!   owner labels `owner.cluster`, `owner.namespace`, `owner.name` naming the
//!   Test. In the Test's own cluster the Job also carries a controller owner
//!   reference. In other clusters the namespace is created first. Both are
//!   *create-if-absent*: an existing Job (its `spec.template` is immutable)
//!   is never rewritten, so reconciling again is harmless.
//! - **One run.** A Test's spec is immutable: the CRD carries the
//!   transition rule [`SPEC_IMMUTABLE_RULE`] on `spec`, so the API server
//!   refuses an edit ([`SPEC_IMMUTABLE_MESSAGE`]); a new image is a new
//!   Test (delete and re-create). The Jobs, made once, never disagree with
//!   their Test.
//! - **Status.** `phase` is `running` until a Job of the Test has completed
//!   (condition `Complete=True` or a `completionTime`) in any cluster, then
//!   `finished` for good (with `finishedCluster` and `finishedAt`).
//!   `clusters` lists each engaged cluster with its Job's [`JobState`],
//!   including `Unreachable` clusters (health from `ctx.clusters()`). The
//!   status is written (merge patch of `/status`) only when it changed; it
//!   has no field that changes on every reconcile. The host requeues every
//!   Test when a cluster's health changes; as a safety net a running Test
//!   also asks to be looked at again every [`RESYNC`] (every
//!   [`UNREACHABLE_RETRY`] while a cluster is down).
//! - **Late clusters.** A cluster engaged later gets its Job unless the Test
//!   has finished (it is then listed as `Skipped`).
//! - **Events** on the Test: `CreatingJobs` when Jobs are created,
//!   `Finished` when it finishes, `ClusterUnreachable` when a cluster's entry
//!   turns unreachable.
//! - **Deletion** (finalizer [`FINALIZER`]): the Job is deleted in every
//!   engaged cluster (propagation Background so its Pods go too). Cleanup is
//!   reported done only when every engaged cluster is `Ready`: for a
//!   cluster that is unreachable or still syncing the cache cannot be
//!   trusted, so the plugin deletes what it last saw there and finishes
//!   when the host requeues it on the cluster's return (or after
//!   [`UNREACHABLE_RETRY`] at the latest). Clusters *removed* from the engaged
//!   set are out of reach; their Jobs stay (the owner labels say whose they are).
//! - A Job with the Test's name that does not carry the Test's owner labels
//!   is someone else's: it is reported as `Conflict`, never counted, never
//!   deleted.

pub mod admission;
pub mod reference;

use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{CustomResource, KubeSchema};
use rekon_sdk::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The plugin's name (field manager `rekon.test-fanout`).
pub const PLUGIN_NAME: &str = "test-fanout";
/// The finalizer the host puts on every Test.
pub const FINALIZER: &str = "job.lailin.xyz/fanout-cleanup";
/// Label on a Job naming the cluster of its Test.
pub const OWNER_CLUSTER: &str = "owner.cluster";
/// Label on a Job naming the namespace of its Test.
pub const OWNER_NAMESPACE: &str = "owner.namespace";
/// Label on a Job naming its Test.
pub const OWNER_NAME: &str = "owner.name";
/// How often a Test is looked at again while a cluster is out of reach or
/// syncing. A safety net: the host requeues every Test when a cluster's
/// health changes.
pub const UNREACHABLE_RETRY: Duration = Duration::from_secs(30);
/// How often a running Test is looked at again anyway. A safety net: Job
/// changes and cluster health changes requeue it on their own.
pub const RESYNC: Duration = Duration::from_secs(60);

/// The owner label keys every fanned-out Job carries.
#[must_use]
pub fn owner_labels() -> OwnerLabels {
    OwnerLabels::new(OWNER_CLUSTER, OWNER_NAMESPACE, OWNER_NAME)
}

/// The CRD's transition rule on `spec`: a Test's spec cannot change.
pub const SPEC_IMMUTABLE_RULE: &str = "self == oldSelf";
/// What the API server answers an edit of a Test's spec with.
pub const SPEC_IMMUTABLE_MESSAGE: &str =
    "a Test's spec is immutable: delete the Test and create it again";

/// A test run: one Job per cluster, finished when any of them completes.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "job.lailin.xyz",
    version = "v1",
    kind = "Test",
    namespaced,
    status = "TestStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
// A Test is one run: its spec is immutable, as the API server enforces (a
// Job's pod template cannot change either, and the Jobs are made once).
// What a rule on the object alone can say is said in CEL here, enforced by
// the API server with no webhook in the path; what needs the host's view
// (known clusters) or a parser (an image reference) is the webhook's
// ([`admission`]).
#[x_kube(validation = Rule::new(SPEC_IMMUTABLE_RULE).message(SPEC_IMMUTABLE_MESSAGE))]
pub struct TestSpec {
    /// The container image every Job runs. Without a tag or digest it is
    /// stored with `:latest`, the tag the container runtime assumes
    /// (mutating webhook `defaults`).
    #[x_kube(validation = Rule::new(IMAGE_RULE).message(IMAGE_MESSAGE))]
    pub image: String,
    /// The clusters the Test's Jobs go to, by name: each one of the
    /// clusters the plugin fans out to (validating webhook `test`).
    /// Absent: every one of them, including clusters engaged later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = Rule::new(CLUSTERS_RULE).message(CLUSTERS_MESSAGE))]
    pub clusters: Option<Vec<String>>,
}

/// The CRD's rule on `spec.image`: an image is given.
pub const IMAGE_RULE: &str = "self != ''";
/// What the API server answers an empty image with.
pub const IMAGE_MESSAGE: &str = "an image is required";
/// The CRD's rule on `spec.clusters`: no cluster named twice.
pub const CLUSTERS_RULE: &str = "self.all(c, self.exists_one(d, d == c))";
/// What the API server answers a cluster named twice with.
pub const CLUSTERS_MESSAGE: &str = "must not name a cluster twice";

/// Where a Test stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// No Job has completed yet.
    #[default]
    Running,
    /// A Job completed in some cluster. Final.
    Finished,
}

/// The state of a Test's Job in one cluster.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobState {
    /// The Job is being created (not in the cache yet).
    Creating,
    /// The Job exists; no Pod is active yet.
    Pending,
    /// The Job has active Pods.
    Running,
    /// The Job completed.
    Complete,
    /// The Job failed.
    Failed,
    /// Not created: the Test had already finished when the cluster appeared.
    Skipped,
    /// A Job with the Test's name exists but belongs to someone else.
    Conflict,
    /// The cluster's caches are still listing.
    Syncing,
    /// The cluster cannot be reached.
    Unreachable,
}

/// One cluster's line in `status.clusters`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterJob {
    /// Cluster name.
    pub cluster: String,
    /// The Job's state there.
    pub state: JobState,
    /// Detail, e.g. the last state seen before a cluster became unreachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Observed state of a Test.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestStatus {
    /// `running` or `finished`.
    #[serde(default)]
    pub phase: Phase,
    /// The cluster whose Job finished the Test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_cluster: Option<String>,
    /// When the plugin saw the Test finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Every engaged cluster and its Job, by cluster name.
    #[serde(default)]
    pub clusters: Vec<ClusterJob>,
}

/// What an operator configures for the plugin (`spec.settings` of its
/// Plugin object, or `test_fanout.settings.json` beside the file). The
/// defaults are the plugin's behaviour without settings.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FanoutSettings {
    /// Fan out to these clusters only (by name); empty: every engaged
    /// cluster. The plugin then watches, reads and writes Jobs only there.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Defaults for every Job.
    #[serde(default)]
    pub job: JobDefaults,
}

/// Job fields every fanned-out Job gets (unset: the API server's defaults).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobDefaults {
    /// `spec.backoffLimit`: retries before the Job is failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// `spec.activeDeadlineSeconds`: how long a Job may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// `spec.ttlSecondsAfterFinished`: when a finished Job is deleted by
    /// the cluster (the Test's status keeps its outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

impl Settings for FanoutSettings {
    fn validate(&self) -> Result<(), String> {
        if let Some(c) = self.clusters.iter().find(|c| c.is_empty()) {
            return Err(format!("clusters: {c:?} is not a cluster name"));
        }
        let j = &self.job;
        if j.backoff_limit.is_some_and(|v| v < 0) {
            return Err("job.backoffLimit must not be negative".into());
        }
        if j.active_deadline_seconds.is_some_and(|v| v <= 0) {
            return Err("job.activeDeadlineSeconds must be positive".into());
        }
        if j.ttl_seconds_after_finished.is_some_and(|v| v < 0) {
            return Err("job.ttlSecondsAfterFinished must not be negative".into());
        }
        Ok(())
    }
}

impl FanoutSettings {
    /// The clusters Jobs go to: every one, or the named ones.
    #[must_use]
    pub fn cluster_set(&self) -> ClusterSet {
        if self.clusters.is_empty() {
            ClusterSet::All
        } else {
            ClusterSet::Named(self.clusters.clone())
        }
    }
}

/// [`job_for`] with the Job defaults of `settings`.
#[must_use]
pub fn job_with(test: &Test, owner: &Request, cluster: &str, defaults: &JobDefaults) -> Job {
    let mut job = job_for(test, owner, cluster);
    if let Some(spec) = job.spec.as_mut() {
        spec.backoff_limit = defaults.backoff_limit;
        spec.active_deadline_seconds = defaults.active_deadline_seconds;
        spec.ttl_seconds_after_finished = defaults.ttl_seconds_after_finished;
    }
    job
}

/// The Job `test` wants in `cluster`. `owner` is the Test's request (its
/// cluster, namespace and name); the Job gets a controller owner reference
/// only in the Test's own cluster (owner references cannot cross clusters).
#[must_use]
pub fn job_for(test: &Test, owner: &Request, cluster: &str) -> Job {
    let name = owner.name.clone();
    let owner_references = if cluster == owner.cluster {
        test.controller_owner_ref(&()).map(|mut r| {
            // Setting blockOwnerDeletion needs `update` on tests/finalizers
            // in real clusters; the finalizer already orders deletion.
            r.block_owner_deletion = None;
            vec![r]
        })
    } else {
        None
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: owner.namespace.clone(),
            labels: Some(owner_labels().labels_for(owner)),
            owner_references,
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name,
                        image: Some(test.spec.image.clone()),
                        ..Container::default()
                    }],
                    restart_policy: Some("Never".to_owned()),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// How a Job's status reads: complete (condition `Complete=True` or a
/// `completionTime`), failed, running (active Pods) or pending.
#[must_use]
pub fn job_state(job: &Job) -> JobState {
    let status = job.status.as_ref();
    let condition = |type_: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
    };
    if condition("Complete") || status.is_some_and(|s| s.completion_time.is_some()) {
        JobState::Complete
    } else if condition("Failed") {
        JobState::Failed
    } else if status.and_then(|s| s.active).unwrap_or(0) > 0 {
        JobState::Running
    } else {
        JobState::Pending
    }
}

/// The plugin.
pub struct TestFanout;

/// What the cache shows of a Test's Job in one cluster.
enum Seen {
    /// No Job with the Test's name.
    Absent,
    /// The Test's Job.
    Mine(Box<Job>),
    /// A Job with the Test's name but not the Test's owner labels.
    Foreign,
    /// The cache could not be read (the cluster is not ready).
    Unknown(String),
}

/// One engaged cluster as this reconcile sees it.
struct View {
    info: ClusterInfo,
    seen: Seen,
}

impl View {
    fn job_state(&self) -> Option<JobState> {
        match &self.seen {
            Seen::Mine(job) => Some(job_state(job)),
            _ => None,
        }
    }
}

impl Plugin for TestFanout {
    type Primary = Test;

    fn register() -> Result<Registration, Error> {
        // The settings shape the registration: Jobs are watched, read and
        // written only in the clusters they go to.
        let fanout = rekon_sdk::settings::<FanoutSettings>()?.cluster_set();
        Ok(
            Registration::new::<Test>(PLUGIN_NAME, env!("CARGO_PKG_VERSION"))
                .settings::<FanoutSettings>()
                .clusters(fanout.clone())
                .watch::<Job>(fanout.clone(), Mapping::OwnerLabels(owner_labels()))
                .finalizer(FINALIZER)
                .permission::<Test>(
                    &[
                        Verb::Get,
                        Verb::List,
                        Verb::Watch,
                        Verb::Patch,
                        Verb::Update,
                    ],
                    ClusterSet::Primary,
                )
                .status_permission::<Test>(
                    &[Verb::Get, Verb::Patch, Verb::Update],
                    ClusterSet::Primary,
                )
                .permission::<Job>(
                    &[
                        Verb::Get,
                        Verb::List,
                        Verb::Watch,
                        Verb::Create,
                        Verb::Delete,
                    ],
                    fanout.clone(),
                )
                .permission::<Namespace>(&[Verb::Get, Verb::Create], fanout)
                .crd(Test::crd()),
        )
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<Test>) -> Result<Outcome, Error> {
        let Some(namespace) = req.namespace.as_deref() else {
            return Err(Error::terminal(format!("test {req} has no namespace")));
        };
        let settings: FanoutSettings = ctx.settings()?;
        let named = event.primary().spec.clusters.clone();
        let views = observe(ctx, req, namespace, &settings, named.as_deref())?;
        Ok(match event {
            Event::Apply(test) => converge(ctx, req, &test, &views, &settings.job),
            Event::Cleanup(_) => cleanup(ctx, req, namespace, &views),
        })
    }
}

/// Reads the Test's Job in every engaged cluster it goes to (those of the
/// settings, and of `spec.clusters` when it names some), sorted by name.
fn observe(
    ctx: &Context,
    req: &Request,
    namespace: &str,
    settings: &FanoutSettings,
    named: Option<&[String]>,
) -> Result<Vec<View>, Error> {
    let fanout = settings.cluster_set();
    let mut clusters = ctx.clusters();
    clusters
        .retain(|c| fanout.contains(&c.name, None) && named.is_none_or(|n| n.contains(&c.name)));
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let keys = owner_labels();
    let mut views = Vec::with_capacity(clusters.len());
    for info in clusters {
        let seen = match ctx.get::<Job>(&info.name, Some(namespace), &req.name) {
            Ok(None) => Seen::Absent,
            Ok(Some(job)) => {
                let labels = job.metadata.labels.clone().unwrap_or_default();
                if keys.owner_of(&labels).as_ref() == Some(req) {
                    Seen::Mine(Box::new(job))
                } else {
                    Seen::Foreign
                }
            }
            // A cluster that is not ready may not have its watch yet; a
            // ready cluster that cannot be read is a real problem.
            Err(e) if info.is_ready() && !matches!(e, ReadError::UnknownCluster(_)) => {
                return Err(Error::from(e).context(format!(
                    "failed to read the job of test {req} in cluster {}",
                    info.name
                )));
            }
            Err(e) => Seen::Unknown(e.to_string()),
        };
        views.push(View { info, seen });
    }
    Ok(views)
}

/// The normal path: create missing Jobs, compute and write the status.
fn converge(
    ctx: &Context,
    req: &Request,
    test: &Test,
    views: &[View],
    defaults: &JobDefaults,
) -> Outcome {
    let test_ref = ObjectRef::for_request::<Test>(req);
    let old = test.status.clone().unwrap_or_default();
    let mut outcome = Outcome::done();

    // Finished: already, or a Job of ours completed somewhere (a Job that
    // completed stays complete, so a stale cache of an unreachable cluster
    // counts too).
    let completed_in = views
        .iter()
        .find(|v| v.job_state() == Some(JobState::Complete))
        .map(|v| v.info.name.clone());
    let finished = old.phase == Phase::Finished || completed_in.is_some();

    // Jobs to create: every reachable cluster without one, unless finished.
    let mut created = Vec::new();
    if !finished {
        for v in views {
            if matches!(v.seen, Seen::Absent) && v.info.health != ClusterHealth::Unreachable {
                if v.info.name != req.cluster
                    && let Some(ns) = &req.namespace
                {
                    let namespace = Namespace {
                        metadata: ObjectMeta {
                            name: Some(ns.clone()),
                            ..ObjectMeta::default()
                        },
                        ..Namespace::default()
                    };
                    outcome.push(Action::create(&v.info.name, &namespace));
                }
                outcome.push(Action::create(
                    &v.info.name,
                    &job_with(test, req, &v.info.name, defaults),
                ));
                created.push(v.info.name.clone());
            }
        }
    }

    let clusters: Vec<ClusterJob> = views
        .iter()
        .map(|v| cluster_line(v, finished, &old))
        .collect();
    let status = if finished {
        TestStatus {
            phase: Phase::Finished,
            finished_cluster: old.finished_cluster.clone().or(completed_in.clone()),
            finished_at: old.finished_at.clone().or_else(|| Some(ctx.now_seconds())),
            clusters,
        }
    } else {
        TestStatus {
            phase: Phase::Running,
            finished_cluster: None,
            finished_at: None,
            clusters,
        }
    };

    if !created.is_empty() {
        rekon_sdk::info!(ctx, "creating jobs"; test = req, clusters = created.join(","));
        outcome.push(Action::normal_event(
            test_ref.clone(),
            "CreatingJobs",
            "Create",
            &format!(
                "creating Job {} in cluster(s) {}",
                req.name,
                created.join(", ")
            ),
        ));
    }
    if finished && old.phase != Phase::Finished {
        let place = status.finished_cluster.as_deref().unwrap_or("a cluster");
        rekon_sdk::info!(ctx, "test finished"; test = req, cluster = place);
        outcome.push(Action::normal_event(
            test_ref.clone(),
            "Finished",
            "Complete",
            &format!("Job {} completed in cluster {place}", req.name),
        ));
    }
    for line in &status.clusters {
        let was_unreachable = old
            .clusters
            .iter()
            .any(|l| l.cluster == line.cluster && l.state == JobState::Unreachable);
        if line.state == JobState::Unreachable && !was_unreachable {
            outcome.push(Action::warning_event(
                test_ref.clone(),
                "ClusterUnreachable",
                "Observe",
                &format!("cluster {} cannot be reached", line.cluster),
            ));
        }
    }

    if rekon_sdk::status_changed(test.status.as_ref(), &status) {
        match serde_json::to_value(&status) {
            Ok(value) => outcome.push(
                Action::merge_patch(test_ref, serde_json::json!({ "status": value })).status(),
            ),
            Err(e) => ctx.error(&format!(
                "failed to serialize the status of test {req}: {e}"
            )),
        }
    }
    // Health changes requeue the Test (host); this is a safety net while it
    // runs, sooner while a cluster is out of reach.
    if !finished {
        let unreachable = views
            .iter()
            .any(|v| v.info.health == ClusterHealth::Unreachable);
        outcome = outcome.requeue_after(if unreachable {
            UNREACHABLE_RETRY
        } else {
            RESYNC
        });
    }
    outcome
}

/// One cluster's status line.
fn cluster_line(v: &View, finished: bool, old: &TestStatus) -> ClusterJob {
    let line = |state, message: Option<String>| ClusterJob {
        cluster: v.info.name.clone(),
        state,
        message,
    };
    match (&v.seen, v.info.health) {
        (seen, ClusterHealth::Unreachable) => {
            let last = match seen {
                Seen::Mine(job) => Some(job_state(job)),
                _ => old
                    .clusters
                    .iter()
                    .find(|l| l.cluster == v.info.name)
                    .filter(|l| l.state != JobState::Unreachable)
                    .map(|l| l.state),
            };
            line(
                JobState::Unreachable,
                last.map(|s| format!("last seen: {s:?}")),
            )
        }
        (Seen::Mine(job), _) => line(job_state(job), None),
        (Seen::Foreign, _) => line(
            JobState::Conflict,
            Some("a Job with this name exists without this Test's owner labels".to_owned()),
        ),
        (Seen::Unknown(why), _) => line(JobState::Syncing, Some(why.clone())),
        (Seen::Absent, ClusterHealth::Syncing) => line(JobState::Syncing, None),
        (Seen::Absent, _) if finished => line(JobState::Skipped, None),
        (Seen::Absent, _) => line(JobState::Creating, None),
    }
}

/// The deletion path: delete the Job everywhere; done only when every
/// engaged cluster is ready (its cache can be trusted).
fn cleanup(ctx: &Context, req: &Request, namespace: &str, views: &[View]) -> Outcome {
    let mut ready = Vec::new();
    let mut later = Vec::new();
    let mut waiting = Vec::new();
    for v in views {
        let target = ObjectRef::new::<Job>(&v.info.name, Some(namespace), &req.name);
        let delete = match &v.seen {
            Seen::Mine(job) => {
                let delete = Action::delete(target).propagation(Propagation::Background);
                Some(match job.metadata.uid.as_deref() {
                    Some(uid) => delete.uid(uid),
                    None => delete,
                })
            }
            // A ready cache may lag behind a create that just succeeded:
            // delete by name anyway (absent is success).
            Seen::Absent if v.info.is_ready() => {
                Some(Action::delete(target).propagation(Propagation::Background))
            }
            Seen::Absent | Seen::Foreign | Seen::Unknown(_) => None,
        };
        if v.info.is_ready() {
            ready.extend(delete);
        } else {
            later.extend(delete);
            waiting.push(v.info.name.clone());
        }
    }
    let outcome = Outcome::with_actions(ready.into_iter().chain(later));
    if waiting.is_empty() {
        rekon_sdk::info!(ctx, "deleting jobs in every cluster"; test = req);
        outcome
    } else {
        rekon_sdk::info!(ctx, "waiting for clusters before finishing cleanup"; test = req, clusters = waiting.join(","));
        outcome.keep_finalizer().requeue_after(UNREACHABLE_RETRY)
    }
}

rekon_sdk::export_plugin!(TestFanout, admission);

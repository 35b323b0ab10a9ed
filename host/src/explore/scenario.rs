//! The scenario file: clusters, CRDs and the steps of a short workload.
//!
//! ```yaml
//! clusters: [main, edge]          # the first is the primary cluster
//! crds: [crds/test.yaml]          # optional: paths relative to the file, or inline CRDs
//! steps:
//!   - apply: {cluster: main, file: source.yaml}    # or object: {...} inline
//!   - apply-status: {cluster: main, object: {...}} # the status subresource
//!   - settle: {}                                    # run until nothing is queued
//!   - delete: {cluster: main, apiVersion: v1, kind: ConfigMap, namespace: default, name: src}
//!   - cluster-down: {cluster: edge}                 # unreachable; cluster-up brings it back
//!   - cluster-up: {cluster: edge}
//!   - settle: {}
//! ```
//!
//! Parsing is strict, through serde types that deny unknown fields: an
//! unknown step or field, a missing or mistyped one, is a typed error
//! ([`Problem`], [`StepProblem`]) naming the step (its index, from 1) and
//! the field.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// A scenario that does not parse or names what does not exist.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("failed to read scenario {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML, or not the scenario's shape.
    #[error("scenario {path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the step and field.
        #[source]
        problem: Problem,
    },
}

impl ScenarioError {
    /// A machine-readable reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "ScenarioUnreadable",
            Self::Invalid { .. } => "ScenarioInvalid",
        }
    }
}

/// What is wrong with a scenario's text.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Not YAML, or a top-level field unknown or of the wrong type (serde
    /// names the field).
    #[error("{0}")]
    Shape(#[source] serde_yaml::Error),
    /// No `clusters`.
    #[error("`clusters` is missing (a list of names; the first is the primary)")]
    NoClusters,
    /// `clusters: []`.
    #[error("`clusters` is empty")]
    EmptyClusters,
    /// A cluster name that is not a DNS label.
    #[error("`clusters`: {0:?} is not a cluster name (a DNS label)")]
    ClusterName(String),
    /// A cluster listed twice.
    #[error("`clusters`: {0} is listed twice")]
    ClusterTwice(String),
    /// No `steps`.
    #[error("`steps` is missing (a list of steps)")]
    NoSteps,
    /// A CRD file.
    #[error("`crds`: {0}")]
    Crds(#[source] ObjectsError),
    /// One step (numbered from 1).
    #[error("step {step}: {problem}")]
    Step {
        /// Its index, from 1.
        step: usize,
        /// What is wrong with it.
        #[source]
        problem: StepProblem,
    },
}

/// The step kinds, as written.
const STEP_KINDS: &str = "apply, apply-status, delete, settle, cluster-down, cluster-up";

/// What is wrong with one step.
#[derive(Debug, thiserror::Error)]
pub enum StepProblem {
    /// Not a mapping with one key.
    #[error("a step is one of {STEP_KINDS} (a mapping with one key)")]
    NotAStep,
    /// A key that names no step.
    #[error("unknown step `{0}` (expected {STEP_KINDS})")]
    Unknown(String),
    /// A field unknown, missing or of the wrong type (serde names it).
    #[error("`{kind}`: {source}")]
    Field {
        /// The step's kind.
        kind: &'static str,
        /// serde's account, naming the field.
        #[source]
        source: serde_yaml::Error,
    },
    /// A field that must not be empty.
    #[error("`{kind}`: `{field}` is empty")]
    Empty {
        /// The step's kind.
        kind: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A cluster the scenario does not list.
    #[error("`{kind}`: `cluster` {cluster} is not one of the scenario's clusters ({known})")]
    UnknownCluster {
        /// The step's kind.
        kind: &'static str,
        /// The name given.
        cluster: String,
        /// The scenario's clusters, joined.
        known: String,
    },
    /// `cluster-down` of the primary.
    #[error(
        "`cluster-down`: {0} is the primary cluster (the plugin's own objects live there; take down another)"
    )]
    PrimaryDown(String),
    /// Both or neither of `file` and `object`.
    #[error("`{0}`: give exactly one of `file` and `object`")]
    ObjectsSource(&'static str),
    /// The objects of `file` or `object`.
    #[error("`{kind}`: `{field}`: {source}")]
    Objects {
        /// The step's kind.
        kind: &'static str,
        /// `file` or `object`.
        field: &'static str,
        /// Why.
        #[source]
        source: ObjectsError,
    },
}

/// Objects that do not load from a file or an inline `object`.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// The file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A document that is not YAML.
    #[error("{path}: not YAML: {source}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_yaml::Error,
    },
    /// A file without any object.
    #[error("{0} holds no object")]
    NoObject(PathBuf),
    /// An object without `apiVersion`, `kind` or `metadata.name`.
    #[error("{}an object without `{field}`", .path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Incomplete {
        /// The file (none: inline).
        path: Option<PathBuf>,
        /// The missing field.
        field: &'static str,
    },
}

/// One parsed scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file it came from.
    pub path: PathBuf,
    /// Cluster names; the first is the primary.
    pub clusters: Vec<String>,
    /// CRD manifests (JSON), from `crds`.
    pub crds: Vec<Value>,
    /// The steps in order.
    pub steps: Vec<Step>,
}

/// An object the scenario addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The cluster.
    pub cluster: String,
    /// `v1`, `apps/v1`, `job.lailin.xyz/v1`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Its namespace (none: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// One step.
#[derive(Clone, Debug)]
pub enum Step {
    /// Server-side apply objects (field manager `explore-scenario`, forced).
    Apply {
        /// The cluster.
        cluster: String,
        /// The objects (a file may hold several documents).
        objects: Vec<Value>,
    },
    /// Server-side apply of the status subresource.
    ApplyStatus {
        /// The cluster.
        cluster: String,
        /// The objects.
        objects: Vec<Value>,
    },
    /// Delete one object.
    Delete(Target),
    /// Run until nothing is queued and nothing changes.
    Settle,
    /// The cluster becomes unreachable.
    ClusterDown(String),
    /// The cluster is reachable again.
    ClusterUp(String),
}

impl Step {
    /// Whether the step changes what the clusters hold.
    #[must_use]
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Self::Apply { .. } | Self::ApplyStatus { .. } | Self::Delete(_)
        )
    }

    /// A short label for reports: `apply main`, `settle`, ...
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::Apply { cluster, objects } => format!("apply {cluster} ({})", names(objects)),
            Self::ApplyStatus { cluster, objects } => {
                format!("apply-status {cluster} ({})", names(objects))
            }
            Self::Delete(t) => format!(
                "delete {} {} {}{}",
                t.cluster,
                t.kind,
                t.namespace
                    .as_deref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default(),
                t.name
            ),
            Self::Settle => "settle".to_owned(),
            Self::ClusterDown(c) => format!("cluster-down {c}"),
            Self::ClusterUp(c) => format!("cluster-up {c}"),
        }
    }
}

fn names(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Scenario {
    /// Reads and checks `path`.
    ///
    /// # Errors
    /// When the file cannot be read, or a step or field is wrong (the
    /// message names the step, from 1, and the field).
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base)
            .map_err(|problem| ScenarioError::Invalid {
                path: path.to_path_buf(),
                problem,
            })
            .map(|mut s| {
                s.path = path.to_path_buf();
                s
            })
    }

    /// Parses scenario text; files are resolved against `base`.
    ///
    /// # Errors
    /// What is wrong, naming the step and field.
    pub fn parse(text: &str, base: &Path) -> Result<Self, Problem> {
        let top: Top = serde_yaml::from_str(text).map_err(Problem::Shape)?;
        let clusters = top.clusters.ok_or(Problem::NoClusters)?;
        if clusters.is_empty() {
            return Err(Problem::EmptyClusters);
        }
        for (i, c) in clusters.iter().enumerate() {
            if !rekon_rules::registration::is_dns_label(c) {
                return Err(Problem::ClusterName(c.clone()));
            }
            if clusters[..i].contains(c) {
                return Err(Problem::ClusterTwice(c.clone()));
            }
        }
        let mut crds = Vec::new();
        for entry in top.crds {
            match entry {
                CrdEntry::File(f) => {
                    crds.extend(read_objects(&base.join(f)).map_err(Problem::Crds)?);
                }
                CrdEntry::Inline(crd) => {
                    check_object(&crd, None).map_err(Problem::Crds)?;
                    crds.push(crd);
                }
            }
        }
        let raw_steps = top.steps.ok_or(Problem::NoSteps)?;
        let steps = raw_steps
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                parse_step(raw, base, &clusters).map_err(|problem| Problem::Step {
                    step: i + 1,
                    problem,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            path: PathBuf::new(),
            clusters,
            crds,
            steps,
        })
    }

    /// The primary cluster.
    #[must_use]
    pub fn primary(&self) -> &str {
        &self.clusters[0]
    }
}

/// The file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Top {
    clusters: Option<Vec<String>>,
    #[serde(default)]
    crds: Vec<CrdEntry>,
    steps: Option<Vec<serde_yaml::Value>>,
}

/// One entry of `crds`: a file, or the CRD itself.
#[derive(Deserialize)]
#[serde(untagged)]
enum CrdEntry {
    File(String),
    Inline(Value),
}

/// `apply` and `apply-status`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectsBody {
    cluster: String,
    file: Option<String>,
    object: Option<Value>,
}

/// `delete`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeleteBody {
    cluster: String,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

/// `cluster-down` and `cluster-up`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterBody {
    cluster: String,
}

/// `settle`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleBody {}

fn parse_step(
    raw: serde_yaml::Value,
    base: &Path,
    clusters: &[String],
) -> Result<Step, StepProblem> {
    let serde_yaml::Value::Mapping(map) = raw else {
        return Err(StepProblem::NotAStep);
    };
    let mut entries = map.into_iter();
    let (Some((serde_yaml::Value::String(key), body)), None) = (entries.next(), entries.next())
    else {
        return Err(StepProblem::NotAStep);
    };
    let Some(kind) = [
        "apply",
        "apply-status",
        "delete",
        "settle",
        "cluster-down",
        "cluster-up",
    ]
    .into_iter()
    .find(|k| *k == key) else {
        return Err(StepProblem::Unknown(key));
    };
    // `settle:` with nothing after it is `settle: {}`.
    let body = match body {
        serde_yaml::Value::Null => serde_yaml::Value::Mapping(serde_yaml::Mapping::new()),
        other => other,
    };
    let field = |source| StepProblem::Field { kind, source };
    let known = |cluster: String| -> Result<String, StepProblem> {
        if clusters.contains(&cluster) {
            Ok(cluster)
        } else {
            Err(StepProblem::UnknownCluster {
                kind,
                cluster,
                known: clusters.join(", "),
            })
        }
    };
    match kind {
        "apply" | "apply-status" => {
            let b: ObjectsBody = serde_yaml::from_value(body).map_err(field)?;
            let cluster = known(b.cluster)?;
            let objects = match (b.file, b.object) {
                (Some(f), None) => {
                    read_objects(&base.join(f)).map_err(|source| StepProblem::Objects {
                        kind,
                        field: "file",
                        source,
                    })?
                }
                (None, Some(o)) => {
                    check_object(&o, None).map_err(|source| StepProblem::Objects {
                        kind,
                        field: "object",
                        source,
                    })?;
                    vec![o]
                }
                _ => return Err(StepProblem::ObjectsSource(kind)),
            };
            Ok(if kind == "apply" {
                Step::Apply { cluster, objects }
            } else {
                Step::ApplyStatus { cluster, objects }
            })
        }
        "delete" => {
            let b: DeleteBody = serde_yaml::from_value(body).map_err(field)?;
            for (name, value) in [
                ("apiVersion", &b.api_version),
                ("kind", &b.kind),
                ("name", &b.name),
            ] {
                if value.is_empty() {
                    return Err(StepProblem::Empty { kind, field: name });
                }
            }
            Ok(Step::Delete(Target {
                cluster: known(b.cluster)?,
                api_version: b.api_version,
                kind: b.kind,
                namespace: b.namespace,
                name: b.name,
            }))
        }
        "settle" => {
            let SettleBody {} = serde_yaml::from_value(body).map_err(field)?;
            Ok(Step::Settle)
        }
        _ => {
            let b: ClusterBody = serde_yaml::from_value(body).map_err(field)?;
            let c = known(b.cluster)?;
            if kind == "cluster-up" {
                return Ok(Step::ClusterUp(c));
            }
            if c == clusters[0] {
                return Err(StepProblem::PrimaryDown(c));
            }
            Ok(Step::ClusterDown(c))
        }
    }
}

/// Every YAML or JSON document of `path` (empty documents skipped, a
/// `List`'s items), each checked to be an object with apiVersion, kind and
/// metadata.name (also `rekon plugin admit --objects`).
///
/// # Errors
/// A file that cannot be read, is not YAML, holds no or incomplete objects.
pub fn read_objects(path: &Path) -> Result<Vec<Value>, ObjectsError> {
    let text = std::fs::read_to_string(path).map_err(|source| ObjectsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = Deserialize::deserialize(doc).map_err(|source| ObjectsError::Yaml {
            path: path.to_path_buf(),
            source,
        })?;
        if v.is_null() {
            continue;
        }
        let items = if v["kind"] == "List" {
            v["items"].as_array().cloned().unwrap_or_default()
        } else {
            vec![v]
        };
        for item in items {
            check_object(&item, Some(path))?;
            out.push(item);
        }
    }
    if out.is_empty() {
        return Err(ObjectsError::NoObject(path.to_path_buf()));
    }
    Ok(out)
}

fn check_object(v: &Value, path: Option<&Path>) -> Result<(), ObjectsError> {
    for (field, value) in [
        ("apiVersion", &v["apiVersion"]),
        ("kind", &v["kind"]),
        ("metadata.name", &v["metadata"]["name"]),
    ] {
        if value.as_str().is_none_or(str::is_empty) {
            return Err(ObjectsError::Incomplete {
                path: path.map(Path::to_path_buf),
                field,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::parse(text, Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_scenario_with_every_step_parses() {
        let s = parse(
            "clusters: [main, edge]\nsteps:\n\
             - apply: {cluster: main, object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default}}}\n\
             - settle: {}\n\
             - cluster-down: {cluster: edge}\n\
             - delete: {cluster: main, apiVersion: v1, kind: ConfigMap, namespace: default, name: a}\n\
             - settle:\n\
             - cluster-up: {cluster: edge}\n",
        )
        .unwrap();
        assert_eq!(s.clusters, ["main", "edge"]);
        assert_eq!(s.steps.len(), 6);
        assert!(s.steps[0].mutates());
        assert!(matches!(s.steps[4], Step::Settle));
    }

    #[test]
    fn errors_name_the_step_and_the_field() {
        let e =
            parse("clusters: [main]\nsteps:\n- settle: {}\n- apply: {cluster: nope, object: {}}\n")
                .unwrap_err();
        assert!(e.starts_with("step 2: `apply`: `cluster` nope"), "{e}");
        let e = parse("clusters: [main]\nsteps:\n- settle: {wait: 3}\n").unwrap_err();
        assert!(e.contains("step 1: `settle`: unknown field `wait`"), "{e}");
        let e = parse("clusters: [main]\nsteps:\n- sleep: {}\n").unwrap_err();
        assert!(e.contains("step 1: unknown step `sleep`"), "{e}");
        let e = parse("clusters: [main]\nsteps:\n- apply: {cluster: main, object: {kind: X}}\n")
            .unwrap_err();
        assert!(e.contains("without `apiVersion`"), "{e}");
        let e =
            parse("clusters: [main, edge]\nsteps:\n- cluster-down: {cluster: main}\n").unwrap_err();
        assert!(e.contains("primary cluster"), "{e}");
        let e = parse("steps: []\n").unwrap_err();
        assert!(e.contains("`clusters` is missing"), "{e}");
        let e = parse("clusters: [main]\nstep: []\n").unwrap_err();
        assert!(e.contains("unknown field `step`"), "{e}");
        let e = parse("clusters: [main, Main]\nsteps: []\n").unwrap_err();
        assert!(e.contains("\"Main\" is not a cluster name"), "{e}");
    }

    #[test]
    fn inline_crds_parse() {
        let s = parse(
            "clusters: [main]\n\
             crds: [{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: ws.x.io}}]\n\
             steps: []\n",
        )
        .unwrap();
        assert_eq!(s.crds[0]["metadata"]["name"], "ws.x.io");
        let e = parse("clusters: [main]\ncrds: [{kind: X}]\nsteps: []\n").unwrap_err();
        assert!(e.contains("`crds`: an object without `apiVersion`"), "{e}");
    }

    #[test]
    fn errors_are_typed() {
        let e = Scenario::parse(
            "clusters: [main]\nsteps:\n- settle:\n- delete: {cluster: main, kind: ConfigMap, name: x}\n",
            Path::new("."),
        )
        .unwrap_err();
        let Problem::Step {
            step: 2,
            problem: StepProblem::Field { kind: "delete", .. },
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(
            e.to_string(),
            "step 2: `delete`: missing field `apiVersion`"
        );
        let e = Scenario::parse(
            "clusters: [main]\nsteps:\n- apply: {cluster: main, file: nope.yaml}\n",
            Path::new("/nonexistent"),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Problem::Step {
                    step: 1,
                    problem: StepProblem::Objects {
                        field: "file",
                        source: ObjectsError::Read { .. },
                        ..
                    }
                }
            ),
            "{e:?}"
        );
    }
}

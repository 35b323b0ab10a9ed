//! The scenario file: clusters, CRDs and the steps of a short workload.
//!
//! ```yaml
//! clusters: [main, edge]          # the first is the primary cluster
//! crds: [crds/test.yaml]          # optional, paths relative to the file
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
//! Parsing is strict: an unknown step or field is an error naming the step
//! (its index, from 1) and the field.

use std::path::{Path, PathBuf};

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
    #[error("scenario {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the step and field.
        message: String,
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
            .map_err(|message| ScenarioError::Invalid {
                path: path.to_path_buf(),
                message,
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
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        let doc: Value = serde_yaml::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
        let Some(top) = doc.as_object() else {
            return Err("expected a mapping with `clusters` and `steps`".to_owned());
        };
        for key in top.keys() {
            if !matches!(key.as_str(), "clusters" | "crds" | "steps") {
                return Err(format!(
                    "unknown field `{key}` (expected clusters, crds, steps)"
                ));
            }
        }
        let clusters: Vec<String> = match top.get("clusters") {
            None => {
                return Err(
                    "`clusters` is missing (a list of names; the first is the primary)".to_owned(),
                );
            }
            Some(Value::Array(items)) => items
                .iter()
                .map(|c| {
                    c.as_str()
                        .filter(|s| rekon_rules::registration::is_dns_label(s))
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            format!("`clusters`: {c} is not a cluster name (a DNS label)")
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(format!("`clusters` must be a list of names, not {other}")),
        };
        if clusters.is_empty() {
            return Err("`clusters` is empty".to_owned());
        }
        for (i, c) in clusters.iter().enumerate() {
            if clusters[..i].contains(c) {
                return Err(format!("`clusters`: {c} is listed twice"));
            }
        }
        let mut crds = Vec::new();
        if let Some(list) = top.get("crds") {
            let Some(list) = list.as_array() else {
                return Err("`crds` must be a list of file paths".to_owned());
            };
            for f in list {
                let Some(f) = f.as_str() else {
                    return Err(format!("`crds`: {f} is not a file path"));
                };
                crds.extend(read_objects(&base.join(f)).map_err(|e| format!("`crds`: {e}"))?);
            }
        }
        let Some(Value::Array(raw_steps)) = top.get("steps") else {
            return Err("`steps` is missing (a list of steps)".to_owned());
        };
        let mut steps = Vec::new();
        for (i, raw) in raw_steps.iter().enumerate() {
            let n = i + 1;
            let step = parse_step(raw, base, &clusters).map_err(|e| format!("step {n}: {e}"))?;
            steps.push(step);
        }
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

fn parse_step(raw: &Value, base: &Path, clusters: &[String]) -> Result<Step, String> {
    let Some(map) = raw.as_object().filter(|m| m.len() == 1) else {
        return Err("a step is one of apply, apply-status, delete, settle, cluster-down, cluster-up (a mapping with one key)".to_owned());
    };
    let (kind, body) = map.iter().next().ok_or("empty step")?;
    let empty = serde_json::Map::new();
    let body = match body {
        Value::Object(m) => m,
        Value::Null => &empty,
        other => return Err(format!("`{kind}` takes a mapping, not {other}")),
    };
    let allow = |fields: &[&str]| -> Result<(), String> {
        for k in body.keys() {
            if !fields.contains(&k.as_str()) {
                return Err(format!(
                    "`{kind}`: unknown field `{k}` (expected {})",
                    fields.join(", ")
                ));
            }
        }
        Ok(())
    };
    let cluster = |field: &str| -> Result<String, String> {
        let Some(c) = body.get(field).and_then(Value::as_str) else {
            return Err(format!("`{kind}`: `{field}` is missing"));
        };
        if !clusters.iter().any(|x| x == c) {
            return Err(format!(
                "`{kind}`: `{field}` {c} is not one of the scenario's clusters ({})",
                clusters.join(", ")
            ));
        }
        Ok(c.to_owned())
    };
    let objects = || -> Result<Vec<Value>, String> {
        match (body.get("file"), body.get("object")) {
            (Some(f), None) => {
                let f = f
                    .as_str()
                    .ok_or_else(|| format!("`{kind}`: `file` must be a path"))?;
                read_objects(&base.join(f)).map_err(|e| format!("`{kind}`: `file`: {e}"))
            }
            (None, Some(o)) => {
                check_object(o).map_err(|e| format!("`{kind}`: `object`: {e}"))?;
                Ok(vec![o.clone()])
            }
            _ => Err(format!("`{kind}`: give exactly one of `file` and `object`")),
        }
    };
    match kind.as_str() {
        "apply" => {
            allow(&["cluster", "file", "object"])?;
            Ok(Step::Apply {
                cluster: cluster("cluster")?,
                objects: objects()?,
            })
        }
        "apply-status" => {
            allow(&["cluster", "file", "object"])?;
            Ok(Step::ApplyStatus {
                cluster: cluster("cluster")?,
                objects: objects()?,
            })
        }
        "delete" => {
            allow(&["cluster", "apiVersion", "kind", "namespace", "name"])?;
            let field = |f: &str| -> Result<String, String> {
                body.get(f)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`delete`: `{f}` is missing"))
            };
            Ok(Step::Delete(Target {
                cluster: cluster("cluster")?,
                api_version: field("apiVersion")?,
                kind: field("kind")?,
                namespace: body
                    .get("namespace")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                name: field("name")?,
            }))
        }
        "settle" => {
            allow(&[])?;
            Ok(Step::Settle)
        }
        "cluster-down" => {
            allow(&["cluster"])?;
            let c = cluster("cluster")?;
            if c == clusters[0] {
                return Err(format!(
                    "`cluster-down`: {c} is the primary cluster (the plugin's own objects live there; take down another)"
                ));
            }
            Ok(Step::ClusterDown(c))
        }
        "cluster-up" => {
            allow(&["cluster"])?;
            Ok(Step::ClusterUp(cluster("cluster")?))
        }
        other => Err(format!(
            "unknown step `{other}` (expected apply, apply-status, delete, settle, cluster-down, cluster-up)"
        )),
    }
}

/// Every YAML or JSON document of `path` (empty documents skipped), each
/// checked to be an object with apiVersion, kind and metadata.name.
fn read_objects(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("failed to read {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
        if v.is_null() {
            continue;
        }
        if v["kind"] == "List" {
            for item in v["items"].as_array().cloned().unwrap_or_default() {
                check_object(&item).map_err(|e| format!("{}: {e}", path.display()))?;
                out.push(item);
            }
            continue;
        }
        check_object(&v).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(v);
    }
    if out.is_empty() {
        return Err(format!("{} holds no object", path.display()));
    }
    Ok(out)
}

fn check_object(v: &Value) -> Result<(), String> {
    for (field, value) in [
        ("apiVersion", &v["apiVersion"]),
        ("kind", &v["kind"]),
        ("metadata.name", &v["metadata"]["name"]),
    ] {
        if value.as_str().is_none_or(str::is_empty) {
            return Err(format!("an object without `{field}`"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::parse(text, Path::new("."))
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
    }
}

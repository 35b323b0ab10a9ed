//! Server-side printing (`meta.k8s.io` Table): the columns `kubectl get`
//! shows for the built-in kinds kube-sim serves and a CRD's
//! `additionalPrinterColumns`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// Column definitions and a row builder for one resource.
pub(crate) struct Printer {
    columns: Vec<Value>,
    cells: Vec<Cell>,
}

enum Cell {
    Name,
    Age,
    Path(String),
    NodeStatus,
    NodeRoles,
    PodReady,
    PodRestarts,
    JobStatus,
    JobCompletions,
    DeployReady,
    DataCount,
    /// An integer at a path, 0 when absent.
    Int(&'static str),
    /// A string at a path, `""` when absent.
    Text(&'static str),
    /// `a,b` of the names (or images) of the containers under a pod spec path.
    Containers(&'static str, &'static str),
    /// `metav1.FormatLabelSelector` of the LabelSelector at a path.
    Selector(&'static str),
    /// `k=v,...` of a map at a path (`<none>` when empty).
    MapSelector(&'static str),
    PodReadinessGates,
    ServiceClusterIp,
    ServiceExternalIp,
    ServicePorts,
    JobDuration,
    EventLastSeen,
    EventFirstSeen,
    EventObject,
    EventSource,
    EventCount,
    /// Age since a timestamp at a path (`<none>` when absent).
    Since(&'static str),
    /// `ready/desired` from two integer paths (desired defaults to 1).
    Ratio(&'static str, &'static str),
    NodeAddress(&'static str),
    HpaReference,
    HpaTargets,
    /// An integer at a path, `<unset>` when absent.
    IntOrUnset(&'static str),
    /// A value at a path, `N/A` when absent.
    OrNa(&'static str),
    /// The RFC 3339 creation time (CREATED AT columns).
    CreatedAt,
    /// `Kind/name` of a binding's roleRef.
    RoleRef,
    /// Subjects of a binding of one kind (`User`, `Group`, `ServiceAccount`).
    Subjects(&'static str),
    IngressClass,
    IngressHosts,
    IngressAddress,
    IngressPorts,
    /// `RWO,ROX` of access modes at a path.
    AccessModes(&'static str),
    /// `<none>` when the string at a path is empty or absent.
    TextOrNone(&'static str),
    PvClaim,
    EndpointsList,
    /// A boolean at a path, false when absent.
    Bool(&'static str),
}

fn wide(name: &str) -> Value {
    col(name, "string", "", 1)
}

fn s(name: &str) -> Value {
    col(name, "string", "", 0)
}

fn col(name: &str, ty: &str, format: &str, priority: i64) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub(crate) fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rem = s % 60;
        return if rem == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rem}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rem = m % 60;
        return if rem == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rem}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if h < 24 * 8 {
        let rem = h % 24;
        return if rem == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rem}h")
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{d}d");
    }
    let y = d / 365;
    if h < 24 * 365 * 8 {
        let rem = d % 365;
        return if rem == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{rem}d")
        };
    }
    format!("{y}y")
}

fn age(obj: &Value) -> String {
    obj.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| human_duration((Utc::now() - t.with_timezone(&Utc)).num_seconds()))
        .unwrap_or_else(|| "<unknown>".into())
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `.a[0].b`,
/// `.a[?(@.type=="Ready")].status`.
fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(['"', '\'']);
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(want))?;
            } else {
                cur = cur.get(inner.parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

fn cell_text(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::String("<none>".into()),
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
        Some(other) => Value::String(other.to_string()),
    }
}

/// `metav1.FormatLabelSelector`: `<none>` for an empty selector.
fn format_label_selector(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match e["operator"].as_str() {
            Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
            Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
            Some("Exists") => parts.push(key.to_string()),
            Some("DoesNotExist") => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// The EXTERNAL-IP column of a Service (`getServiceExternalIP`).
fn service_external_ip(svc: &Value) -> String {
    let external: Vec<&str> = svc
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match svc.pointer("/spec/type").and_then(Value::as_str) {
        Some("ExternalName") => svc
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Some("LoadBalancer") => {
            let mut ips: Vec<String> = svc
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                .map(str::to_string)
                .collect();
            ips.extend(external.iter().map(|s| (*s).to_string()));
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        _ if !external.is_empty() => external.join(","),
        _ => "<none>".into(),
    }
}

/// The TARGETS column of a HorizontalPodAutoscaler (v2, or v1's
/// `targetCPUUtilizationPercentage`): `cpu: <unknown>/80%`.
fn hpa_targets(hpa: &Value) -> String {
    if let Some(t) = hpa
        .pointer("/spec/targetCPUUtilizationPercentage")
        .and_then(Value::as_i64)
    {
        let cur = hpa
            .pointer("/status/currentCPUUtilizationPercentage")
            .and_then(Value::as_i64)
            .map_or("<unknown>".to_string(), |c| format!("{c}%"));
        return format!("cpu: {cur}/{t}%");
    }
    let current = hpa
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let parts: Vec<String> = hpa
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|m| {
            let ty = m["type"].as_str().unwrap_or_default();
            let key = match ty {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                _ => "external",
            };
            let spec = &m[key];
            let name = spec["name"]
                .as_str()
                .or(spec.pointer("/metric/name").and_then(Value::as_str))
                .unwrap_or("<unknown>");
            let cur = current
                .iter()
                .find(|c| c["type"] == ty && (c[key]["name"] == spec["name"]))
                .map(|c| &c[key]["current"]);
            let target = &spec["target"];
            if let Some(u) = target["averageUtilization"].as_i64() {
                let c = cur
                    .and_then(|c| c["averageUtilization"].as_i64())
                    .map_or("<unknown>".to_string(), |c| format!("{c}%"));
                format!("{name}: {c}/{u}%")
            } else {
                let t = target["averageValue"]
                    .as_str()
                    .or(target["value"].as_str())
                    .unwrap_or("<unknown>");
                let c = cur
                    .and_then(|c| c["averageValue"].as_str().or(c["value"].as_str()))
                    .unwrap_or("<unknown>");
                format!("{name}: {c}/{t}")
            }
        })
        .collect();
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(", ")
    }
}

/// (first seen, last seen) of a core v1 Event (`printEvent`).
fn event_times(ev: &Value) -> (String, String) {
    let since = |p: &str| {
        ev.pointer(p)
            .and_then(Value::as_str)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| human_duration((Utc::now() - t.with_timezone(&Utc)).num_seconds()))
    };
    let unknown = || "<unknown>".to_string();
    let first = since("/firstTimestamp")
        .or_else(|| since("/eventTime"))
        .unwrap_or_else(unknown);
    let last = since("/series/lastObservedTime")
        .or_else(|| since("/lastTimestamp"))
        .unwrap_or_else(|| first.clone());
    (first, last)
}

impl Printer {
    /// The printer of a resource.
    pub(crate) fn for_resource(res: &ResourceInfo, crd_columns: Option<&Value>) -> Self {
        use Cell::*;
        let name = col("Name", "string", "name", 0);
        let agec = col("Age", "date", "", 0);
        let (columns, cells) = match (res.builtin, res.kind.as_str()) {
            (true, "Node") => (
                vec![
                    name,
                    col("Status", "string", "", 0),
                    col("Roles", "string", "", 0),
                    agec,
                    col("Version", "string", "", 0),
                    wide("Internal-IP"),
                    wide("External-IP"),
                    wide("OS-Image"),
                    wide("Kernel-Version"),
                    wide("Container-Runtime"),
                ],
                vec![
                    Name,
                    NodeStatus,
                    NodeRoles,
                    Age,
                    Path(".status.nodeInfo.kubeletVersion".into()),
                    NodeAddress("InternalIP"),
                    NodeAddress("ExternalIP"),
                    Path(".status.nodeInfo.osImage".into()),
                    Path(".status.nodeInfo.kernelVersion".into()),
                    Path(".status.nodeInfo.containerRuntimeVersion".into()),
                ],
            ),
            (true, "Namespace") => (
                vec![name, col("Status", "string", "", 0), agec],
                vec![Name, Path(".status.phase".into()), Age],
            ),
            // The columns of k8s.io/kubernetes/pkg/printers/internalversion
            // (the server always prints the wide cells; kubectl hides
            // priority-1 columns without `-o wide`).
            (true, "Pod") => (
                vec![
                    name,
                    s("Ready"),
                    s("Status"),
                    col("Restarts", "string", "", 0),
                    agec,
                    wide("IP"),
                    wide("Node"),
                    wide("Nominated Node"),
                    wide("Readiness Gates"),
                ],
                vec![
                    Name,
                    PodReady,
                    Path(".status.phase".into()),
                    PodRestarts,
                    Age,
                    Path(".status.podIP".into()),
                    Path(".spec.nodeName".into()),
                    Path(".status.nominatedNodeName".into()),
                    PodReadinessGates,
                ],
            ),
            (true, "Job") => (
                vec![
                    name,
                    s("Status"),
                    s("Completions"),
                    s("Duration"),
                    agec,
                    wide("Containers"),
                    wide("Images"),
                    wide("Selector"),
                ],
                vec![
                    Name,
                    JobStatus,
                    JobCompletions,
                    JobDuration,
                    Age,
                    Containers("/spec/template/spec/containers", "name"),
                    Containers("/spec/template/spec/containers", "image"),
                    Selector("/spec/selector"),
                ],
            ),
            (true, "CronJob") => (
                vec![
                    name,
                    s("Schedule"),
                    s("Timezone"),
                    col("Suspend", "boolean", "", 0),
                    col("Active", "integer", "", 0),
                    s("Last Schedule"),
                    agec,
                    wide("Containers"),
                    wide("Images"),
                    wide("Selector"),
                ],
                vec![
                    Name,
                    Text("/spec/schedule"),
                    Path(".spec.timeZone".into()),
                    Path(".spec.suspend".into()),
                    Int("/status/active"),
                    Since("/status/lastScheduleTime"),
                    Age,
                    Containers("/spec/jobTemplate/spec/template/spec/containers", "name"),
                    Containers("/spec/jobTemplate/spec/template/spec/containers", "image"),
                    Selector("/spec/jobTemplate/spec/selector"),
                ],
            ),
            (true, "Deployment") => (
                vec![
                    name,
                    s("Ready"),
                    col("Up-to-date", "integer", "", 0),
                    col("Available", "integer", "", 0),
                    agec,
                    wide("Containers"),
                    wide("Images"),
                    wide("Selector"),
                ],
                vec![
                    Name,
                    DeployReady,
                    Int("/status/updatedReplicas"),
                    Int("/status/availableReplicas"),
                    Age,
                    Containers("/spec/template/spec/containers", "name"),
                    Containers("/spec/template/spec/containers", "image"),
                    Selector("/spec/selector"),
                ],
            ),
            (true, "ReplicaSet" | "ReplicationController") => (
                vec![
                    name,
                    col("Desired", "integer", "", 0),
                    col("Current", "integer", "", 0),
                    col("Ready", "integer", "", 0),
                    agec,
                    wide("Containers"),
                    wide("Images"),
                    wide("Selector"),
                ],
                vec![
                    Name,
                    Int("/spec/replicas"),
                    Int("/status/replicas"),
                    Int("/status/readyReplicas"),
                    Age,
                    Containers("/spec/template/spec/containers", "name"),
                    Containers("/spec/template/spec/containers", "image"),
                    if res.kind == "ReplicaSet" {
                        Selector("/spec/selector")
                    } else {
                        MapSelector("/spec/selector")
                    },
                ],
            ),
            (true, "StatefulSet") => (
                vec![name, s("Ready"), agec, wide("Containers"), wide("Images")],
                vec![
                    Name,
                    Ratio("/status/readyReplicas", "/spec/replicas"),
                    Age,
                    Containers("/spec/template/spec/containers", "name"),
                    Containers("/spec/template/spec/containers", "image"),
                ],
            ),
            (true, "DaemonSet") => (
                vec![
                    name,
                    col("Desired", "integer", "", 0),
                    col("Current", "integer", "", 0),
                    col("Ready", "integer", "", 0),
                    col("Up-to-date", "integer", "", 0),
                    col("Available", "integer", "", 0),
                    s("Node Selector"),
                    agec,
                    wide("Containers"),
                    wide("Images"),
                    wide("Selector"),
                ],
                vec![
                    Name,
                    Int("/status/desiredNumberScheduled"),
                    Int("/status/currentNumberScheduled"),
                    Int("/status/numberReady"),
                    Int("/status/updatedNumberScheduled"),
                    Int("/status/numberAvailable"),
                    MapSelector("/spec/template/spec/nodeSelector"),
                    Age,
                    Containers("/spec/template/spec/containers", "name"),
                    Containers("/spec/template/spec/containers", "image"),
                    Selector("/spec/selector"),
                ],
            ),
            (true, "Service") => (
                vec![
                    name,
                    s("Type"),
                    s("Cluster-IP"),
                    s("External-IP"),
                    s("Port(s)"),
                    agec,
                    wide("Selector"),
                ],
                vec![
                    Name,
                    Text("/spec/type"),
                    ServiceClusterIp,
                    ServiceExternalIp,
                    ServicePorts,
                    Age,
                    MapSelector("/spec/selector"),
                ],
            ),
            (true, "Event") => (
                vec![
                    s("Last Seen"),
                    s("Type"),
                    s("Reason"),
                    s("Object"),
                    wide("Subobject"),
                    wide("Source"),
                    s("Message"),
                    wide("First Seen"),
                    wide("Count"),
                    col("Name", "string", "name", 1),
                ],
                vec![
                    EventLastSeen,
                    Text("/type"),
                    Text("/reason"),
                    EventObject,
                    Text("/involvedObject/fieldPath"),
                    EventSource,
                    Text("/message"),
                    EventFirstSeen,
                    EventCount,
                    Name,
                ],
            ),
            (true, "HorizontalPodAutoscaler") => (
                vec![
                    name,
                    s("Reference"),
                    s("Targets"),
                    s("MinPods"),
                    col("MaxPods", "integer", "", 0),
                    col("Replicas", "integer", "", 0),
                    agec,
                ],
                vec![
                    Name,
                    HpaReference,
                    HpaTargets,
                    IntOrUnset("/spec/minReplicas"),
                    Int("/spec/maxReplicas"),
                    Int("/status/currentReplicas"),
                    Age,
                ],
            ),
            (true, "Role" | "ClusterRole" | "CustomResourceDefinition") => (
                vec![name, col("Created At", "date", "", 0)],
                vec![Name, CreatedAt],
            ),
            (true, "RoleBinding" | "ClusterRoleBinding") => (
                vec![
                    name,
                    s("Role"),
                    agec,
                    wide("Users"),
                    wide("Groups"),
                    wide("ServiceAccounts"),
                ],
                vec![
                    Name,
                    RoleRef,
                    Age,
                    Subjects("User"),
                    Subjects("Group"),
                    Subjects("ServiceAccount"),
                ],
            ),
            (true, "PodDisruptionBudget") => (
                vec![
                    name,
                    s("Min Available"),
                    s("Max Unavailable"),
                    col("Allowed Disruptions", "integer", "", 0),
                    agec,
                ],
                vec![
                    Name,
                    OrNa("/spec/minAvailable"),
                    OrNa("/spec/maxUnavailable"),
                    Int("/status/disruptionsAllowed"),
                    Age,
                ],
            ),
            (true, "Ingress") => (
                vec![name, s("Class"), s("Hosts"), s("Address"), s("Ports"), agec],
                vec![
                    Name,
                    IngressClass,
                    IngressHosts,
                    IngressAddress,
                    IngressPorts,
                    Age,
                ],
            ),
            (true, "PersistentVolumeClaim") => (
                vec![
                    name,
                    s("Status"),
                    s("Volume"),
                    s("Capacity"),
                    s("Access Modes"),
                    s("StorageClass"),
                    s("VolumeAttributesClass"),
                    agec,
                    wide("VolumeMode"),
                ],
                vec![
                    Name,
                    Text("/status/phase"),
                    Text("/spec/volumeName"),
                    Text("/status/capacity/storage"),
                    AccessModes("/status/accessModes"),
                    Text("/spec/storageClassName"),
                    TextOrNone("/spec/volumeAttributesClassName"),
                    Age,
                    Text("/spec/volumeMode"),
                ],
            ),
            (true, "PersistentVolume") => (
                vec![
                    name,
                    s("Capacity"),
                    s("Access Modes"),
                    s("Reclaim Policy"),
                    s("Status"),
                    s("Claim"),
                    s("StorageClass"),
                    s("VolumeAttributesClass"),
                    s("Reason"),
                    agec,
                    wide("VolumeMode"),
                ],
                vec![
                    Name,
                    Text("/spec/capacity/storage"),
                    AccessModes("/spec/accessModes"),
                    Text("/spec/persistentVolumeReclaimPolicy"),
                    Text("/status/phase"),
                    PvClaim,
                    Text("/spec/storageClassName"),
                    TextOrNone("/spec/volumeAttributesClassName"),
                    Text("/status/reason"),
                    Age,
                    Text("/spec/volumeMode"),
                ],
            ),
            (true, "Endpoints") => (
                vec![name, s("Endpoints"), agec],
                vec![Name, EndpointsList, Age],
            ),
            (true, "Lease") => (
                vec![name, s("Holder"), agec],
                vec![Name, Text("/spec/holderIdentity"), Age],
            ),
            (true, "NetworkPolicy") => (
                vec![name, s("Pod-Selector"), agec],
                vec![Name, Selector("/spec/podSelector"), Age],
            ),
            (true, "PriorityClass") => (
                vec![
                    name,
                    col("Value", "integer", "", 0),
                    col("Global-Default", "boolean", "", 0),
                    agec,
                    s("PreemptionPolicy"),
                ],
                vec![
                    Name,
                    Int("/value"),
                    Bool("/globalDefault"),
                    Age,
                    Text("/preemptionPolicy"),
                ],
            ),
            (true, "ServiceAccount") => (
                vec![name, col("Secrets", "integer", "", 0), agec],
                vec![Name, Int("/secrets"), Age],
            ),
            (true, "ConfigMap") => (
                vec![name, col("Data", "integer", "", 0), agec],
                vec![Name, DataCount, Age],
            ),
            (true, "Secret") => (
                vec![
                    name,
                    col("Type", "string", "", 0),
                    col("Data", "integer", "", 0),
                    agec,
                ],
                vec![Name, Path(".type".into()), DataCount, Age],
            ),
            (false, _) => {
                let mut columns = vec![name];
                let mut cells = vec![Name];
                let mut has_age = false;
                for c in crd_columns.and_then(Value::as_array).into_iter().flatten() {
                    let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
                    let path = c
                        .get("jsonPath")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if cname.is_empty() || path.is_empty() {
                        continue;
                    }
                    let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
                    let prio = c.get("priority").and_then(Value::as_i64).unwrap_or(0);
                    columns.push(col(
                        cname,
                        ty,
                        c.get("format").and_then(Value::as_str).unwrap_or(""),
                        prio,
                    ));
                    if path == ".metadata.creationTimestamp" {
                        has_age = true;
                        cells.push(Age);
                    } else {
                        cells.push(Path(path.to_string()));
                    }
                }
                if !has_age {
                    columns.push(agec);
                    cells.push(Age);
                }
                (columns, cells)
            }
            _ => (vec![name, agec], vec![Name, Age]),
        };
        Self { columns, cells }
    }

    fn row_cells(&self, obj: &Value) -> Vec<Value> {
        self.cells
            .iter()
            .map(|c| match c {
                Cell::Name => cell_text(obj.pointer("/metadata/name")),
                Cell::Age => Value::String(age(obj)),
                Cell::Path(p) => cell_text(json_path(obj, p)),
                Cell::NodeStatus => {
                    let ready = obj
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .and_then(|a| a.iter().find(|c| c["type"] == "Ready"))
                        .and_then(|c| c.get("status"))
                        .and_then(Value::as_str);
                    let mut s = match ready {
                        Some("True") => "Ready".to_string(),
                        Some(_) => "NotReady".to_string(),
                        None => "Unknown".to_string(),
                    };
                    if obj.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                        s.push_str(",SchedulingDisabled");
                    }
                    Value::String(s)
                }
                Cell::NodeRoles => {
                    let roles: Vec<&str> = obj
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .map(|l| {
                            l.keys()
                                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                                .filter(|r| !r.is_empty())
                                .collect()
                        })
                        .unwrap_or_default();
                    Value::String(if roles.is_empty() {
                        "<none>".into()
                    } else {
                        roles.join(",")
                    })
                }
                Cell::PodReady => {
                    let total = obj
                        .pointer("/spec/containers")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    let ready = obj
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .map_or(0, |a| a.iter().filter(|c| c["ready"] == true).count());
                    Value::String(format!("{ready}/{total}"))
                }
                Cell::PodRestarts => {
                    let n: i64 = obj
                        .pointer("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .map_or(0, |a| {
                            a.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
                        });
                    json!(n)
                }
                Cell::JobStatus => {
                    let conds = obj.pointer("/status/conditions").and_then(Value::as_array);
                    let has = |t: &str| {
                        conds.is_some_and(|a| {
                            a.iter().any(|c| c["type"] == t && c["status"] == "True")
                        })
                    };
                    Value::String(
                        if has("Complete") {
                            "Complete"
                        } else if has("Failed") {
                            "Failed"
                        } else if obj.pointer("/spec/suspend").and_then(Value::as_bool)
                            == Some(true)
                        {
                            "Suspended"
                        } else {
                            "Running"
                        }
                        .into(),
                    )
                }
                Cell::JobCompletions => {
                    let done = obj
                        .pointer("/status/succeeded")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    let want = obj
                        .pointer("/spec/completions")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    Value::String(format!("{done}/{want}"))
                }
                Cell::DeployReady => {
                    let ready = obj
                        .pointer("/status/readyReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    let want = obj
                        .pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    Value::String(format!("{ready}/{want}"))
                }
                Cell::Int(p) => {
                    let v = obj.pointer(p);
                    json!(
                        v.and_then(Value::as_i64)
                            .or_else(|| v.and_then(Value::as_array).map(|a| a.len() as i64))
                            .unwrap_or(0)
                    )
                }
                Cell::Text(p) => json!(obj.pointer(p).and_then(Value::as_str).unwrap_or("")),
                Cell::Containers(p, field) => {
                    let names: Vec<&str> = obj
                        .pointer(p)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get(*field).and_then(Value::as_str))
                        .collect();
                    json!(names.join(","))
                }
                Cell::Selector(p) => json!(
                    obj.pointer(p)
                        .map(format_label_selector)
                        .unwrap_or_else(|| "<none>".into())
                ),
                Cell::MapSelector(p) => {
                    let m = obj.pointer(p).and_then(Value::as_object);
                    json!(match m {
                        Some(m) if !m.is_empty() => m
                            .iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(","),
                        _ => "<none>".to_string(),
                    })
                }
                Cell::PodReadinessGates => {
                    let gates = obj
                        .pointer("/spec/readinessGates")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    if gates == 0 {
                        json!("<none>")
                    } else {
                        let conds = obj.pointer("/status/conditions").and_then(Value::as_array);
                        let ok = obj
                            .pointer("/spec/readinessGates")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter(|g| {
                                conds.is_some_and(|a| {
                                    a.iter().any(|c| {
                                        c["type"] == g["conditionType"] && c["status"] == "True"
                                    })
                                })
                            })
                            .count();
                        json!(format!("{ok}/{gates}"))
                    }
                }
                Cell::ServiceClusterIp => json!(
                    obj.pointer("/spec/clusterIP")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or("<none>")
                ),
                Cell::ServiceExternalIp => json!(service_external_ip(obj)),
                Cell::ServicePorts => {
                    let ports: Vec<String> = obj
                        .pointer("/spec/ports")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|p| {
                            let port = p["port"].as_i64().unwrap_or(0);
                            let proto = p["protocol"].as_str().unwrap_or("TCP");
                            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                                Some(np) => format!("{port}:{np}/{proto}"),
                                None => format!("{port}/{proto}"),
                            }
                        })
                        .collect();
                    json!(if ports.is_empty() {
                        "<none>".to_string()
                    } else {
                        ports.join(",")
                    })
                }
                Cell::JobDuration => {
                    let t = |p: &str| {
                        obj.pointer(p)
                            .and_then(Value::as_str)
                            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| t.with_timezone(&Utc))
                    };
                    json!(
                        match (t("/status/startTime"), t("/status/completionTime")) {
                            (None, _) => String::new(),
                            (Some(s), Some(c)) => human_duration((c - s).num_seconds()),
                            (Some(s), None) => human_duration((Utc::now() - s).num_seconds()),
                        }
                    )
                }
                Cell::EventLastSeen => json!(event_times(obj).1),
                Cell::EventFirstSeen => json!(event_times(obj).0),
                Cell::EventObject => {
                    let kind = obj
                        .pointer("/involvedObject/kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_lowercase();
                    json!(
                        match obj.pointer("/involvedObject/name").and_then(Value::as_str) {
                            Some(n) if !n.is_empty() => format!("{kind}/{n}"),
                            _ => kind,
                        }
                    )
                }
                Cell::EventSource => {
                    let comp = obj
                        .pointer("/source/component")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .or_else(|| obj.get("reportingComponent").and_then(Value::as_str))
                        .unwrap_or_default();
                    let host = obj
                        .pointer("/source/host")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .or_else(|| obj.get("reportingInstance").and_then(Value::as_str))
                        .unwrap_or_default();
                    json!(if host.is_empty() {
                        comp.to_string()
                    } else {
                        format!("{comp}, {host}")
                    })
                }
                Cell::EventCount => {
                    let n = obj
                        .pointer("/series/count")
                        .and_then(Value::as_i64)
                        .or_else(|| obj.get("count").and_then(Value::as_i64))
                        .filter(|n| *n > 0)
                        .unwrap_or(1);
                    json!(n)
                }
                Cell::Since(p) => json!(
                    obj.pointer(p)
                        .and_then(Value::as_str)
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map(|t| human_duration((Utc::now() - t.with_timezone(&Utc)).num_seconds()))
                        .unwrap_or_else(|| "<none>".into())
                ),
                Cell::Ratio(ready, want) => {
                    let r = obj.pointer(ready).and_then(Value::as_i64).unwrap_or(0);
                    let w = obj.pointer(want).and_then(Value::as_i64).unwrap_or(1);
                    json!(format!("{r}/{w}"))
                }
                Cell::NodeAddress(ty) => json!(
                    obj.pointer("/status/addresses")
                        .and_then(Value::as_array)
                        .and_then(|a| a.iter().find(|x| x["type"] == *ty))
                        .and_then(|x| x["address"].as_str())
                        .unwrap_or("<none>")
                ),
                Cell::HpaReference => json!(format!(
                    "{}/{}",
                    obj.pointer("/spec/scaleTargetRef/kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    obj.pointer("/spec/scaleTargetRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )),
                Cell::HpaTargets => json!(hpa_targets(obj)),
                Cell::IntOrUnset(p) => match obj.pointer(p).and_then(Value::as_i64) {
                    Some(n) => json!(n.to_string()),
                    None => json!("<unset>"),
                },
                Cell::OrNa(p) => match obj.pointer(p) {
                    Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
                    _ => json!("N/A"),
                },
                Cell::Bool(p) => json!(obj.pointer(p).and_then(Value::as_bool).unwrap_or(false)),
                Cell::CreatedAt => cell_text(obj.pointer("/metadata/creationTimestamp")),
                Cell::RoleRef => json!(format!(
                    "{}/{}",
                    obj.pointer("/roleRef/kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    obj.pointer("/roleRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )),
                Cell::Subjects(kind) => {
                    let names: Vec<String> = obj
                        .get("subjects")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|x| x["kind"] == *kind)
                        .map(|x| {
                            let n = x["name"].as_str().unwrap_or_default();
                            match x["namespace"].as_str() {
                                Some(ns) if *kind == "ServiceAccount" => format!("{ns}/{n}"),
                                _ => n.to_string(),
                            }
                        })
                        .collect();
                    json!(names.join(", "))
                }
                Cell::IngressClass => json!(
                    obj.pointer("/spec/ingressClassName")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>")
                ),
                Cell::IngressHosts => {
                    let hosts: Vec<&str> = obj
                        .pointer("/spec/rules")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["host"].as_str())
                        .collect();
                    json!(if hosts.is_empty() {
                        "*".to_string()
                    } else {
                        hosts.join(",")
                    })
                }
                Cell::IngressAddress => {
                    let a: Vec<&str> = obj
                        .pointer("/status/loadBalancer/ingress")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                        .collect();
                    json!(a.join(","))
                }
                Cell::IngressPorts => json!(if obj
                    .pointer("/spec/tls")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty())
                {
                    "80, 443"
                } else {
                    "80"
                }),
                Cell::AccessModes(p) => {
                    let modes: Vec<&str> = obj
                        .pointer(p)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|m| match m {
                            "ReadWriteOnce" => "RWO",
                            "ReadOnlyMany" => "ROX",
                            "ReadWriteMany" => "RWX",
                            "ReadWriteOncePod" => "RWOP",
                            other => other,
                        })
                        .collect();
                    json!(modes.join(","))
                }
                Cell::TextOrNone(p) => json!(
                    obj.pointer(p)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or("<unset>")
                ),
                Cell::PvClaim => json!(match (
                    obj.pointer("/spec/claimRef/namespace")
                        .and_then(Value::as_str),
                    obj.pointer("/spec/claimRef/name").and_then(Value::as_str),
                ) {
                    (Some(ns), Some(n)) => format!("{ns}/{n}"),
                    _ => String::new(),
                }),
                Cell::EndpointsList => {
                    let mut eps = Vec::new();
                    for sub in obj
                        .get("subsets")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let ports: Vec<i64> = sub["ports"]
                            .as_array()
                            .map(|a| a.iter().filter_map(|p| p["port"].as_i64()).collect())
                            .unwrap_or_default();
                        for a in sub["addresses"].as_array().into_iter().flatten() {
                            let ip = a["ip"].as_str().unwrap_or_default();
                            if ports.is_empty() {
                                eps.push(ip.to_string());
                            }
                            for p in &ports {
                                eps.push(format!("{ip}:{p}"));
                            }
                        }
                    }
                    json!(match eps.len() {
                        0 => "<none>".to_string(),
                        n if n > 3 => format!("{} + {} more...", eps[..3].join(","), n - 3),
                        _ => eps.join(","),
                    })
                }
                Cell::DataCount => {
                    let n = ["data", "binaryData", "stringData"]
                        .iter()
                        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
                        .map(serde_json::Map::len)
                        .sum::<usize>();
                    json!(n)
                }
            })
            .collect()
    }

    /// A Table of `items` (served objects). `include`: `None`, `Metadata`
    /// (default) or `Object`.
    pub(crate) fn table(
        &self,
        api_version: &str,
        items: &[Value],
        rv: Option<u64>,
        cont: Option<&str>,
        include: &str,
    ) -> Value {
        let rows: Vec<Value> = items
            .iter()
            .map(|o| {
                let mut row = json!({"cells": self.row_cells(o)});
                match include {
                    "None" => {}
                    "Object" => row["object"] = o.clone(),
                    _ => {
                        row["object"] = json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        });
                    }
                }
                row
            })
            .collect();
        let mut meta = serde_json::Map::new();
        if let Some(rv) = rv {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        if let Some(c) = cont {
            meta.insert("continue".into(), Value::String(c.to_string()));
        }
        json!({
            "kind": "Table",
            "apiVersion": api_version,
            "metadata": meta,
            "columnDefinitions": self.columns,
            "rows": rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(100 * 86400), "100d");
    }

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}, "spec": {"l": [1, 2]}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&o, ".spec.l[1]"), Some(&json!(2)));
        assert_eq!(json_path(&o, ".spec.missing"), None);
    }
}

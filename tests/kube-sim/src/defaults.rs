//! Defaulting of built-in kinds, as the apiserver's generated defaulters
//! (`k8s.io/kubernetes/pkg/apis/*/v1/defaults.go`, `SetDefaults_*`) and the
//! admission plugins every cluster runs (ServiceAccount,
//! DefaultTolerationSeconds) fill them in, plus the conversions a typed
//! decode does (Secret `stringData` merged into `data`, empty `omitempty`
//! maps and lists dropped).
//!
//! Why hand-written: the upstream defaults are Go code, not data; neither
//! the OpenAPI spec nor k8s-openapi carries them. Each function names the
//! upstream function it follows.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::resources::ResourceInfo;

/// What defaulting needs from the store: cluster IPs and node ports
/// already in use.
#[derive(Debug, Default)]
pub struct Allocations {
    /// Allocated Service cluster IPs (last octets of 10.96.x.y as u32).
    pub cluster_ips: BTreeSet<u32>,
    /// Allocated node ports.
    pub node_ports: BTreeSet<i64>,
}

impl Allocations {
    fn next_ip(&mut self) -> String {
        // 10.96.0.0/12; .1 is the `kubernetes` Service of a real cluster.
        let mut n = 10u32;
        while self.cluster_ips.contains(&n) {
            n += 1;
        }
        self.cluster_ips.insert(n);
        format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
    }

    fn next_node_port(&mut self) -> i64 {
        let mut p = 30_000 + (self.node_ports.len() as i64 * 7919) % 2768;
        while self.node_ports.contains(&p) {
            p = if p >= 32_767 { 30_000 } else { p + 1 };
        }
        self.node_ports.insert(p);
        p
    }

    /// Records the IP and node ports of a stored Service.
    pub fn record(&mut self, svc: &Value) {
        if let Some(ip) = svc.pointer("/spec/clusterIP").and_then(Value::as_str)
            && let Some(n) = ip_index(ip)
        {
            self.cluster_ips.insert(n);
        }
        for p in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(np) = p.get("nodePort").and_then(Value::as_i64) {
                self.node_ports.insert(np);
            }
        }
    }

    /// Releases the IP and node ports of a removed Service.
    pub fn release(&mut self, svc: &Value) {
        if let Some(ip) = svc.pointer("/spec/clusterIP").and_then(Value::as_str)
            && let Some(n) = ip_index(ip)
        {
            self.cluster_ips.remove(&n);
        }
        for p in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(np) = p.get("nodePort").and_then(Value::as_i64) {
                self.node_ports.remove(&np);
            }
        }
    }
}

fn ip_index(ip: &str) -> Option<u32> {
    let rest = ip.strip_prefix("10.96.")?;
    let (a, b) = rest.split_once('.')?;
    Some((a.parse::<u32>().ok()? << 8) | b.parse::<u32>().ok()?)
}

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let o = v.as_object_mut()?;
    o.entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

/// admissionregistration/v1 `SetDefaults_MatchResources` and
/// `SetDefaults_Rule`: `matchPolicy: Equivalent`, empty selectors,
/// `scope: "*"`.
fn match_resources(m: &mut Map<String, Value>) {
    set_default(m, "matchPolicy", json!("Equivalent"));
    set_default(m, "namespaceSelector", json!({}));
    set_default(m, "objectSelector", json!({}));
    for rules in ["resourceRules", "excludeResourceRules"] {
        if let Some(a) = m.get_mut(rules).and_then(Value::as_array_mut) {
            for r in a.iter_mut().filter_map(Value::as_object_mut) {
                set_default(r, "scope", json!("*"));
            }
        }
    }
}

/// admissionregistration/v1 `SetDefaults_ValidatingWebhook` /
/// `SetDefaults_MutatingWebhook`, `SetDefaults_Rule` and
/// `SetDefaults_ServiceReference`.
fn webhooks(obj: &mut Value, mutating: bool) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for h in hooks.iter_mut().filter_map(Value::as_object_mut) {
        set_default(h, "failurePolicy", json!("Fail"));
        set_default(h, "matchPolicy", json!("Equivalent"));
        set_default(h, "namespaceSelector", json!({}));
        set_default(h, "objectSelector", json!({}));
        set_default(h, "timeoutSeconds", json!(10));
        if mutating {
            set_default(h, "reinvocationPolicy", json!("Never"));
        }
        if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter_map(Value::as_object_mut) {
                set_default(r, "scope", json!("*"));
            }
        }
        if let Some(svc) = h
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            set_default(svc, "port", json!(443));
        }
    }
}

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    let absent = match m.get(k) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    };
    if absent {
        m.insert(k.to_string(), v);
    }
}

/// Defaults a built-in object on create (`old` is `None`) or update.
pub fn apply(res: &ResourceInfo, obj: &mut Value, old: Option<&Value>, alloc: &mut Allocations) {
    if !res.builtin {
        return;
    }
    match (res.group.as_str(), res.kind.as_str()) {
        ("", "Secret") => secret(obj),
        ("", "Namespace") => namespace(obj),
        ("", "Service") => service(obj, old, alloc),
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                pod_spec(spec);
            }
            if old.is_none() {
                pod_admission(obj);
                let qos = qos_class(obj);
                if let Some(st) = obj_mut(obj, "status") {
                    set_default(st, "phase", json!("Pending"));
                    set_default(st, "qosClass", json!(qos));
                }
            }
        }
        ("", "PodTemplate") => {
            if let Some(t) = obj.get_mut("template") {
                pod_template(t);
            }
        }
        ("", "ReplicationController") => {
            let tl = obj.pointer("/spec/template/metadata/labels").cloned();
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                if let Some(l) = &tl {
                    set_default(spec, "selector", l.clone());
                }
                if let Some(t) = spec.get_mut("template") {
                    pod_template(t);
                }
            }
            if let Some(l) = tl
                && let Some(m) = obj_mut(obj, "metadata")
            {
                set_default(m, "labels", l);
            }
        }
        ("", "Node") => {
            // SetDefaults_NodeStatus: allocatable defaults to capacity.
            if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut)
                && let Some(cap) = st.get("capacity").filter(|c| c.is_object()).cloned()
            {
                set_default(st, "allocatable", cap);
            }
        }
        ("", "PersistentVolume") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
                set_default(spec, "volumeMode", json!("Filesystem"));
            }
            if let Some(st) = obj_mut(obj, "status") {
                set_default(st, "phase", json!("Pending"));
            }
        }
        ("", "PersistentVolumeClaim") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "volumeMode", json!("Filesystem"));
            }
            if let Some(st) = obj_mut(obj, "status") {
                set_default(st, "phase", json!("Pending"));
            }
        }
        ("", "Endpoints") => {
            for s in arr_mut(obj, "/subsets") {
                for p in arr_mut(s, "/ports") {
                    if let Some(m) = p.as_object_mut() {
                        set_default(m, "protocol", json!("TCP"));
                    }
                }
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            for p in arr_mut(obj, "/ports") {
                if let Some(m) = p.as_object_mut() {
                    set_default(m, "protocol", json!("TCP"));
                }
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                // SetDefaults_Deployment (apps/v1).
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                if let Some(st) = spec
                    .entry("strategy")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    set_default(st, "type", json!("RollingUpdate"));
                    if st.get("type").and_then(Value::as_str) == Some("RollingUpdate")
                        && let Some(ru) = st
                            .entry("rollingUpdate")
                            .or_insert_with(|| json!({}))
                            .as_object_mut()
                    {
                        set_default(ru, "maxUnavailable", json!("25%"));
                        set_default(ru, "maxSurge", json!("25%"));
                    }
                }
                if let Some(t) = spec.get_mut("template") {
                    pod_template(t);
                }
            }
        }
        ("apps", "ReplicaSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                if let Some(t) = spec.get_mut("template") {
                    pod_template(t);
                }
            }
        }
        ("apps", "StatefulSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                // SetDefaults_StatefulSet (apps/v1).
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                if let Some(us) = spec
                    .entry("updateStrategy")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    set_default(us, "type", json!("RollingUpdate"));
                    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate")
                        && let Some(ru) = us
                            .entry("rollingUpdate")
                            .or_insert_with(|| json!({}))
                            .as_object_mut()
                    {
                        set_default(ru, "partition", json!(0));
                    }
                }
                if let Some(p) = spec
                    .entry("persistentVolumeClaimRetentionPolicy")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    set_default(p, "whenDeleted", json!("Retain"));
                    set_default(p, "whenScaled", json!("Retain"));
                }
                for c in spec
                    .get_mut("volumeClaimTemplates")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(s) = obj_mut(c, "spec") {
                        set_default(s, "volumeMode", json!("Filesystem"));
                    }
                    if let Some(st) = obj_mut(c, "status") {
                        set_default(st, "phase", json!("Pending"));
                    }
                }
                if let Some(t) = spec.get_mut("template") {
                    pod_template(t);
                }
            }
        }
        ("apps", "DaemonSet") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                // SetDefaults_DaemonSet (apps/v1).
                set_default(spec, "revisionHistoryLimit", json!(10));
                if let Some(us) = spec
                    .entry("updateStrategy")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    set_default(us, "type", json!("RollingUpdate"));
                    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate")
                        && let Some(ru) = us
                            .entry("rollingUpdate")
                            .or_insert_with(|| json!({}))
                            .as_object_mut()
                    {
                        set_default(ru, "maxUnavailable", json!(1));
                        set_default(ru, "maxSurge", json!(0));
                    }
                }
                if let Some(t) = spec.get_mut("template") {
                    pod_template(t);
                }
            }
            daemonset_template_generation(obj, old);
        }
        ("batch", "Job") => job(obj, old),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "failurePolicy", json!("Fail"));
                if let Some(m) = spec
                    .get_mut("matchConstraints")
                    .and_then(Value::as_object_mut)
                {
                    match_resources(m);
                }
            }
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            if let Some(m) = obj
                .pointer_mut("/spec/matchResources")
                .and_then(Value::as_object_mut)
            {
                match_resources(m);
            }
        }
        (
            "admissionregistration.k8s.io",
            kind @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"),
        ) => {
            webhooks(obj, kind == "MutatingWebhookConfiguration");
        }
        ("batch", "CronJob") => {
            if let Some(spec) = obj_mut(obj, "spec") {
                // SetDefaults_CronJob (batch/v1).
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
                if let Some(t) = spec
                    .get_mut("jobTemplate")
                    .and_then(|j| j.pointer_mut("/spec/template"))
                {
                    pod_template(t);
                }
            }
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            // SetDefaults_HorizontalPodAutoscaler (autoscaling/v2), on the
            // stored v2 form whichever version was written.
            if let Some(spec) = obj_mut(obj, "spec") {
                set_default(spec, "minReplicas", json!(1));
                if spec
                    .get("metrics")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
                {
                    spec.insert(
                        "metrics".into(),
                        json!([{"type": "Resource", "resource": {"name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80}}}]),
                    );
                }
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            // SetDefaults_PriorityClass.
            if let Some(o) = obj.as_object_mut() {
                set_default(o, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            let egress = obj.pointer("/spec/egress").is_some();
            if let Some(spec) = obj_mut(obj, "spec")
                && !spec.contains_key("policyTypes")
            {
                let mut t = vec![json!("Ingress")];
                if egress {
                    t.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), Value::Array(t));
            }
        }
        _ => {}
    }
    encode_status(&res.group, &res.storage_version, &res.kind, obj);
}

fn arr_mut<'a>(v: &'a mut Value, ptr: &str) -> impl Iterator<Item = &'a mut Value> {
    v.pointer_mut(ptr)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Secret: `stringData` is write-only; its entries overwrite `data`.
fn secret(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let Some(sd) = o.remove("stringData") else {
        return;
    };
    let Some(sd) = sd.as_object() else {
        return;
    };
    if sd.is_empty() {
        return;
    }
    let data = o.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let s = v.as_str().unwrap_or_default();
            d.insert(
                k.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(s)),
            );
        }
    }
}

/// SetDefaults_Service plus the allocators of the Service REST storage.
fn service(obj: &mut Value, old: Option<&Value>, alloc: &mut Allocations) {
    let Some(spec) = obj_mut(obj, "spec") else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    set_default(spec, "sessionAffinity", json!("None"));
    // Allocated fields survive an update that leaves them out, while the
    // type still needs them (`patchAllocatedValues`).
    if ty != "ExternalName"
        && let Some(os) = old.and_then(|o| o.get("spec")).and_then(Value::as_object)
    {
        for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let Some(v) = os.get(k) {
                set_default(spec, k, v.clone());
            }
        }
    }
    if ty != "ExternalName" {
        if spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            let ip = alloc.next_ip();
            spec.insert("clusterIP".into(), json!(ip));
        }
        let ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
        set_default(spec, "clusterIPs", json!([ip]));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    let old_ports: Vec<Value> = old
        .and_then(|o| o.pointer("/spec/ports"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for p in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(m) = p.as_object_mut() else {
            continue;
        };
        set_default(m, "protocol", json!("TCP"));
        if !m.contains_key("targetPort")
            && let Some(port) = m.get("port").cloned()
        {
            m.insert("targetPort".into(), port);
        }
        if (ty == "NodePort" || ty == "LoadBalancer")
            && m.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0
        {
            let kept = old_ports
                .iter()
                .find(|o| o.get("port") == m.get("port") && o.get("protocol") == m.get("protocol"))
                .and_then(|o| o.get("nodePort"))
                .and_then(Value::as_i64);
            let np = kept.unwrap_or_else(|| alloc.next_node_port());
            m.insert("nodePort".into(), json!(np));
        }
    }
    if let Some(st) = obj_mut(obj, "status") {
        st.entry("loadBalancer").or_insert_with(|| json!({}));
    }
    alloc.record(obj);
}

/// SetDefaults_Namespace (the `kubernetes.io/metadata.name` label, also
/// reasserted by the strategy's Canonicalize) and SetDefaults_NamespaceStatus.
fn namespace(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    if let Some(name) = name
        && let Some(m) = obj_mut(obj, "metadata")
        && let Some(labels) = m
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    if let Some(st) = obj_mut(obj, "status") {
        set_default(st, "phase", json!("Active"));
    }
}

/// The annotation apps/v1 carries a DaemonSet's internal
/// `spec.templateGeneration` in (`Convert_apps_DaemonSet_To_v1_DaemonSet`):
/// PrepareForCreate raises it to at least 1; PrepareForUpdate keeps the
/// stored value whatever the client sent, plus one when the pod template
/// changed.
fn daemonset_template_generation(obj: &mut Value, old: Option<&Value>) {
    const KEY: &str = "deprecated.daemonset.template.generation";
    let of = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(KEY))
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<i64>().ok())
    };
    let generation = match old {
        None => of(obj).filter(|g| *g >= 1).unwrap_or(1),
        Some(old) => {
            let kept = of(old).unwrap_or(0);
            if old.pointer("/spec/template") == obj.pointer("/spec/template") {
                kept
            } else {
                kept + 1
            }
        }
    };
    if let Some(m) = obj_mut(obj, "metadata")
        && let Some(a) = m
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    {
        a.insert(KEY.into(), json!(generation.to_string()));
    }
}

/// How Go's typed encoding writes a built-in's status, which clients
/// generated from the API types (the official Python client's models)
/// insist on: the status struct is always there (Go never omits a
/// non-pointer struct, `omitempty` or not), and its fields without
/// `omitempty` are written even when zero: `status.replicas: 0` of a new
/// ReplicationController, a DaemonSet's `currentNumberScheduled`,
/// `numberMisscheduled`, `desiredNumberScheduled` and `numberReady`, a
/// Node's `nodeInfo` strings. Which fields those are comes from the Go
/// struct tags in k8s.io/api's `types.go`, through the message table
/// generated from them (see [`crate::protobuf::write_unomitted`]).
pub fn encode_status(group: &str, version: &str, kind: &str, obj: &mut Value) {
    let api_version = crate::resources::gv_string(group, version);
    if let Some(o) = obj.as_object_mut() {
        crate::protobuf::write_unomitted(&api_version, kind, "status", o);
    }
}

/// SetDefaults_Job (batch/v1) and the Job REST strategy's selector.
fn job(obj: &mut Value, old: Option<&Value>) {
    let uid = obj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(spec) = obj_mut(obj, "spec") else {
        return;
    };
    let completions_set = spec.get("completions").is_some_and(|v| !v.is_null());
    let parallelism_set = spec.get("parallelism").is_some_and(|v| !v.is_null());
    if !completions_set && !parallelism_set {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let pod_failure = spec.get("podFailurePolicy").is_some();
    set_default(
        spec,
        "podReplacementPolicy",
        json!(if pod_failure {
            "Failed"
        } else {
            "TerminatingOrFailed"
        }),
    );
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if old.is_none() && !manual && !uid.is_empty() {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        if let Some(t) = spec.get_mut("template")
            && let Some(m) = obj_mut(t, "metadata")
            && let Some(l) = m
                .entry("labels")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        {
            l.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
            l.insert("batch.kubernetes.io/job-name".into(), json!(name));
            l.insert("controller-uid".into(), json!(uid));
            l.insert("job-name".into(), json!(name));
        }
    }
    if let Some(t) = spec.get_mut("template") {
        pod_template(t);
    }
}

fn pod_template(t: &mut Value) {
    if let Some(spec) = t.get_mut("spec") {
        pod_spec(spec);
    }
}

/// SetDefaults_PodSpec, SetDefaults_Container, SetDefaults_Volume (core/v1).
fn pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    set_default(m, "restartPolicy", json!("Always"));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "schedulerName", json!("default-scheduler"));
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "securityContext", json!({}));
    for key in ["containers", "initContainers"] {
        for c in m
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            container(c);
        }
    }
    for v in m
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(v) = v.as_object_mut() else {
            continue;
        };
        for (k, mode_key) in [
            ("configMap", "defaultMode"),
            ("secret", "defaultMode"),
            ("downwardAPI", "defaultMode"),
            ("projected", "defaultMode"),
        ] {
            if let Some(src) = v.get_mut(k).and_then(Value::as_object_mut) {
                set_default(src, mode_key, json!(420));
            }
        }
        if let Some(hp) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
            set_default(hp, "type", json!(""));
        }
    }
}

fn container(c: &mut Value) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(m) = c.as_object_mut() else {
        return;
    };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    set_default(m, "imagePullPolicy", json!(image_pull_policy(&image)));
    m.entry("resources").or_insert_with(|| json!({}));
    for p in m
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(p) = p.as_object_mut() {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = m.get_mut(probe).and_then(Value::as_object_mut) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
        }
    }
    for e in m
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(fr) = e
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            set_default(fr, "apiVersion", json!("v1"));
        }
    }
}

/// `Always` for `:latest` or no tag, else `IfNotPresent` (digests too).
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The ServiceAccount and DefaultTolerationSeconds admission plugins.
fn pod_admission(obj: &mut Value) {
    let Some(spec) = obj_mut(obj, "spec") else {
        return;
    };
    set_default(spec, "serviceAccountName", json!("default"));
    let sa = spec.get("serviceAccountName").cloned().unwrap_or_default();
    set_default(spec, "serviceAccount", sa);
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    set_default(spec, "priority", json!(0));
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        != Some(false);
    let mount_path = "/var/run/secrets/kubernetes.io/serviceaccount";
    let mounted = ["containers", "initContainers"].iter().any(|k| {
        spec.get(*k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("volumeMounts")
                    .and_then(Value::as_array)
                    .is_some_and(|m| m.iter().any(|v| v["mountPath"] == mount_path))
            })
    });
    if automount && !mounted {
        // The ServiceAccount admission plugin's projected token volume.
        let name = format!("kube-api-access-{}", crate::store::random_suffix());
        let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}});
        if let Some(v) = spec
            .entry("volumes")
            .or_insert_with(|| json!([]))
            .as_array_mut()
        {
            v.push(volume);
        }
        for k in ["containers", "initContainers"] {
            for c in spec
                .get_mut(k)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(m) = c.as_object_mut().and_then(|c| {
                    c.entry("volumeMounts")
                        .or_insert_with(|| json!([]))
                        .as_array_mut()
                }) {
                    m.push(json!({"name": name, "readOnly": true, "mountPath": mount_path}));
                }
            }
        }
    }
    let tol = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tol.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !t
                .iter()
                .any(|x| x.get("key").and_then(Value::as_str) == Some(key))
            {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// `status.qosClass` (GetPodQOS): BestEffort without requests or limits,
/// Guaranteed when every container's limits equal its requests for cpu
/// and memory, else Burstable.
fn qos_class(pod: &Value) -> &'static str {
    let cs: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let res = |c: &Value, k: &str| -> Map<String, Value> {
        c.pointer(&format!("/resources/{k}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    if cs
        .iter()
        .all(|c| res(c, "requests").is_empty() && res(c, "limits").is_empty())
    {
        return "BestEffort";
    }
    let guaranteed = cs.iter().all(|c| {
        let l = res(c, "limits");
        let r = res(c, "requests");
        ["cpu", "memory"]
            .iter()
            .all(|k| l.get(*k).is_some() && r.get(*k).is_none_or(|v| Some(v) == l.get(*k)))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Drops the empty maps and lists of `metadata` that Go's typed encoding
/// omits (`labels: {}`, `annotations: {}`, `finalizers: []`, ...).
pub fn drop_empty_metadata(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, v| {
            !(matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences" | "managedFields"
            ) && (v.is_null()
                || v.as_object().is_some_and(Map::is_empty)
                || v.as_array().is_some_and(Vec::is_empty)))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_policy_follows_the_tag() {
        assert_eq!(image_pull_policy("nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
        assert_eq!(image_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(image_pull_policy("registry:5000/nginx"), "Always");
        assert_eq!(image_pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn secret_string_data_is_merged_into_data() {
        let mut s =
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "new", "c": "z"}});
        secret(&mut s);
        assert_eq!(s, json!({"data": {"a": "eA==", "b": "bmV3", "c": "eg=="}}));
    }

    #[test]
    fn qos_classes() {
        let pod = |r: Value| json!({"spec": {"containers": [{"name": "c", "resources": r}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
    }

    #[test]
    fn service_addresses_are_allocated_kept_and_released() {
        let reg = crate::resources::Registry::builtin();
        let res = reg.get("", "v1", "services").unwrap();
        let mut alloc = Allocations::default();
        let mut a = json!({"metadata": {"name": "a"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&res, &mut a, None, &mut alloc);
        let ip = a["spec"]["clusterIP"].as_str().unwrap().to_string();
        let np = a["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
        assert!((30000..=32767).contains(&np));
        assert_eq!(a["spec"]["externalTrafficPolicy"], "Cluster");
        // An update that leaves the allocated values out keeps them.
        let mut upd = json!({"metadata": {"name": "a"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&res, &mut upd, Some(&a), &mut alloc);
        assert_eq!(
            (
                upd["spec"]["clusterIP"].as_str(),
                upd["spec"]["ports"][0]["nodePort"].as_i64()
            ),
            (Some(ip.as_str()), Some(np))
        );
        // A second Service gets other values; ExternalName gets none.
        let mut b = json!({"metadata": {"name": "b"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        apply(&res, &mut b, None, &mut alloc);
        assert_ne!(b["spec"]["clusterIP"], a["spec"]["clusterIP"]);
        assert_ne!(
            b["spec"]["ports"][0]["nodePort"],
            a["spec"]["ports"][0]["nodePort"]
        );
        let mut en = json!({"metadata": {"name": "a"}, "spec": {"type": "ExternalName", "externalName": "x.example.com"}});
        apply(&res, &mut en, Some(&a), &mut alloc);
        assert!(en["spec"].get("clusterIP").is_none(), "{en}");
        alloc.release(&a);
        let mut c = json!({"metadata": {"name": "c"}, "spec": {"ports": [{"port": 80}]}});
        apply(&res, &mut c, None, &mut alloc);
        assert_eq!(
            c["spec"]["clusterIP"].as_str(),
            Some(ip.as_str()),
            "a released address is reused"
        );
    }
}

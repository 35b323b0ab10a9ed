"""Every built-in kind kube-sim serves, through the official Python client's
typed API: create, read, list, replace, replace of the status (where a
status subresource is served) and delete. The client deserialises each
response into its generated model, which refuses objects that lack fields
the real API server always writes (a ReplicationController's
`status.replicas`, a DaemonSet's four status counters), so a response
kube-sim gets wrong raises here even though the write succeeded.

Which kinds are served comes from discovery, so a kind kube-sim starts
serving without an entry in BODIES fails this script.

Usage: typed_kinds.py KUBECONFIG CONTEXT
Prints one line per kind and `ok N` at the end.
"""
import json
import re
import sys
import urllib.request

from kubernetes import client, config

config.load_kube_config(config_file=sys.argv[1], context=sys.argv[2])
api = client.ApiClient()
host = api.configuration.host
NS = "default"


def get_json(path):
    with urllib.request.urlopen(host + path) as r:
        return json.load(r)


def template(app):
    return {"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}


def selector(app):
    return {"matchLabels": {"app": app}}


JOB_SPEC = {"template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": "busybox"}]}}}
RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
SUBJECTS = [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}]

# (group/version, resource) -> a valid object of the kind (without
# apiVersion/kind, added from discovery), and checks on the typed create
# response (what the real server's strategy and Go's encoding give).
BODIES = {
    ("v1", "namespaces"): ({"metadata": {"name": "py-ns"}},
                           lambda o: o.status.phase == "Active"),
    ("v1", "nodes"): ({"metadata": {"name": "py-node"},
                       "status": {"capacity": {"cpu": "2"}}},
                      lambda o: o.status.node_info.kubelet_version == ""
                      and o.status.allocatable == {"cpu": "2"}),
    ("v1", "configmaps"): ({"metadata": {"name": "py"}, "data": {"a": "b"}}, None),
    ("v1", "secrets"): ({"metadata": {"name": "py"}, "stringData": {"a": "b"}},
                        lambda o: o.type == "Opaque"),
    ("v1", "pods"): ({"metadata": {"name": "py"}, "spec": template("p")["spec"]},
                     lambda o: (o.status.phase, o.status.qos_class, o.metadata.generation)
                     == ("Pending", "BestEffort", 1)),
    ("v1", "services"): ({"metadata": {"name": "py"}, "spec": {"ports": [{"port": 80}]}},
                         lambda o: o.status.load_balancer is not None),
    ("v1", "serviceaccounts"): ({"metadata": {"name": "py"}}, None),
    ("v1", "events"): ({"metadata": {"name": "py-core"}, "reason": "R", "message": "m",
                        "type": "Normal",
                        "involvedObject": {"kind": "Pod", "name": "x", "namespace": NS}},
                       None),
    ("v1", "endpoints"): ({"metadata": {"name": "py"}, "subsets": [
        {"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}, None),
    ("v1", "persistentvolumeclaims"): (
        {"metadata": {"name": "py"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                              "resources": {"requests": {"storage": "1Gi"}}}},
        lambda o: o.status.phase == "Pending"),
    ("v1", "persistentvolumes"): (
        {"metadata": {"name": "py-pv"}, "spec": {"capacity": {"storage": "1Gi"},
                                                 "accessModes": ["ReadWriteOnce"],
                                                 "hostPath": {"path": "/tmp"}}},
        lambda o: o.status.phase == "Pending"),
    ("v1", "replicationcontrollers"): (
        {"metadata": {"name": "py"}, "spec": {"selector": {"app": "rc"},
                                              "template": template("rc")}},
        lambda o: (o.status.replicas, o.metadata.generation) == (0, 1)),
    ("v1", "podtemplates"): ({"metadata": {"name": "py"}, "template": template("pt")}, None),
    ("v1", "limitranges"): ({"metadata": {"name": "py"}, "spec": {
        "limits": [{"type": "Container", "max": {"cpu": "1"}}]}}, None),
    ("v1", "resourcequotas"): ({"metadata": {"name": "py"}, "spec": {"hard": {"pods": "10"}}},
                               None),
    ("events.k8s.io/v1", "events"): (
        {"metadata": {"name": "py-events"}, "eventTime": "2025-01-01T00:00:00.000000Z",
         "reportingController": "example.com/c", "reportingInstance": "i", "action": "A",
         "reason": "R", "type": "Normal", "regarding": {"kind": "Pod", "name": "x"}}, None),
    ("coordination.k8s.io/v1", "leases"): ({"metadata": {"name": "py"},
                                            "spec": {"holderIdentity": "me"}}, None),
    ("apps/v1", "deployments"): (
        {"metadata": {"name": "py"}, "spec": {"selector": selector("d"),
                                              "template": template("d")}},
        lambda o: (o.spec.replicas, o.metadata.generation) == (1, 1)),
    ("apps/v1", "replicasets"): (
        {"metadata": {"name": "py"}, "spec": {"selector": selector("rs"),
                                              "template": template("rs")}},
        lambda o: o.status.replicas == 0),
    ("apps/v1", "statefulsets"): (
        {"metadata": {"name": "py"}, "spec": {"serviceName": "py", "selector": selector("s"),
                                              "template": template("s")}},
        lambda o: (o.status.replicas, o.status.available_replicas) == (0, 0)),
    ("apps/v1", "daemonsets"): (
        {"metadata": {"name": "py"}, "spec": {"selector": selector("ds"),
                                              "template": template("ds")}},
        lambda o: (o.status.current_number_scheduled, o.status.number_misscheduled,
                   o.status.desired_number_scheduled, o.status.number_ready) == (0, 0, 0, 0)
        and o.metadata.annotations["deprecated.daemonset.template.generation"] == "1"),
    ("batch/v1", "jobs"): ({"metadata": {"name": "py"}, "spec": JOB_SPEC},
                           lambda o: o.metadata.generation == 1),
    ("batch/v1", "cronjobs"): ({"metadata": {"name": "py"}, "spec": {
        "schedule": "*/5 * * * *", "jobTemplate": {"spec": JOB_SPEC}}},
        lambda o: o.metadata.generation == 1),
    ("autoscaling/v2", "horizontalpodautoscalers"): (
        {"metadata": {"name": "py"}, "spec": {"maxReplicas": 3, "scaleTargetRef": {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}},
        lambda o: o.status.desired_replicas == 0),
    ("autoscaling/v1", "horizontalpodautoscalers"): (
        {"metadata": {"name": "py1"}, "spec": {"maxReplicas": 3, "scaleTargetRef": {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}},
        lambda o: (o.status.current_replicas, o.status.desired_replicas) == (0, 0)),
    ("node.k8s.io/v1", "runtimeclasses"): ({"metadata": {"name": "py"}, "handler": "runc"},
                                           None),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions"): (
        {"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True}}}]}},
        None),
    ("discovery.k8s.io/v1", "endpointslices"): (
        {"metadata": {"name": "py"}, "addressType": "IPv4",
         "endpoints": [{"addresses": ["10.0.0.1"]}]}, None),
    ("networking.k8s.io/v1", "ingresses"): (
        {"metadata": {"name": "py"}, "spec": {"defaultBackend": {
            "service": {"name": "s", "port": {"number": 80}}}}}, None),
    ("networking.k8s.io/v1", "networkpolicies"): (
        {"metadata": {"name": "py"}, "spec": {"podSelector": {}}}, None),
    ("networking.k8s.io/v1", "ingressclasses"): (
        {"metadata": {"name": "py"}, "spec": {"controller": "example.com/c"}}, None),
    ("policy/v1", "poddisruptionbudgets"): (
        {"metadata": {"name": "py"}, "spec": {"minAvailable": 1, "selector": selector("p")}},
        lambda o: (o.status.current_healthy, o.status.desired_healthy,
                   o.status.disruptions_allowed, o.status.expected_pods) == (0, 0, 0, 0)),
    ("apiregistration.k8s.io/v1", "apiservices"): (
        {"metadata": {"name": "v1.example.org"}, "spec": {
            "group": "example.org", "version": "v1", "groupPriorityMinimum": 100,
            "versionPriority": 10, "service": {"name": "s", "namespace": NS}}}, None),
    ("scheduling.k8s.io/v1", "priorityclasses"): ({"metadata": {"name": "py"}, "value": 1000},
                                                  None),
    ("storage.k8s.io/v1", "storageclasses"): (
        {"metadata": {"name": "py"}, "provisioner": "example.com/p"}, None),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"): (
        {"metadata": {"name": "py"}, "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["example.org"], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["things"]}]},
            "validations": [{"expression": "true"}]}},
        lambda o: o.metadata.generation == 1),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"): (
        {"metadata": {"name": "py"}, "spec": {"policyName": "py",
                                              "validationActions": ["Deny"]}},
        lambda o: o.metadata.generation == 1),
    # Webhooks of a resource nothing writes here: registered, never called.
    ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"): (
        {"metadata": {"name": "py"}, "webhooks": [{
            "name": "m.example.org", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": [{"apiGroups": ["example.org"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["things"]}]}]},
        lambda o: o.webhooks[0].failure_policy == "Fail"
        and o.webhooks[0].reinvocation_policy == "Never" and o.metadata.generation == 1),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"): (
        {"metadata": {"name": "py"}, "webhooks": [{
            "name": "v.example.org", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "s", "namespace": NS}},
            "rules": [{"apiGroups": ["example.org"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["things"]}]}]},
        lambda o: o.webhooks[0].timeout_seconds == 10
        and o.webhooks[0].client_config.service.port == 443 and o.metadata.generation == 1),
    ("rbac.authorization.k8s.io/v1", "roles"): ({"metadata": {"name": "py"}, "rules": RULES},
                                                None),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): (
        {"metadata": {"name": "py"}, "subjects": SUBJECTS, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "py"}}, None),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): (
        {"metadata": {"name": "py"}, "rules": RULES}, None),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): (
        {"metadata": {"name": "py"}, "subjects": SUBJECTS, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "py"}},
        None),
}


def served():
    """(group/version, resource) -> discovery entry, for every built-in kind."""
    out = {}
    gvs = ["v1"]
    for g in get_json("/apis")["groups"]:
        gvs += [v["groupVersion"] for v in g["versions"]]
    for gv in gvs:
        path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        for r in get_json(path)["resources"]:
            out[(gv, r["name"])] = r
    return out


def typed_api(gv):
    """The client's API class of a group/version: `CoreV1Api`, `AppsV1Api`,
    `RbacAuthorizationV1Api`, ..."""
    group, _, version = gv.rpartition("/")
    words = group.removesuffix(".k8s.io").split(".") if group else ["core"]
    return getattr(client, "".join(w.capitalize() for w in words)
                   + version.capitalize() + "Api")(api)


def snake(kind):
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2",
                  re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", kind)).lower()


def typed(obj, kind, what):
    """A response must be the client's model of the kind, not a dict."""
    name = type(obj).__name__
    if not name.endswith(kind):
        sys.exit(f"{what}: the client returned {name}, not a model of {kind}")
    return obj


def run(gv, resource, entry, body, check):
    kind = entry["kind"]
    a = typed_api(gv)
    ns = entry["namespaced"]
    base = ("namespaced_" if ns else "") + snake(kind)
    loc = {"namespace": NS} if ns else {}
    verbs = set(entry["verbs"])
    what = f"{gv} {resource}"
    body = dict(body, apiVersion=gv, kind=kind)
    name = body["metadata"]["name"]
    created = typed(getattr(a, "create_" + base)(body=body, **loc), kind, what + " create")
    try:
        as_real = check is None or check(created)
    except (AttributeError, KeyError, TypeError):
        as_real = False
    if not as_real:
        sys.exit(f"{what}: the create response is not what the real server returns: "
                 f"{api.sanitize_for_serialization(created)}")
    got = typed(getattr(a, "read_" + base)(name=name, **loc), kind, what + " read")
    listed = getattr(a, "list_" + base)(**loc)
    names = [typed(i, kind, what + " list").metadata.name for i in listed.items]
    if name not in names:
        sys.exit(f"{what}: list shows {names}, not {name}")
    # Replace with the typed object read back: the model round-trips.
    got.metadata.labels = dict(got.metadata.labels or {}, typed="yes")
    replaced = typed(getattr(a, "replace_" + base)(name=name, body=got, **loc), kind,
                     what + " replace")
    if replaced.metadata.labels.get("typed") != "yes":
        sys.exit(f"{what}: replace lost the label")
    ops = ["create", "read", "list", "replace"]
    status = (gv, resource + "/status") in SERVED
    if status:
        st = typed(getattr(a, "replace_" + base + "_status")(name=name, body=replaced, **loc),
                   kind, what + " replace status")
        if st.metadata.resource_version is None:
            sys.exit(f"{what}: status replace returned no resourceVersion")
        ops.append("status")
    if "delete" in verbs:
        deleted = getattr(a, "delete_" + base)(name=name, **loc)
        # The spec names the kind as the answer where the registry returns
        # the deleted object (a Pod, a Service, ...), else a Status (or the
        # object while finalizers hold it: a Namespace).
        if isinstance(deleted, dict):
            if deleted.get("kind") not in ("Status", kind):
                sys.exit(f"{what}: delete answered {deleted}")
        else:
            typed(deleted, kind, what + " delete")
        ops.append("delete")
    print(what, " ".join(ops))


SERVED = served()
kinds = {k: v for k, v in SERVED.items() if "/" not in k[1]}
# Review resources (TokenReview, SubjectAccessReview, ...) are create-only
# questions, not stored kinds; the security tests cover them.
stored = {k: v for k, v in kinds.items() if "get" in v["verbs"]}
missing = sorted(set(stored) - set(BODIES))
if missing:
    sys.exit(f"served kinds without a case here: {missing}")
for key in BODIES:
    if key not in stored:
        sys.exit(f"{key} has a case here but kube-sim does not serve it")
for (gv, resource), (body, check) in BODIES.items():
    run(gv, resource, stored[(gv, resource)], body, check)
print("ok", len(BODIES))

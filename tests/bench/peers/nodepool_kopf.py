"""The NodePool job written as a Python author would write it without rekon:
a kopf operator. A NodePool (``nodepools.nodes.lailin.xyz/v1``,
cluster-scoped) puts its labels and taints on the Nodes labelled
``node-role.kubernetes.io/<pool>`` and owns a RuntimeClass
``node-pool-<pool>``. Writes go through the official Python client with
server-side apply, one field manager per pool (a pool's later apply without
a label removes it: SSA's ownership does the bookkeeping the Rust seed keeps
in an annotation); kopf's finalizer holds a deleted pool until its labels and
taints are off its Nodes; the Node handler finds a Node's pools in a kopf
index. The native peer of rekon + plugins/nodepool-py in
tests/bench/peers.py (a bench, not a product).

    kopf run --standalone --all-namespaces nodepool_kopf.py

The official client reads the same kubeconfig as kopf (KUBECONFIG).
"""
from __future__ import annotations

import kopf
import kubernetes

GROUP, VERSION, PLURAL = "nodes.lailin.xyz", "v1", "nodepools"
ROLE_PREFIX = "node-role.kubernetes.io/"
APPLIED_PREFIX = "applied.nodes.lailin.xyz/"
APPLY = "application/apply-patch+yaml"

_api: dict[str, object] = {}


def core() -> kubernetes.client.CoreV1Api:
    return _api["core"]  # type: ignore[return-value]


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    kubernetes.config.load_kube_config()
    _api["core"] = kubernetes.client.CoreV1Api()
    _api["node"] = kubernetes.client.NodeV1Api()
    settings.posting.level = 100  # no k8s events per handler: the seed posts few
    settings.persistence.finalizer = "nodes.lailin.xyz/cleanup"


def manager(pool: str) -> str:
    return f"nodepool-{pool}"


def node_config(pool: str, spec: dict | None) -> dict:
    """What pool ``pool`` applies to one of its Nodes (``spec`` None: nothing,
    so SSA removes what this pool's manager applied before)."""
    labels = dict((spec or {}).get("labels") or {})
    taints = [
        {k: t[k] for k in ("key", "value", "effect") if t.get(k) is not None}
        for t in (spec or {}).get("taints") or []
    ]
    if labels or taints:
        labels[APPLIED_PREFIX + pool] = "true"
    body: dict = {"apiVersion": "v1", "kind": "Node", "metadata": {"labels": labels}}
    if taints:
        body["spec"] = {"taints": taints}
    return body


def apply_node(name: str, pool: str, spec: dict | None) -> None:
    body = node_config(pool, spec)
    body["metadata"]["name"] = name
    core().patch_node(name, body, field_manager=manager(pool), force=True, _content_type=APPLY)


def carries(node_labels: dict, node_taints: set, spec: dict) -> bool:
    """Whether a Node already has the pool's labels and taints (``node_taints``:
    (key, value, effect) triples)."""
    return all(node_labels.get(k) == v for k, v in (spec.get("labels") or {}).items()) and all(
        (t["key"], t.get("value"), t["effect"]) in node_taints for t in spec.get("taints") or []
    )


@kopf.index(GROUP, VERSION, PLURAL)
def pools(name, spec, meta, **_):
    """Pool name -> spec (pools being deleted left out)."""
    if meta.get("deletionTimestamp"):
        return None
    return {name: dict(spec)}


def members(pool: str) -> list:
    return core().list_node(label_selector=ROLE_PREFIX + pool).items


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def converge(name, spec, meta, patch, logger, **_):
    nodes = members(name)
    for node in nodes:
        taints = {(t.key, t.value, t.effect) for t in (node.spec.taints if node.spec else None) or []}
        if not carries(node.metadata.labels or {}, taints, spec):
            apply_node(node.metadata.name, name, dict(spec))
    taints = spec.get("taints") or []
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {
            "name": f"node-pool-{name}",
            "ownerReferences": [
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "name": name, "uid": meta["uid"], "controller": True}
            ],
        },
        "handler": spec.get("handler") or "runc",
    }
    scheduling = {}
    if spec.get("labels"):
        scheduling["nodeSelector"] = dict(spec["labels"])
    if taints:
        scheduling["tolerations"] = [
            {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]} for t in taints
        ]
    if scheduling:
        runtime_class["scheduling"] = scheduling
    _api["node"].patch_runtime_class(  # type: ignore[attr-defined]
        runtime_class["metadata"]["name"], runtime_class, field_manager=manager(name), force=True, _content_type=APPLY
    )
    patch.status["nodeCount"] = len(nodes)
    patch.status["nodes"] = sorted(n.metadata.name for n in nodes)
    logger.debug("converged pool %s on %d nodes", name, len(nodes))


@kopf.on.delete(GROUP, VERSION, PLURAL)
def release(name, **_):
    """Before kopf removes its finalizer: the pool's labels and taints off
    its Nodes (an empty apply by the pool's manager)."""
    for node in core().list_node(label_selector=APPLIED_PREFIX + name).items:
        apply_node(node.metadata.name, name, None)


@kopf.on.event("", "v1", "nodes")
def node_changed(name, labels, spec, pools: kopf.Index, **_):
    """A Node joined a pool (or lost what its pools set): apply the pools it
    names, found in the index."""
    for key in labels or {}:
        if not key.startswith(ROLE_PREFIX):
            continue
        pool = key[len(ROLE_PREFIX):]
        for pool_spec in pools.get(pool, []):
            taints = {(t["key"], t.get("value"), t["effect"]) for t in (spec or {}).get("taints") or []}
            if not carries(labels, taints, pool_spec):
                apply_node(name, pool, pool_spec)

"""nodepool (Python) through rekon_sdk's native test kit: the behaviours of
the Rust seed's tests (plugins/nodepool/tests/nodepool.rs) and the Rust
seed's recorded cases (tests/cases/, recorded on kube-sim by `rekon run
--record`) replayed natively."""
from pathlib import Path

import pytest

from nodepool_py import FINALIZER, NODE_POOL, plugin
from rekon_sdk import Request, kinds
from rekon_sdk.testkit import World, assert_cases

POOL = {
    "apiVersion": "nodes.lailin.xyz/v1",
    "kind": "NodePool",
    "metadata": {"name": "gpu", "generation": 1},
    "spec": {
        "labels": {"accelerator": "nvidia"},
        "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
        "handler": "runc",
    },
}


def node(name, *pools, taints=None):
    n = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {f"node-role.kubernetes.io/{p}": "" for p in pools}}}
    n["spec"] = {"taints": taints} if taints else {}
    n["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    return n


def world(*nodes):
    w = World().primary("main")
    for n in nodes:
        w.insert("main", n)
    w.insert("main", POOL)
    return w


REQ = Request.cluster_scoped("main", "gpu")


def test_labels_taints_record_and_runtime_class_converge():
    w = world(node("n1", "gpu", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]), node("n2"))
    w.converge(plugin, REQ)
    n1 = w.get(kinds.NODE, "main", None, "n1")
    assert n1["metadata"]["labels"]["accelerator"] == "nvidia"
    assert n1["metadata"]["labels"]["applied.nodes.lailin.xyz/gpu"] == "true"
    assert [t["key"] for t in n1["spec"]["taints"]] == ["node.kubernetes.io/unschedulable", "gpu"]
    assert "accelerator" not in w.get(kinds.NODE, "main", None, "n2")["metadata"]["labels"]
    rc = w.get(kinds.RUNTIME_CLASS, "main", None, "node-pool-gpu")
    assert rc["handler"] == "runc"
    assert rc["scheduling"]["tolerations"][0] == {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    pool = w.get(NODE_POOL, "main", None, "gpu")
    assert pool["status"]["conditions"][0]["reason"] == "Converged"
    assert pool["metadata"]["finalizers"] == [FINALIZER]
    w.assert_no_writes(plugin, REQ)


def test_a_node_leaving_the_pool_loses_only_what_the_pool_applied():
    w = world(node("n1", "gpu"))
    w.converge(plugin, REQ)
    w.modify(kinds.NODE, "main", None, "n1", lambda n: n["metadata"]["labels"].pop("node-role.kubernetes.io/gpu"))
    w.modify(kinds.NODE, "main", None, "n1", lambda n: n["metadata"]["labels"].update(team="a"))
    w.converge(plugin, REQ)
    n1 = w.get(kinds.NODE, "main", None, "n1")
    assert n1["metadata"]["labels"] == {"team": "a"}
    assert "taints" not in n1["spec"]


def test_conflicting_pools_the_first_by_name_wins():
    other = {**POOL, "metadata": {"name": "alpha"}, "spec": {"labels": {"accelerator": "amd"}}}
    w = world(node("n1", "gpu", "alpha"))
    w.insert("main", other)
    w.converge(plugin, Request.cluster_scoped("main", "alpha"))
    w.converge(plugin, REQ)
    assert w.get(kinds.NODE, "main", None, "n1")["metadata"]["labels"]["accelerator"] == "amd"
    cond = w.get(NODE_POOL, "main", None, "gpu")["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Conflict")
    assert "Conflict" in [e.reason for e in w.events]


def test_deleting_the_pool_cleans_its_nodes_then_lets_it_go():
    w = world(node("n1", "gpu"))
    w.converge(plugin, REQ)
    w.delete(NODE_POOL, "main", None, "gpu")
    w.converge(plugin, REQ)
    assert w.get(NODE_POOL, "main", None, "gpu") is None
    n1 = w.get(kinds.NODE, "main", None, "n1")
    assert n1["metadata"]["labels"] == {"node-role.kubernetes.io/gpu": ""}
    assert "applied.nodes.lailin.xyz/gpu" not in (n1["metadata"].get("annotations") or {})


def test_an_invalid_spec_is_reported_and_applies_nothing():
    w = world(node("n1", "gpu"))
    w.modify(NODE_POOL, "main", None, "gpu", lambda p: p["spec"]["taints"][0].update(effect="Sometimes"))
    w.converge(plugin, REQ)
    cond = w.get(NODE_POOL, "main", None, "gpu")["status"]["conditions"][0]
    assert cond["reason"] == "InvalidSpec"
    assert 'effect "Sometimes"' in cond["message"]
    assert w.get(kinds.RUNTIME_CLASS, "main", None, "node-pool-gpu") is None


def test_the_rust_seeds_recorded_cases_decide_the_same_here():
    cases = Path(__file__).parent / "cases"
    assert cases.is_dir(), f"no recorded cases in {cases}"
    assert assert_cases(plugin, str(cases)) > 0


def test_a_differing_decision_is_reported():
    class Lazy:
        primary = NODE_POOL
        register = plugin.register

        def reconcile(self, ctx, req, event):
            return plugin.reconcile(ctx, req, event).requeue_after(1)

    with pytest.raises(AssertionError, match="decide differently"):
        assert_cases(Lazy(), str(Path(__file__).parent / "cases"))


# --- settings (the Rust seed's settings tests) ----------------------------------

import copy  # noqa: E402


def test_the_default_handler_comes_from_the_settings():
    w = World().primary("main").with_settings({"defaultHandler": "kata"})
    pool = copy.deepcopy(POOL)
    del pool["spec"]["handler"]
    w.insert("main", pool)
    w.insert("main", node("n1", "gpu"))
    w.converge(plugin, REQ)
    assert w.get(kinds.RUNTIME_CLASS, "main", None, "node-pool-gpu")["handler"] == "kata"
    w.set_settings({"defaultHandler": "runsc"})
    w.converge(plugin, REQ)
    assert w.get(kinds.RUNTIME_CLASS, "main", None, "node-pool-gpu")["handler"] == "runsc"


def test_keys_outside_the_allowed_prefixes_make_a_pool_invalid():
    w = world(node("n1", "gpu")).with_settings({"allowedKeyPrefixes": ["example.com/"]})
    w.converge(plugin, REQ)
    assert "accelerator" not in w.get(kinds.NODE, "main", None, "n1")["metadata"]["labels"]
    ready = w.get(NODE_POOL, "main", None, "gpu")["status"]["conditions"][0]
    assert ready["status"] == "False" and '"accelerator" is outside the allowed prefixes' in ready["message"]


def test_a_pool_selector_narrows_the_primaries():
    w = World().primary("main").with_settings({"poolSelector": "tier=gpu"})
    assert w.register(plugin).primary_selector == "tier=gpu"


@pytest.mark.parametrize(
    "given,reason",
    [
        ({"defaultHandler": "Not A Label"}, "is not a DNS label"),
        ({"allowedKeyPrefixes": [""]}, "would allow keys"),
        ({"defaultHandlr": "kata"}, "unknown field `defaultHandlr`"),
        ({"defaultHandler": 7}, "expected string"),
    ],
)
def test_invalid_settings_are_refused_like_the_rust_seed_refuses_them(given, reason):
    with pytest.raises(ValueError) as e:
        World().primary("main").with_settings(given).register(plugin)
    assert str(e.value).startswith("invalid settings: ") and reason in str(e.value)

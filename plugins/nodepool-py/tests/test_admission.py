"""nodepool (Python)'s admission and conversion through rekon_sdk's native
test kit: the cases of the Rust seed's plugins/nodepool/tests/admission.rs,
with the same expected words."""
import copy

import pytest
from rekon_sdk import AdmissionRequest, ConversionError, ConversionRequest
from rekon_sdk.testkit import World

from nodepool_py import NODE_POOL, admission, conversion, plugin

NAME_REGEX = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
EFFECTS = '"NoSchedule", "PreferNoSchedule", "NoExecute"'


def taint(key, value, effect):
    return {"key": key, "value": value, "effect": effect}


def pool(name, labels=None, taints=None, api="v1"):
    spec = {}
    if labels:
        spec["labels"] = dict(labels)
    if taints:
        spec["taints"] = list(taints)
    return {"apiVersion": f"nodes.lailin.xyz/{api}", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def gpu():
    return pool("gpu", {"example.com/gpu": "true"}, [taint("example.com/gpu", "true", "NoSchedule")])


def validate(world, p):
    return world.validate(admission, AdmissionRequest.create(NODE_POOL, "main", p), plugin)


def denial(verdict):
    assert verdict.denial is not None, verdict
    return verdict.denial.code, verdict.denial.message, verdict.denial.field_errors


def test_the_rules_are_the_rust_seeds():
    assert [(r.name, r.kind, r.operations, r.failure_policy) for r in admission.rules()] == [
        ("spec", "validate", ["create", "update"], "fail"), ("handler", "mutate", ["create", "update"], "fail")]


def test_a_valid_pool_is_admitted():
    world = World().primary("main")
    v = validate(world, gpu())
    assert v.allowed and v.warnings == []
    assert validate(world, pool("bare")).allowed


def test_a_bad_taint_effect_is_unsupported_as_the_api_server_says():
    world = World().primary("main")
    code, message, fields = denial(validate(world, pool("gpu", taints=[taint("gpu", "true", "Sometimes")])))
    assert code == 422
    assert message == f'NodePool.nodes.lailin.xyz "gpu" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": supported values: {EFFECTS}'
    assert fields == [("spec.taints[0].effect", f'Unsupported value: "Sometimes": supported values: {EFFECTS}')]
    _, message, fields = denial(validate(world, pool("gpu", taints=[taint("ok", "", "NoExecute"), taint("gpu", "", "")])))
    assert fields[0][0] == "spec.taints[1].effect"
    assert message.endswith("is invalid: spec.taints[1].effect: Required value")


def test_unqualified_keys_and_bad_values_are_invalid_with_the_api_servers_words():
    world = World().primary("main")
    bad = pool("gpu", {"ok": "not ok", "-team": "a"}, [taint("a/b/c", "true", "NoSchedule")])
    code, message, fields = denial(validate(world, bad))
    assert code == 422
    assert [p for p, _ in fields] == ["spec.labels[-team]", "spec.labels[ok]", "spec.taints[0].key"]
    assert fields[0][1] == f'Invalid value: "-team": {NAME_REGEX}'
    assert fields[1][1].startswith('Invalid value: "not ok": a valid label must be an empty string')
    assert fields[2][1].startswith('Invalid value: "a/b/c": a qualified name must consist')
    assert message.startswith('NodePool.nodes.lailin.xyz "gpu" is invalid: [spec.labels[-team]: Invalid value: "-team": ')
    assert message.endswith("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')]")
    _, _, fields = denial(validate(world, pool("gpu", {"Example.com/x": "1", "a" * 64: "1"})))
    assert "prefix part a lowercase RFC 1123 subdomain" in fields[0][1]
    assert fields[1][1].endswith("name part must be no more than 63 characters")


def test_a_pool_may_not_claim_another_pools_role_label_nor_set_its_own():
    world = World().primary("main")
    code, message, fields = denial(validate(world, pool("gpu", {"node-role.kubernetes.io/batch": ""})))
    assert code == 422
    assert message == 'NodePool.nodes.lailin.xyz "gpu" is invalid: spec.labels[node-role.kubernetes.io/batch]: Forbidden: may not claim pool "batch"\'s role label: the pool\'s nodes would join pool "batch"'
    assert len(fields) == 1
    _, _, fields = denial(validate(world, pool("gpu", {"node-role.kubernetes.io/gpu": ""})))
    assert fields[0][0] == "spec.labels[node-role.kubernetes.io/gpu]"
    assert fields[0][1].startswith("Forbidden: the pool's own role label")


def test_keys_outside_the_operators_prefixes_are_forbidden():
    world = World().primary("main").with_settings({"allowedKeyPrefixes": ["example.com/"]})
    assert validate(world, gpu()).allowed
    _, _, fields = denial(validate(world, pool("gpu", {"team": "a"}, [taint("gpu", "", "NoSchedule")])))
    assert fields == [("spec.labels[team]", "Forbidden: outside the allowed key prefixes (example.com/)"),
                      ("spec.taints[0].key", "Forbidden: outside the allowed key prefixes (example.com/)")]


def test_no_other_pool_may_already_select_these_nodes_as_the_cache_shows():
    world = World().primary("main")
    world.insert("main", gpu())
    twin = pool("gpu-2", {"example.com/gpu": "true"})
    code, message, fields = denial(validate(world, twin))
    assert code == 422
    assert message == 'NodePool.nodes.lailin.xyz "gpu-2" is invalid: spec.labels: Forbidden: pool "gpu" already selects these nodes (its labels are the same, so both RuntimeClasses would schedule onto the same nodes)'
    assert fields[0][0] == "spec.labels"
    assert validate(world, pool("gpu-a", {"example.com/gpu": "true", "zone": "a"})).allowed
    world.insert("main", pool("bare"))
    assert validate(world, pool("bare-2")).allowed
    changed = gpu()
    changed["spec"].pop("taints")
    assert world.validate(admission, AdmissionRequest.update(NODE_POOL, "main", gpu(), changed), plugin).allowed
    assert world.modify(NODE_POOL, "main", None, "gpu", lambda p: p["metadata"].__setitem__("deletionTimestamp", "2026-01-01T00:00:00Z"))
    assert validate(world, twin).allowed


def test_an_update_that_keeps_the_spec_is_admitted_so_an_old_pool_can_always_go():
    world = World().primary("main")
    old = pool("gpu", {"-bad": "x"})
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["nodes.lailin.xyz/cleanup"]
    assert world.validate(admission, AdmissionRequest.update(NODE_POOL, "main", old, new), plugin).allowed
    worse = copy.deepcopy(new)
    worse["spec"]["taints"] = [taint("gpu", "", "Never")]
    assert len(denial(world.validate(admission, AdmissionRequest.update(NODE_POOL, "main", old, worse), plugin))[2]) == 2
    assert world.validate(admission, AdmissionRequest.delete(NODE_POOL, "main", old), plugin).allowed


@pytest.mark.parametrize("settings,handler", [({}, "runc"), ({"defaultHandler": "kata"}, "kata")])
def test_a_pool_without_handler_is_defaulted(settings, handler):
    world = World().primary("main").with_settings(settings)
    m = world.mutate(admission, AdmissionRequest.create(NODE_POOL, "main", gpu()), plugin)
    expected = gpu()
    expected["spec"]["handler"] = handler
    assert m.allowed and m.object == expected


def test_a_given_handler_is_kept_and_an_empty_one_defaulted():
    world = World().primary("main")
    own = gpu()
    own["spec"]["handler"] = "gvisor"
    assert world.mutate(admission, AdmissionRequest.create(NODE_POOL, "main", own), plugin).object is None
    own["spec"]["handler"] = ""
    m = world.mutate(admission, AdmissionRequest.update(NODE_POOL, "main", gpu(), own), plugin)
    assert m.object["spec"]["handler"] == "runc"
    going = gpu()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert world.mutate(admission, AdmissionRequest.update(NODE_POOL, "main", going, going), plugin).object is None


def old_pool():
    p = pool("gpu", {"example.com/gpu": "true"}, [taint("example.com/gpu", "true", "NoSchedule")], api="v1alpha1")
    p["spec"]["runtimeHandler"] = "kata"
    p["metadata"].update({"uid": "u-1", "finalizers": ["nodes.lailin.xyz/cleanup"], "labels": {"tier": "gpu"}})
    p["status"] = {"nodeCount": 2, "notReadyNodeCount": 1, "nodes": ["n1", "n2"]}
    return p


def test_the_conversion_is_declared_for_both_versions():
    assert [(c.kind, c.versions) for c in conversion.conversions()] == [("NodePool", ["v1alpha1", "v1"])]
    crd = plugin.register().crds[0]
    versions = sorted((v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"])
    assert versions == [("v1", True, True), ("v1alpha1", True, False)]


def test_a_pool_converts_to_v1_and_back_without_loss():
    world = World().primary("main")
    old = old_pool()
    at_v1 = world.convert(conversion, ConversionRequest(copy.deepcopy(old), "nodes.lailin.xyz/v1"), plugin)
    assert at_v1["apiVersion"] == "nodes.lailin.xyz/v1"
    assert at_v1["spec"]["handler"] == "kata" and "runtimeHandler" not in at_v1["spec"]
    assert (at_v1["metadata"], at_v1["status"]) == (old["metadata"], old["status"])
    assert world.round_trip(conversion, old, "nodes.lailin.xyz/v1", plugin) == old
    v1 = gpu()
    assert world.round_trip(conversion, v1, "nodes.lailin.xyz/v1alpha1", plugin) == v1
    v1["spec"]["handler"] = "gvisor"
    at_alpha = world.convert(conversion, ConversionRequest(copy.deepcopy(v1), "nodes.lailin.xyz/v1alpha1"), plugin)
    assert at_alpha["spec"]["runtimeHandler"] == "gvisor" and "handler" not in at_alpha["spec"]


def test_an_unknown_version_is_refused_with_a_message():
    with pytest.raises(ConversionError):
        World().primary("main").convert(conversion, ConversionRequest(old_pool(), "nodes.lailin.xyz/v2"))

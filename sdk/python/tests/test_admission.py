"""The admission side natively: handlers declared by decorators become
rules, every matching handler runs (a denial stops, warnings add up,
mutations chain), what is raised denies or propagates, and the test kit's
validate/mutate read the world as the host reads a plugin's caches."""
import pytest

from rekon_sdk import (
    PRIMARY,
    AdmissionError,
    AdmissionHandlers,
    AdmissionRequest,
    Mutation,
    Outcome,
    ReadError,
    Registration,
    Verdict,
    kinds,
)
from rekon_sdk.testkit import World


def cm(name, **data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data}


class GuardPlugin:
    primary = kinds.CONFIG_MAP

    def register(self):
        return Registration("guard", "0.1.0", kinds.CONFIG_MAP).permission(kinds.CONFIG_MAP, ["get", "list", "watch"], PRIMARY)

    def reconcile(self, ctx, req, event):
        return Outcome.done()


admission = AdmissionHandlers()


@admission.validate(kinds.CONFIG_MAP, timeout_seconds=3, match_conditions={"not-system": "object.metadata.namespace != 'kube-system'"})
def no_passwords(ctx, req):
    data = req.object.get("data") or {}
    mode = data.get("mode")
    if mode == "bug":
        return data["missing"]
    if mode == "secrets":
        ctx.list(kinds.SECRET, req.cluster, req.namespace)
    if mode == "throw":
        raise AdmissionError("mode throw is refused", code=422, fields={"data.mode": "not throw"})
    if "password" in data:
        return Verdict.deny("passwords belong in Secrets", fields={"data.password": "not allowed here"}).warn("see the docs")
    others = len(ctx.list(kinds.CONFIG_MAP, req.cluster, req.namespace))
    return Verdict.allow(f"{others} ConfigMaps already") if others > 1 else None


@admission.validate(kinds.CONFIG_MAP, kinds.SECRET, id="size", operations=("update",), failure_policy="ignore")
def small(ctx, req):
    if len(req.object.get("data") or {}) > 2:
        return Verdict.deny("at most two keys", code=422)
    return Verdict.allow("checked the size")


@admission.mutate(kinds.CONFIG_MAP, operations=("create",))
def owner(ctx, req):
    labels = req.object["metadata"].setdefault("labels", {})
    if "owner" in labels:
        return None
    labels["owner"] = req.user.username
    return req.object


@admission.mutate(kinds.CONFIG_MAP, operations=("create",))
def team(ctx, req):
    labels = req.object["metadata"]["labels"]
    if labels.get("owner") == "intruder":
        raise AdmissionError("intruders may not create ConfigMaps", code=403)
    labels.setdefault("team", f"team-of-{labels['owner']}")
    return Mutation(req.object).warn("team defaulted")


def test_decorators_declare_one_rule_per_handler():
    rules = admission.rules()
    assert [(r.name, r.kind, [t.plural for t in r.resources], r.operations, r.failure_policy, r.timeout_seconds) for r in rules] == [
        ("no-passwords", "validate", ["configmaps"], ["create", "update"], "fail", 3),
        ("size", "validate", ["configmaps", "secrets"], ["update"], "ignore", None),
        ("owner", "mutate", ["configmaps"], ["create"], "fail", None),
        ("team", "mutate", ["configmaps"], ["create"], "fail", None),
    ]
    assert rules[0].match_conditions == [("not-system", "object.metadata.namespace != 'kube-system'")]


def test_validate_denies_with_fields_and_warnings_and_reads_the_cache():
    w = World().primary("main")
    denied = w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", password="x")), GuardPlugin())
    assert (denied.allowed, denied.denial.code, denied.denial.field_errors) == (False, 403, [("data.password", "not allowed here")])
    assert denied.warnings == ["see the docs"]
    w.insert("main", cm("b"))
    w.insert("main", cm("c"))
    warned = w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a")), GuardPlugin())
    assert (warned.allowed, warned.warnings) == (True, ["2 ConfigMaps already"])


def test_only_the_handlers_whose_rule_admits_the_operation_run_and_warnings_add_up():
    w = World().primary("main")
    w.insert("main", cm("b"))
    w.insert("main", cm("c"))
    update = AdmissionRequest.update(kinds.CONFIG_MAP, "main", cm("a"), cm("a", k="v"))
    v = w.validate(admission, update)
    assert (v.allowed, v.warnings) == (True, ["2 ConfigMaps already", "checked the size"])
    big = w.validate(admission, AdmissionRequest.update(kinds.CONFIG_MAP, "main", cm("a"), cm("a", k="v", l="w", m="x")))
    assert (big.denial.message, big.denial.code, big.warnings) == ("at most two keys", 422, ["2 ConfigMaps already"])
    # A create is not the size rule's operation.
    assert w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", k="v", l="w", m="x"))).allowed


def test_what_a_handler_raises_denies_or_propagates():
    w = World().primary("main")
    thrown = w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", mode="throw")))
    assert (thrown.denial.message, thrown.denial.code, thrown.denial.field_errors) == ("mode throw is refused", 422, [("data.mode", "not throw")])
    # Secrets are not watched by the plugin: the host refuses the read; a 400.
    unwatched = w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", mode="secrets")), GuardPlugin())
    assert (unwatched.denial.code, unwatched.denial.message) == (400, ReadError("not-watched", "v1/Secret in cluster main").message)
    # Without the plugin, the world serves every read (as the Rust test kit's).
    assert w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", mode="secrets"))).allowed
    # A KeyError is a bug: it propagates (the component traps; the host answers 500).
    with pytest.raises(KeyError):
        w.validate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a", mode="bug")))


def test_mutations_chain_and_a_denial_stops_them():
    w = World().primary("main")
    m = w.mutate(admission, AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a")))
    assert m.object["metadata"]["labels"] == {"owner": "kubernetes-admin", "team": "team-of-kubernetes-admin"}
    assert (m.allowed, m.warnings) == (True, ["team defaulted"])
    req = AdmissionRequest.create(kinds.CONFIG_MAP, "main", cm("a"))
    req.object["metadata"]["labels"] = {"owner": "intruder"}
    denied = w.mutate(admission, req)
    assert (denied.allowed, denied.object, denied.verdict.denial.code) == (False, None, 403)
    assert req.object["metadata"]["labels"] == {"owner": "intruder"}, "the request's object is not changed in place"
    # Not a create: no mutating rule admits it; nothing changes.
    update = w.mutate(admission, AdmissionRequest.update(kinds.CONFIG_MAP, "main", cm("a"), cm("a")))
    assert (update.object, update.warnings) == (None, [])


def test_requests_for_tests():
    d = AdmissionRequest.delete(kinds.CONFIG_MAP, "main", cm("gone"))
    assert (d.operation, d.object, d.old_object["metadata"]["name"], d.name, d.namespace) == ("delete", None, "gone", "gone", "default")
    assert d.user.username == "kubernetes-admin" and not d.dry_run

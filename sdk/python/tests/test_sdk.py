"""The SDK natively: World runs a plugin as the host would, decisions in the
host's case format, selectors parse like the host's."""
import pytest

from rekon_sdk import PRIMARY, Apply, ObjectRef, Outcome, ReconcileError, Registration, Request, action, kinds
from rekon_sdk.testkit import World, action_value, matches, outcome_value, parse_selector

LABEL = "example.com/seen"
FINALIZER = "example.com/cleanup"


class Stamper:
    primary = kinds.CONFIG_MAP

    def register(self):
        return Registration("stamper", "0.1.0", kinds.CONFIG_MAP).with_finalizer(FINALIZER).permission(
            kinds.CONFIG_MAP, ["get", "list", "watch", "patch", "delete"], PRIMARY
        )

    def reconcile(self, ctx, req, event):
        if not isinstance(event, Apply):
            copy = Request(cluster=req.cluster, namespace=req.namespace, name=f"{req.name}-copy")
            return Outcome.done().push(action.delete(ObjectRef.for_request(kinds.CONFIG_MAP, copy)))
        if (event.primary.get("data") or {}).get("mode") == "broken":
            raise ReconcileError.terminal(f"configmap {req.name} is broken")
        if (event.primary["metadata"].get("labels") or {}).get(LABEL) == "true":
            return Outcome.done()
        ctx.info("stamping", name=req.name)
        return Outcome.done().push(action.merge_patch(ObjectRef.for_request(kinds.CONFIG_MAP, req), {"metadata": {"labels": {LABEL: "true"}}}))


def cm(name, **extra):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", **extra}}


REQ = Request.namespaced("main", "default", "app")


def test_converges_finalizer_first_then_the_label_then_quiet():
    w = World().primary("main")
    w.insert("main", cm("app"))
    assert len(w.converge(Stamper(), REQ)) == 2
    got = w.get(kinds.CONFIG_MAP, "main", "default", "app")
    assert got["metadata"]["labels"][LABEL] == "true"
    assert got["metadata"]["finalizers"] == [FINALIZER]
    w.assert_no_writes(Stamper(), REQ)
    assert w.logs[0][1] == "stamping"


def test_cleanup_deletes_finalizes_and_lets_the_object_go():
    w = World().primary("main")
    w.insert("main", cm("app"))
    w.insert("main", cm("app-copy"))
    w.converge(Stamper(), REQ)
    w.delete(kinds.CONFIG_MAP, "main", "default", "app")
    outcome = w.reconcile(Stamper(), REQ)
    assert outcome.finalized
    w.apply(Stamper(), REQ, outcome)
    assert w.get(kinds.CONFIG_MAP, "main", "default", "app") is None
    assert w.get(kinds.CONFIG_MAP, "main", "default", "app-copy") is None


def test_a_write_without_permission_is_refused_before_anything_is_written():
    w = World().primary("main")
    w.insert("main", cm("app", finalizers=[FINALIZER]))
    outcome = Outcome.done().push(action.create("main", kinds.JOB, {"metadata": {"name": "j", "namespace": "default"}}))
    with pytest.raises(PermissionError, match="may not create batch/v1 Job"):
        w.apply(Stamper(), REQ, outcome)
    assert w.get(kinds.JOB, "main", "default", "j") is None


class Generator:
    """Creates a child named by the server (``generateName``) on every apply."""

    primary = kinds.CONFIG_MAP

    def register(self):
        return Registration("generator", "0.1.0", kinds.CONFIG_MAP).permission(
            kinds.CONFIG_MAP, ["get", "list", "watch", "create"], PRIMARY
        )

    def reconcile(self, ctx, req, event):
        return Outcome.done()


def test_a_create_named_by_the_server_gets_a_name_from_its_prefix():
    w = World().primary("main")
    w.insert("main", cm("app"))
    child = {"metadata": {"generateName": "app-", "namespace": "default"}}
    for _ in range(2):
        w.apply(Generator(), REQ, Outcome.done().push(action.create("main", kinds.CONFIG_MAP, child)))
    names = sorted(
        o["metadata"]["name"]
        for o in w.list(kinds.CONFIG_MAP, "main", "default")
        if o["metadata"]["name"].startswith("app-")
    )
    assert len(names) == 2 and names[0] != names[1], names
    assert all(len(n) == len("app-") + 5 for n in names), names


def test_reads_outside_the_registration_fail_as_not_watched():
    class Nosy(Stamper):
        def reconcile(self, ctx, req, event):
            ctx.list(kinds.NODE, "main")
            return Outcome.done()

    w = World().primary("main")
    w.insert("main", cm("app", finalizers=[FINALIZER]))
    with pytest.raises(ReconcileError, match="not watched by this plugin"):
        w.reconcile(Nosy(), REQ)


def test_errors_and_actions_in_the_hosts_case_format():
    def broken():
        raise ReconcileError.terminal("configmap app is broken")

    assert outcome_value("stamper", broken) == {
        "error": {"kind": "plugin_error", "message": "plugin stamper failed to reconcile: configmap app is broken", "retryable": False}
    }
    ref = ObjectRef.for_request(kinds.JOB, Request.namespaced("main", "e2e", "t1"))
    assert action_value(action.delete(ref).with_propagation("background")) == {
        "delete": {
            "target": {"cluster": "main", "resource": {"group": "batch", "version": "v1", "kind": "Job", "plural": "jobs", "scope": "Namespaced"}, "namespace": "e2e", "name": "t1"},
            "uid": None,
            "propagation": "Background",
        }
    }
    assert outcome_value("p", lambda: Outcome.done().requeue_after(30_000)) == {"ok": {"actions": [], "requeueAfterMs": 30000}}


@pytest.mark.parametrize(
    "selector,want",
    [("a=b", True), ("a==b,c", True), ("a!=b", False), ("c in (x, d)", True), ("c notin (d)", False), ("!e", True), ("!a", False), ("e", False)],
)
def test_label_selectors(selector, want):
    assert matches(parse_selector(selector), {"a": "b", "c": "d"}) is want


def test_a_bad_selector_is_refused():
    with pytest.raises(ValueError, match="cannot parse"):
        parse_selector("a b")


# --- settings -----------------------------------------------------------------

import dataclasses  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

from rekon_sdk import SETTINGS_REFUSAL_PREFIX, dataclass_settings, settings  # noqa: E402


@dataclasses.dataclass
class StampSettings:
    label: str = LABEL
    max_items: Optional[int] = None
    extra_labels: list[str] = dataclasses.field(default_factory=list)

    def validate(self):
        if "/" not in self.label:
            raise ValueError(f"label {self.label!r} has no prefix")


STAMP_SETTINGS = dataclass_settings(StampSettings)


class Configurable(Stamper):
    def register(self):
        label = settings(STAMP_SETTINGS).label
        return super().register().with_settings(STAMP_SETTINGS).selector(f"!{label}")

    def reconcile(self, ctx, req, event):
        label = ctx.settings(STAMP_SETTINGS).label
        return Outcome.done().push(action.merge_patch(ObjectRef.for_request(kinds.CONFIG_MAP, req), {"metadata": {"labels": {label: "yes"}}}))


def test_settings_are_validated_at_register_and_read_in_register_and_reconcile():
    w = World().primary("main").with_settings({"label": "example.com/team", "maxItems": 3})
    assert w.register(Configurable()).primary_selector == "!example.com/team"
    schema = w.settings_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"]["maxItems"] == {"type": "integer"}
    assert schema["properties"]["extraLabels"] == {"type": "array", "items": {"type": "string"}}
    w.insert("main", cm("app"))
    out = w.reconcile(Configurable(), REQ)
    assert out.actions[0].patch == {"metadata": {"labels": {"example.com/team": "yes"}}}
    for given, reason in [
        ({"label": "plain"}, "label 'plain' has no prefix"),
        ({"lable": "a/b"}, "unknown field `lable`, expected one of extraLabels, label, maxItems"),
        ({"maxItems": "3"}, 'maxItems: expected integer, got "3"'),
        ({"maxItems": True}, "maxItems: expected integer, got true"),
        ("a/b", 'settings: expected an object, got "a/b"'),
    ]:
        with pytest.raises(ValueError) as e:
            World().primary("main").with_settings(given).register(Configurable())
        assert str(e.value) == f"{SETTINGS_REFUSAL_PREFIX}{reason}", given
    assert World().primary("main").register(Configurable()).primary_selector == f"!{LABEL}"


def test_a_plugin_without_a_settings_type_refuses_settings():
    World().primary("main").register(Stamper())
    with pytest.raises(ValueError, match="^invalid settings: this plugin takes no settings"):
        World().primary("main").with_settings({"x": 1}).register(Stamper())


def test_the_refusal_prefix_is_the_one_wit_host_wit_documents():
    wit = (Path(__file__).resolve().parents[3] / "wit" / "host.wit").read_text()
    assert f"`{SETTINGS_REFUSAL_PREFIX}`" in wit

"""widgets (Python) through rekon_sdk's native test kit: the cases of the Rust
plugin's tests (tests/plugins/widgets/tests/widgets.rs), and the host's own
reading of the built component (``rekon plugin inspect``: the rules are
checked once, by the host)."""
import subprocess
import sys

import pytest
from rekon_sdk import AdmissionRequest, Request
from rekon_sdk.testkit import World, inspect_component

from widgets_py import MAX_SIZE, TIER_LABEL, TRAP_NAME, WIDGET, admission, plugin


def widget(name, size):
    return {"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}}


def create(w):
    return AdmissionRequest.create(WIDGET, "main", w)


def test_the_host_reads_the_built_components_rules_as_declared(tmp_path):
    wasm = tmp_path / "widgets_py.wasm"
    built = subprocess.run([sys.executable, "-m", "rekon_sdk.build", "widgets_py", "-o", str(wasm)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "world admission-plugin" in built.stderr
    inspected = inspect_component(str(wasm))
    assert [(r["name"], r["kind"], r["operations"], r["failurePolicy"], r["timeoutSeconds"]) for r in inspected["admission"]] == [
        ("size.widgets.rekon.dev", "validate", ["CREATE", "UPDATE"], "Fail", 5),
        ("tier.widgets.rekon.dev", "mutate", ["CREATE"], "Fail", 10),
    ]


def test_a_widget_too_large_is_denied_with_a_field_error():
    world = World().primary("main")
    denial = world.validate(admission, create(widget("w", 11)), plugin).denial
    assert (denial.message, denial.code, denial.field_errors) == (
        "a widget's size is at most 10, not 11", 422, [("spec.size", f"must be at most {MAX_SIZE}")])
    negative = world.validate(admission, create(widget("w", -1)), plugin).denial
    assert (negative.code, negative.field_errors) == (403, [])
    assert world.validate(admission, create(widget("w", 10)), plugin).allowed


def test_the_strict_build_denies_above_5_what_the_default_admits_in_the_same_words():
    from widgets_py_strict import admission as strict

    world = World().primary("main")
    assert world.validate(admission, create(widget("w", 7)), plugin).allowed
    denial = world.validate(strict, create(widget("w", 7)), plugin).denial
    assert (denial.message, denial.code, denial.field_errors) == (
        "a widget's size is at most 5, not 7", 422, [("spec.size", "must be at most 5")])
    assert world.validate(strict, create(widget("w", 5)), plugin).allowed
    assert world.mutate(strict, create(widget("w", 3)), plugin).warnings == ["a widget above size 2 is large"]


def test_an_exception_other_than_admission_error_propagates_the_component_traps():
    with pytest.raises(RuntimeError, match="widgets: asked to trap"):
        World().primary("main").validate(admission, create(widget(TRAP_NAME, 1)), plugin)


def test_mutate_defaults_the_tier_keeps_a_given_one_and_warns_about_a_large_widget():
    world = World().primary("main")
    m = world.mutate(admission, create(widget("w", 1)), plugin)
    assert (m.object["metadata"]["labels"][TIER_LABEL], m.warnings) == ("standard", [])
    gold = widget("w", 1)
    gold["metadata"]["labels"] = {TIER_LABEL: "gold"}
    assert world.mutate(admission, create(gold), plugin).object is None
    large = world.mutate(admission, create(widget("w", 7)), plugin)
    assert large.warnings == ["a widget above size 5 is large"]
    assert large.object["metadata"]["labels"][TIER_LABEL] == "standard"


def test_reconcile_reports_the_size():
    world = World().primary("main")
    world.insert("main", widget("w", 3))
    world.converge(plugin, Request.namespaced("main", "default", "w"))
    assert world.get(WIDGET, "main", "default", "w")["status"]["observedSize"] == 3


def test_a_namespace_holds_at_most_three_widgets_as_the_cache_shows():
    world = World().primary("main")
    for name in ["a", "b"]:
        world.insert("main", widget(name, 1))
    assert world.validate(admission, create(widget("c", 1)), plugin).allowed
    world.insert("main", widget("c", 1))
    assert world.validate(admission, create(widget("d", 1)), plugin).denial.message == (
        "namespace default already holds 3 widgets, the most it may hold")
    # An update of one of them is not a new widget.
    update = AdmissionRequest.update(WIDGET, "main", widget("c", 1), widget("c", 2))
    assert world.validate(admission, update, plugin).allowed


def test_the_conversion_builds_component_converts_the_crd_the_host_reads_at_two_versions(tmp_path):
    wasm = tmp_path / "widgets_py_conversion.wasm"
    built = subprocess.run([sys.executable, "-m", "rekon_sdk.build", "widgets_py_conversion", "-o", str(wasm)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "world admission-conversion-plugin" in built.stderr
    inspected = inspect_component(str(wasm))
    assert inspected["conversion"] == [{"group": "widgets.rekon.dev", "kind": "Widget", "plural": "widgets", "versions": ["v1alpha1", "v1"]}]
    assert [(v["name"], v["storage"]) for v in inspected["crds"][0]["spec"]["versions"]] == [("v1", True), ("v1alpha1", False)]
    assert len(inspected["admission"]) == 2


def test_the_policies_build_declares_the_policy_the_host_reads_and_compiles(tmp_path):
    wasm = tmp_path / "widgets_py_policies.wasm"
    built = subprocess.run([sys.executable, "-m", "rekon_sdk.build", "widgets_py_policies", "-o", str(wasm)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "world admission-policies-plugin" in built.stderr
    inspected = inspect_component(str(wasm))
    assert inspected["policies"] == [{
        "name": "name",
        "resources": [{"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget", "plural": "widgets", "scope": "Namespaced"}],
        "operations": ["CREATE", "UPDATE"],
        "failurePolicy": "Fail",
        "matchConditions": [],
        "validations": [{
            "expression": "object.metadata.name != 'forbidden'",
            "messageExpression": "'the name ' + object.metadata.name + ' is not allowed'",
            "reason": "Invalid",
        }],
    }]
    assert len(inspected["admission"]) == 2


def test_a_widget_converts_to_v1_and_back_without_loss_and_a_trap_propagates():
    from rekon_sdk import ConversionError, ConversionRequest
    from widgets_py_conversion import CONVERT_TRAP_NAME, conversion
    from widgets_py_conversion import plugin as versioned

    world = World().primary("main")
    old = {
        "apiVersion": "widgets.rekon.dev/v1alpha1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", "uid": "u-1", "labels": {TIER_LABEL: "gold"}},
        "spec": {"amount": 4}, "status": {"observedSize": 4},
    }
    at_v1 = world.convert(conversion, ConversionRequest(old, "widgets.rekon.dev/v1"), versioned)
    assert at_v1 == {**old, "apiVersion": "widgets.rekon.dev/v1", "spec": {"size": 4}}
    assert world.round_trip(conversion, old, "widgets.rekon.dev/v1", versioned) == old
    assert world.round_trip(conversion, widget("n", 9), "widgets.rekon.dev/v1alpha1", versioned) == widget("n", 9)
    with pytest.raises(ConversionError, match="no converter of Widget from widgets.rekon.dev/v1alpha1 to widgets.rekon.dev/v2"):
        world.convert(conversion, ConversionRequest(old, "widgets.rekon.dev/v2"))
    with pytest.raises(RuntimeError, match="asked to trap in convert"):
        world.convert(conversion, ConversionRequest(widget(CONVERT_TRAP_NAME, 1), "widgets.rekon.dev/v1alpha1"))

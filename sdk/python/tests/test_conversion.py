"""The conversion side of the Python SDK, natively: converters declared with
decorators, the CRDs and versions they declare, a lossless round trip, and
what a converter raises (a refusal, or a trap)."""
import pytest

from rekon_sdk import ConversionError, ConversionHandlers, ConversionRequest, ResourceType, version_of
from rekon_sdk.build import WORLDS
from rekon_sdk.testkit import World

THING = ResourceType("example.dev", "v1", "Thing", "things", "namespaced")

conversion = ConversionHandlers()


@conversion.convert(THING, "v1alpha1", "v1")
def to_v1(ctx, obj):
    obj["spec"] = {"size": obj["spec"]["amount"]}
    return obj


@conversion.convert(THING, "v1", "v1alpha1")
def to_v1alpha1(ctx, obj):
    if obj["metadata"]["name"] == "bug":
        return obj["nope"]
    if obj["spec"]["size"] < 0:
        raise ConversionError("a negative size has no v1alpha1 amount")
    obj["spec"] = {"amount": obj["spec"]["size"]}
    return obj


OLD = {
    "apiVersion": "example.dev/v1alpha1", "kind": "Thing",
    "metadata": {"name": "t", "namespace": "default", "uid": "u-1", "labels": {"a": "b"}},
    "spec": {"amount": 3},
}


def test_the_declared_conversions_name_every_version_of_the_crd():
    assert [(c.group, c.kind, c.plural, c.versions) for c in conversion.conversions()] == [
        ("example.dev", "Thing", "things", ["v1alpha1", "v1"]),
    ]
    assert version_of("example.dev/v1alpha1") == "v1alpha1"
    # (binds Admission, binds Conversion, binds Policies)
    assert WORLDS[(True, True, False)] == "admission-conversion-plugin"
    assert WORLDS[(False, True, False)] == "conversion-plugin"
    assert WORLDS[(False, True, True)] == "conversion-policies-plugin"
    assert WORLDS[(True, True, True)] == "api-plugin"


def test_convert_sets_the_desired_api_version_and_a_round_trip_loses_nothing():
    world = World().primary("main")
    out = world.convert(conversion, ConversionRequest(OLD, "example.dev/v1"))
    assert out == {**OLD, "apiVersion": "example.dev/v1", "spec": {"size": 3}}
    assert OLD["spec"] == {"amount": 3}, "the request's object is not changed"
    assert world.round_trip(conversion, OLD, "example.dev/v1") == OLD


def test_a_refusal_raises_conversion_error_and_a_bug_propagates():
    world = World().primary("main")
    negative = {**OLD, "apiVersion": "example.dev/v1", "spec": {"size": -1}}
    with pytest.raises(ConversionError, match="a negative size has no v1alpha1 amount"):
        world.convert(conversion, ConversionRequest(negative, "example.dev/v1alpha1"))
    with pytest.raises(ConversionError, match="no converter of Thing from example.dev/v1alpha1 to example.dev/v2"):
        world.convert(conversion, ConversionRequest(OLD, "example.dev/v2"))
    bug = {**OLD, "apiVersion": "example.dev/v1", "metadata": {"name": "bug"}, "spec": {"size": 1}}
    with pytest.raises(KeyError):
        world.convert(conversion, ConversionRequest(bug, "example.dev/v1alpha1"))

"""widgets, in Python: a plugin that admits its own objects, written as an
author outside the project would with rekon_sdk. It behaves as the Rust
test plugin ``tests/plugins/widgets`` (the e2e ``tests/e2e/tests/admission.rs``
runs the same kubectl cases against all three languages):

- **validate** (``size``): ``spec.size`` is at most ``MAX_SIZE``; a larger one
  is denied with 422 and a field error on ``spec.size``, a negative one with
  a plain message (403). On a create, a namespace already holding
  ``MAX_PER_NAMESPACE`` widgets in the host's cache refuses another. A
  Widget named ``TRAP_NAME`` makes it raise ``RuntimeError`` (not an
  ``AdmissionError``): the component traps, the host answers 500.
- **mutate** (``tier``, creates): a Widget without ``TIER_LABEL`` gets
  ``standard``; a size above ``MAX_SIZE`` / 2 warns.
- **reconcile**: ``status.observedSize`` follows ``spec.size``.

``Guest`` and ``Admission`` are the component's exports
(``rekon-py-build widgets_py``: world ``admission-plugin``, since it defines
``Admission``).
"""
from __future__ import annotations

import json
from pathlib import Path

from rekon_sdk import (
    PRIMARY,
    AdmissionError,
    AdmissionHandlers,
    Apply,
    Context,
    Mutation,
    Outcome,
    ReadError,
    Registration,
    Request,
    ResourceType,
    Verdict,
    action,
)

MAX_SIZE = 10
# The largest size in the stricter build (``widgets_py_strict``), as the Rust
# build's feature ``strict``.
STRICT_MAX_SIZE = 5
TIER_LABEL = "widgets.rekon.dev/tier"
MAX_PER_NAMESPACE = 3
TRAP_NAME = "trap"

WIDGET = ResourceType("widgets.rekon.dev", "v1", "Widget", "widgets", "namespaced")
CRD = json.loads((Path(__file__).parent / "crd.json").read_text())


class Widgets:
    primary = WIDGET

    def register(self) -> Registration:
        return (
            Registration("widgets", "0.1.0", WIDGET)
            .crd(CRD)
            .permission(WIDGET, ["get", "list", "watch", "patch"], PRIMARY)
            .status_permission(WIDGET, ["patch"], PRIMARY)
        )

    def reconcile(self, ctx: Context, req: Request, event) -> Outcome:
        if not isinstance(event, Apply):
            return Outcome.done()
        size = event.primary["spec"]["size"]
        if (event.primary.get("status") or {}).get("observedSize") == size:
            return Outcome.done()
        applied = {"metadata": {"name": req.name, "namespace": req.namespace}, "spec": {"size": size}, "status": {"observedSize": size}}
        return Outcome.done().push(action.apply(req.cluster, WIDGET, applied).with_status())


plugin = Widgets()


def quota(ctx: Context, req) -> Verdict:
    """At most ``MAX_PER_NAMESPACE`` widgets per namespace, counted in the host's
    cache. A cache that cannot be read admits with a warning: the quota is a
    convenience, not a security boundary."""
    try:
        n = len(ctx.list(WIDGET, req.cluster, req.namespace))
    except ReadError as e:
        return Verdict.allow(f"the widget quota was not checked: {e.message}")
    if n >= MAX_PER_NAMESPACE:
        return Verdict.deny(f"namespace {req.namespace or ''} already holds {n} widgets, the most it may hold")
    return Verdict.allow()


def admission_up_to(max_size: int) -> AdmissionHandlers:
    """The widgets' admission with sizes up to ``max_size``: ``admission`` (up
    to ``MAX_SIZE``) and, in ``widgets_py_strict``, up to ``STRICT_MAX_SIZE``
    (the build a Plugin object's shadow and promotion are tested with)."""
    handlers = AdmissionHandlers()

    @handlers.validate(WIDGET, timeout_seconds=5)
    def size(ctx: Context, req) -> Verdict | None:
        if req.object is None:
            return None
        verdict = quota(ctx, req) if req.operation == "create" else Verdict.allow()
        if not verdict.allowed:
            return verdict
        if req.object["metadata"].get("name") == TRAP_NAME:
            raise RuntimeError("widgets: asked to trap")
        value = req.object["spec"]["size"]
        if value < 0:
            # No field and no code: a plain refusal (403).
            return Verdict.deny("a widget's size cannot be negative")
        if value > max_size:
            raise AdmissionError(f"a widget's size is at most {max_size}, not {value}", code=422, fields={"spec.size": f"must be at most {max_size}"})
        return verdict

    @handlers.mutate(WIDGET, operations=("create",))
    def tier(ctx: Context, req) -> Mutation | None:
        if req.object is None:
            return None
        warn = req.object["spec"]["size"] > max_size // 2
        labels = req.object.setdefault("metadata", {}).setdefault("labels", {})
        if TIER_LABEL in labels and not warn:
            return None
        labels.setdefault(TIER_LABEL, "standard")
        mutation = Mutation(req.object)
        return mutation.warn(f"a widget above size {max_size // 2} is large") if warn else mutation

    return handlers


admission = admission_up_to(MAX_SIZE)


try:  # the component's exports; absent natively (pytest)
    from rekon_sdk.component import export_plugin
    from rekon_sdk.component_admission import export_admission

    Guest = export_plugin(plugin)
    Admission = export_admission(admission)
except ImportError:
    pass

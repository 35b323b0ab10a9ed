"""nodepool, in Python: a ``NodePool`` manages labels and taints on its Nodes
and a RuntimeClass ``node-pool-<pool>``.

A port of ``plugins/nodepool`` (Rust) that decides exactly what it decides:
the Rust build's recorded cases replay identically against this one
(``tests/e2e/tests/sdk_ports.rs``). The Rust crate's docs describe the
behaviour and the ownership rules (annotation + marker label per pool,
resourceVersion-guarded JSON patches, first-sorting pool wins a conflict).

Like the seed it validates and defaults its pools (``admission``: webhooks
``spec`` and ``handler``) and converts them between v1alpha1 and v1
(``conversion``). ``Guest``, ``Admission`` and ``Conversion`` are the
component's exports (``rekon-py-build nodepool_py``: world
``admission-conversion-plugin``).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any, Optional

from rekon_sdk import (
    PRIMARY,
    AdmissionHandlers,
    ConversionHandlers,
    ReadError,
    Verdict,
    OWNER_REFERENCE,
    Cleanup,
    Context,
    Mapping,
    ObjectRef,
    Outcome,
    Registration,
    Request,
    ResourceType,
    action,
    dataclass_settings,
    format_time,
    kinds,
    settings,
    status_changed,
)
from rekon_sdk.admission import Denial
from rekon_sdk.types import Timestamp
from rekon_sdk.validation import FieldError, invalid_message, is_qualified_name, is_valid_label_value, key_path

PLUGIN_NAME = "nodepool"
VERSION = "0.1.0"
FINALIZER = "nodes.lailin.xyz/cleanup"
ROLE_PREFIX = "node-role.kubernetes.io/"
APPLIED_PREFIX = "applied.nodes.lailin.xyz/"
MARKER_VALUE = "true"
RUNTIME_CLASS_PREFIX = "node-pool-"
DEFAULT_HANDLER = "runc"
TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]

NODE_POOL = ResourceType("nodes.lailin.xyz", "v1", "NodePool", "nodepools", "cluster")
# The Rust seed's CRD (generated from its types; `make py-crds` refreshes it).
CRD = json.loads((Path(__file__).parent / "crd.json").read_text()) if (Path(__file__).parent / "crd.json").is_file() else None
# The Rust seed's settings schema as `rekon plugin inspect` prints it: the
# port declares exactly what the seed declares (tests/e2e/tests/sdk_ports.rs
# compares the registrations, schema included).
SETTINGS_SCHEMA = json.loads((Path(__file__).parent / "settings.schema.json").read_text())


@dataclasses.dataclass
class NodePoolSettings:
    """What an operator configures; the defaults are the behaviour without settings."""

    default_handler: str = DEFAULT_HANDLER
    allowed_key_prefixes: list[str] = dataclasses.field(default_factory=list)
    pool_selector: Optional[str] = None

    def validate(self) -> None:
        h = self.default_handler
        ok = 0 < len(h) <= 63 and all(c.islower() or c.isdigit() or c == "-" for c in h) and h.isascii() and not h.startswith("-") and not h.endswith("-")
        if not ok:
            raise ValueError(f"defaultHandler {json.dumps(h)} is not a DNS label (lower-case letters, digits and '-', at most 63)")
        bad = next((p for p in self.allowed_key_prefixes if not p or p.startswith(ROLE_PREFIX)), None)
        if bad is not None:
            raise ValueError(f"allowedKeyPrefixes: {json.dumps(bad)} would allow keys a pool cannot manage")

    def problems(self, spec: dict) -> list[str]:
        if not self.allowed_key_prefixes:
            return []
        keys = [("label", k) for k in spec["labels"]] + [("taint", t["key"]) for t in spec["taints"]]
        return [
            f"{what} key {json.dumps(k, ensure_ascii=False)} is outside the allowed prefixes ({', '.join(self.allowed_key_prefixes)})"
            for what, k in keys
            if k and not any(k.startswith(p) for p in self.allowed_key_prefixes)
        ]


class _Settings:
    """The seed's schema, parsed into ``NodePoolSettings`` (unknown keys refused, types checked)."""

    schema = SETTINGS_SCHEMA
    _parse = dataclass_settings(NodePoolSettings)

    def parse(self, raw: Any) -> NodePoolSettings:
        return self._parse.parse(raw)


NODE_POOL_SETTINGS = _Settings()


def role_label(pool: str) -> str:
    return ROLE_PREFIX + pool


def applied_annotation(pool: str) -> str:
    return APPLIED_PREFIX + pool


def runtime_class_name(pool: str) -> str:
    return RUNTIME_CLASS_PREFIX + pool


def _time(t: str) -> str:
    """A stored ``Time`` as Rust re-serializes it: whole seconds."""
    d = datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))
    return format_time(Timestamp(int(d.timestamp() // 1)))


def _taint(t: dict) -> dict:
    """A taint as it decodes: its four fields, absent ones left out."""
    out = {"effect": t["effect"], "key": t["key"]}
    if t.get("timeAdded") is not None:
        out["timeAdded"] = _time(t["timeAdded"])
    if t.get("value") is not None:
        out["value"] = t["value"]
    return out


def _valid_taint(t: Any) -> bool:
    return isinstance(t, dict) and isinstance(t.get("key"), str) and isinstance(t.get("effect"), str)


def _decode_applied(text: Optional[str]) -> Optional[dict]:
    """An ``Applied`` record (labels, taints), or None when it does not decode."""
    if text is None:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    if not isinstance(v, dict):
        return None
    labels = v.get("labels") or {}
    taints = v.get("taints") or []
    if not isinstance(labels, dict) or not all(isinstance(x, str) for x in labels.values()):
        return None
    if not isinstance(taints, list) or not all(_valid_taint(t) for t in taints):
        return None
    return {"labels": dict(labels), "taints": [_taint(t) for t in taints]}


def _applied_text(now: dict) -> str:
    """``serde_json::to_string(&Applied)``: labels sorted, empty fields left out."""
    out: dict[str, Any] = {}
    if now["labels"]:
        out["labels"] = dict(sorted(now["labels"].items()))
    if now["taints"]:
        out["taints"] = now["taints"]
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def applied_on(node: dict, pool: str) -> dict:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(applied_annotation(pool))
    return _decode_applied(text) or {"labels": {}, "taints": []}


def _member_of(node: dict, pool: str) -> bool:
    return role_label(pool) in ((node.get("metadata") or {}).get("labels") or {})


def _same_taint(x: dict, y: dict) -> bool:
    return x["key"] == y["key"] and x["effect"] == y["effect"]


def _taint_value(t: dict) -> str:
    return t.get("value") or ""


def _declared(t: dict) -> dict:
    out = {"effect": t["effect"], "key": t["key"]}
    if t.get("value"):
        out["value"] = t["value"]
    return out


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _spec(pool: dict) -> dict:
    """A NodePoolSpec as it decodes."""
    s = pool.get("spec") or {}
    return {"labels": dict(s.get("labels") or {}), "taints": [_taint(t) for t in s.get("taints") or []], "handler": s.get("handler")}


def plan_node(pool: str, want: Optional[dict], node: dict, others: list[tuple[str, dict]]) -> tuple[list, list[str]]:
    """(RFC 6902 ops, conflicts): what pool ``pool`` (spec ``want``, None while deleting) changes on ``node``."""
    member = want is not None and _member_of(node, pool)
    empty = {"labels": {}, "taints": [], "handler": None}
    want = want if member else empty
    others = [(n, s) for n, s in others if n != pool and _member_of(node, n)]
    applied = applied_on(node, pool)
    ops: list = []
    conflicts: list[str] = []
    now: dict = {"labels": {}, "taints": []}
    meta = node.get("metadata") or {}

    labels = dict(meta.get("labels") or {})
    to_set: dict[str, str] = {}
    remove: set[str] = set()
    for k, v in sorted(want["labels"].items()):
        winner = next((o for o in others if o[0] < pool and k in o[1]["labels"] and o[1]["labels"][k] != v), None)
        if winner is not None:
            conflicts.append(f"label {k}={v} (pool {winner[0]} sets {k}={winner[1]['labels'][k]})")
            continue
        now["labels"][k] = v
        if labels.get(k) != v:
            to_set[k] = v
    for k, v in sorted(applied["labels"].items()):
        if k in now["labels"] or any(k in o[1]["labels"] for o in others):
            continue
        if labels.get(k) == v:
            remove.add(k)
    if meta.get("labels") is None and to_set:
        ops.append({"op": "add", "path": "/metadata/labels", "value": dict(sorted(to_set.items()))})
    else:
        for k, v in sorted(to_set.items()):
            ops.append({"op": "add", "path": f"/metadata/labels/{_escape(k)}", "value": v})
    for k in sorted(remove):
        ops.append({"op": "remove", "path": f"/metadata/labels/{_escape(k)}"})

    spec = node.get("spec")
    current = [_taint(t) for t in (spec or {}).get("taints") or []]
    taints = [dict(t) for t in current]
    for t in want["taints"]:
        t = _declared(t)
        winner = next(
            (o for o in others if o[0] < pool and any(_same_taint(ot, t) and _taint_value(ot) != _taint_value(t) for ot in o[1]["taints"])),
            None,
        )
        if winner is not None:
            conflicts.append(f"taint {t['key']}={_taint_value(t)}:{t['effect']} (pool {winner[0]} sets another value)")
            continue
        c = next((c for c in taints if _same_taint(c, t)), None)
        if c is None:
            taints.append(dict(t))
        elif _taint_value(c) != _taint_value(t):
            c.pop("value", None)
            if "value" in t:
                c["value"] = t["value"]
        now["taints"].append(t)
    for x in applied["taints"]:
        still = any(_same_taint(t, x) for t in now["taints"]) or any(_same_taint(t, x) for o in others for t in o[1]["taints"])
        if not still:
            taints = [c for c in taints if not (_same_taint(c, x) and _taint_value(c) == _taint_value(x))]
    if taints != current:
        if spec is None:
            ops.append({"op": "add", "path": "/spec", "value": {"taints": taints}})
        elif not taints:
            ops.append({"op": "remove", "path": "/spec/taints"})
        else:
            ops.append({"op": "add", "path": "/spec/taints", "value": taints})

    key = applied_annotation(pool)
    is_empty = not now["labels"] and not now["taints"]
    if is_empty and key in labels and key not in remove:
        ops.append({"op": "remove", "path": f"/metadata/labels/{_escape(key)}"})
    if not is_empty and labels.get(key) != MARKER_VALUE:
        if meta.get("labels") is None and not to_set:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {key: MARKER_VALUE}})
        else:
            ops.append({"op": "add", "path": f"/metadata/labels/{_escape(key)}", "value": MARKER_VALUE})
    annotations = meta.get("annotations")
    recorded = (annotations or {}).get(key)
    if is_empty:
        if recorded is not None:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
    elif _decode_applied(recorded) != {"labels": now["labels"], "taints": now["taints"]}:
        text = _applied_text(now)
        if annotations is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {key: text}})
        else:
            ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(key)}", "value": text})
    return ops, conflicts


def handler_of(spec: dict) -> str:
    return spec.get("handler") or DEFAULT_HANDLER


def runtime_class_for(pool: dict) -> dict:
    spec = _spec(pool)
    meta = pool.get("metadata") or {}
    tolerations = [{"key": t["key"], "operator": "Equal", "value": _taint_value(t), "effect": t["effect"]} for t in spec["taints"]]
    rc: dict[str, Any] = {"metadata": {"name": runtime_class_name(meta.get("name") or "")}, "handler": handler_of(spec)}
    if meta.get("name") is not None and meta.get("uid") is not None:
        rc["metadata"]["ownerReferences"] = [
            {"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool", "name": meta["name"], "uid": meta["uid"], "controller": True}
        ]
    if spec["labels"] or tolerations:
        sched: dict[str, Any] = {}
        if spec["labels"]:
            sched["nodeSelector"] = dict(sorted(spec["labels"].items()))
        if tolerations:
            sched["tolerations"] = tolerations
        rc["scheduling"] = sched
    return rc


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _runtime_class_matches(existing: dict, want: dict) -> bool:
    def norm(s: Optional[dict]):
        s = s or {}
        return (dict(s.get("nodeSelector") or {}), [_drop_none(t) for t in s.get("tolerations") or []])

    existing_refs = (existing.get("metadata") or {}).get("ownerReferences") or []
    owned = all(
        any(e.get("uid") == w["uid"] and e.get("controller") is True for e in existing_refs)
        for w in (want["metadata"].get("ownerReferences") or [])
    )
    return existing.get("handler") == want["handler"] and norm(existing.get("scheduling")) == norm(want.get("scheduling")) and owned


def _invalid_spec(spec: dict) -> list[str]:
    problems = []
    for t in spec["taints"]:
        if not t["key"]:
            problems.append("a taint has an empty key")
        if t["effect"] not in TAINT_EFFECTS:
            problems.append(f"taint {t['key']} has effect {json.dumps(t['effect'], ensure_ascii=False)} (want one of {', '.join(TAINT_EFFECTS)})")
    for k in sorted(spec["labels"]):
        if not k or k.startswith(ROLE_PREFIX):
            problems.append(f"label key {json.dumps(k, ensure_ascii=False)} cannot be managed by a pool")
    return problems


def _node_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def _decode_status(s: Optional[dict]) -> Optional[dict]:
    """A stored NodePoolStatus as it decodes and re-serializes (None: nothing stored)."""
    if s is None:
        return None
    out: dict[str, Any] = {"nodeCount": s.get("nodeCount") or 0, "notReadyNodeCount": s.get("notReadyNodeCount") or 0}
    if s.get("nodes"):
        out["nodes"] = list(s["nodes"])
    if s.get("conditions"):
        out["conditions"] = [_condition(c) for c in s["conditions"]]
    return out


def _condition(c: dict) -> dict:
    out = {"lastTransitionTime": _time(c["lastTransitionTime"]), "message": c["message"], "reason": c["reason"], "status": c["status"], "type": c["type"]}
    if c.get("observedGeneration") is not None:
        out["observedGeneration"] = c["observedGeneration"]
    return out


def _ready(status: Optional[dict]) -> Optional[dict]:
    return next((c for c in (status or {}).get("conditions", []) if c["type"] == "Ready"), None)


def _status_for(ctx: Context, pool: dict, stored: Optional[dict], members: list[dict], updating: list[str], conflicts: list[str], problems: list[str]) -> dict:
    if problems:
        status, reason, message = "False", "InvalidSpec", "; ".join(problems)
    elif conflicts:
        status, reason, message = "False", "Conflict", f"not applied: {'; '.join(conflicts)}"
    elif updating:
        status, reason, message = "False", "UpdatingNodes", f"updating {', '.join(updating)}"
    else:
        status, reason, message = "True", "Converged", f"{len(members)} node(s) carry the pool's labels and taints"
    old = _ready(stored)
    ltt = old["lastTransitionTime"] if old is not None and old["status"] == status else ctx.now_seconds()
    ready: dict[str, Any] = {"lastTransitionTime": ltt, "message": message, "reason": reason, "status": status, "type": "Ready"}
    generation = (pool.get("metadata") or {}).get("generation")
    if generation is not None:
        ready["observedGeneration"] = generation
    out: dict[str, Any] = {
        "nodeCount": len(members),
        "notReadyNodeCount": sum(1 for n in members if not _node_ready(n)),
    }
    if members:
        out["nodes"] = [_name(n) for n in members]
    out["conditions"] = [ready]
    return out


class NodePoolPlugin:
    primary = NODE_POOL

    def register(self) -> Registration:
        config = settings(NODE_POOL_SETTINGS)
        reg = Registration(PLUGIN_NAME, VERSION, NODE_POOL)
        if config.pool_selector is not None:
            reg = reg.selector(config.pool_selector)
        reg = (
            reg.with_settings(NODE_POOL_SETTINGS)
            .watch(kinds.NODE, PRIMARY, Mapping.label_key_prefixes(ROLE_PREFIX, APPLIED_PREFIX))
            .watch(kinds.RUNTIME_CLASS, PRIMARY, OWNER_REFERENCE)
            .with_finalizer(FINALIZER)
            .permission(NODE_POOL, ["get", "list", "watch", "patch", "update"], PRIMARY)
            .status_permission(NODE_POOL, ["get", "patch", "update"], PRIMARY)
            .permission(kinds.NODE, ["get", "list", "watch", "patch"], PRIMARY)
            .permission(kinds.RUNTIME_CLASS, ["get", "list", "watch", "create", "patch", "delete"], PRIMARY)
        )
        if CRD is None:
            raise ValueError("crd.json is missing next to nodepool_py.py")
        return reg.crd(CRD)

    def reconcile(self, ctx: Context, req: Request, event) -> Outcome:
        deleting = isinstance(event, Cleanup)
        pool = event.primary
        name = _name(pool)
        cluster = req.cluster
        pool_ref = ObjectRef.for_request(NODE_POOL, req)
        spec = _spec(pool)
        config: NodePoolSettings = ctx.settings(NODE_POOL_SETTINGS)

        def invalid(spec: dict) -> list[str]:
            return _invalid_spec(spec) + config.problems(spec)

        problems = invalid(spec)

        nodes = ctx.list(kinds.NODE, cluster, None, role_label(name))
        for node in ctx.list(kinds.NODE, cluster, None, applied_annotation(name)):
            if not any(_name(n) == _name(node) for n in nodes):
                nodes.append(node)
        nodes.sort(key=_name)
        other_names = sorted(
            {
                k[len(ROLE_PREFIX):]
                for n in nodes
                for k in ((n.get("metadata") or {}).get("labels") or {})
                if k.startswith(ROLE_PREFIX) and k[len(ROLE_PREFIX):] not in (name, "")
            }
        )
        pools = [p for p in (ctx.get(NODE_POOL, cluster, None, o) for o in other_names) if p is not None]
        others = [
            (_name(p), _spec(p))
            for p in pools
            if (p.get("metadata") or {}).get("deletionTimestamp") is None and not invalid(_spec(p))
        ]

        want = spec if not deleting and not problems else None
        patches, updated, conflicts = [], [], []
        for node in nodes:
            ops, node_conflicts = plan_node(name, want, node, others)
            node_name = _name(node)
            conflicts.extend(f"{node_name}: {c}" for c in node_conflicts)
            if not ops:
                continue
            patch = action.json_patch(ObjectRef.new(kinds.NODE, cluster, None, node_name), ops)
            patches.append(patch.guarded((node.get("metadata") or {}).get("resourceVersion")))
            updated.append(node_name)

        if deleting:
            outcome = Outcome.with_actions(patches)
            if updated:
                ctx.info("removing the pool from its nodes", pool=name, nodes=",".join(updated))
                outcome.push(action.normal_event(pool_ref, "NodesCleaned", "Delete", f"removing the pool's labels and taints from {', '.join(updated)}"))
            return outcome

        outcome = Outcome.done()
        members = [n for n in nodes if _member_of(n, name)]
        stored = _decode_status(pool.get("status"))
        status = _status_for(ctx, pool, stored, members, updated, conflicts, problems)
        if status_changed(stored, status):
            outcome.push(action.merge_patch(pool_ref, {"status": status}).with_status())
            new, old = _ready(status), _ready(stored)
            if new is not None and new["reason"] == "Conflict" and (old is None or old["reason"] != "Conflict" or old["message"] != new["message"]):
                outcome.push(action.warning_event(pool_ref, "Conflict", "Update", new["message"]))

        want_rc = runtime_class_for(pool)
        if not spec.get("handler"):
            want_rc["handler"] = config.default_handler
        rc_name = runtime_class_name(name)
        existing = ctx.get(kinds.RUNTIME_CLASS, cluster, None, rc_name)
        if not problems and not (existing is not None and _runtime_class_matches(existing, want_rc)):
            if existing is not None and existing.get("handler") != want_rc["handler"]:
                outcome.push(action.delete(ObjectRef.new(kinds.RUNTIME_CLASS, cluster, None, rc_name)).with_uid((existing.get("metadata") or {}).get("uid")))
            outcome.push(action.apply(cluster, kinds.RUNTIME_CLASS, want_rc).forced())
            outcome.push(action.normal_event(pool_ref, "RuntimeClassUpdated", "Apply", f"RuntimeClass {rc_name} with handler {want_rc['handler']}"))

        if updated:
            ctx.info("updating nodes", pool=name, nodes=",".join(updated))
            outcome.actions.extend(patches)
            outcome.push(action.normal_event(pool_ref, "NodesUpdated", "Patch", f"updating labels and taints of {', '.join(updated)}"))
        return outcome


plugin = NodePoolPlugin()

# --- admission (the Rust seed's src/admission.rs) ----------------------------

admission = AdmissionHandlers()
KIND = "NodePool"
GROUP = "nodes.lailin.xyz"


def field_errors(name: str, spec: dict, config: NodePoolSettings) -> list[FieldError]:
    """Problems of the pool ``name`` with ``spec`` (decoded by ``_spec``), the
    object alone, in the Rust seed's order: labels by key, then taints."""
    errors: list[FieldError] = []
    prefixes = config.allowed_key_prefixes

    def allowed(k: str) -> bool:
        return not prefixes or any(k.startswith(p) for p in prefixes)

    outside = f"outside the allowed key prefixes ({', '.join(prefixes)})"
    for k, v in sorted(spec["labels"].items()):
        path = key_path("spec.labels", k)
        errors += [FieldError.invalid(path, k, m) for m in is_qualified_name(k)]
        errors += [FieldError.invalid(path, v, m) for m in is_valid_label_value(v)]
        role = k[len(ROLE_PREFIX):] if k.startswith(ROLE_PREFIX) else ""
        if role:
            if role == name:
                detail = "the pool's own role label selects its nodes and is set by whoever assigns a node to the pool, not by the pool"
            else:
                detail = f"may not claim pool {json.dumps(role)}'s role label: the pool's nodes would join pool {json.dumps(role)}"
            errors.append(FieldError.forbidden(path, detail))
        elif not allowed(k):
            errors.append(FieldError.forbidden(path, outside))
    for i, t in enumerate(spec["taints"]):
        path = f"spec.taints[{i}]"
        key = t.get("key") or ""
        errors += [FieldError.invalid(f"{path}.key", key, m) for m in is_qualified_name(key)]
        if key and not allowed(key):
            errors.append(FieldError.forbidden(f"{path}.key", outside))
        value = t.get("value") or ""
        msgs = is_valid_label_value(value)
        if msgs:
            errors.append(FieldError.invalid(f"{path}.value", value, ";".join(msgs)))
        effect = t.get("effect") or ""
        if not effect:
            errors.append(FieldError.required(f"{path}.effect"))
        elif effect not in TAINT_EFFECTS:
            errors.append(FieldError.not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
    return errors


def selecting_the_same_nodes(name: str, spec: dict, pools: list[dict]) -> Optional[dict]:
    """Another live pool with the same non-empty labels (see the Rust seed's docs)."""
    if not spec["labels"]:
        return None
    return next((p for p in pools if _name(p) != name and not (p.get("metadata") or {}).get("deletionTimestamp")
                 and _spec(p)["labels"] == spec["labels"]), None)


@admission.validate(NODE_POOL, id="spec")
def validate_spec(ctx: Context, req) -> Optional[Verdict]:
    if req.object is None:
        return None
    new, old = _spec(req.object), (_spec(req.old_object) if req.old_object is not None else None)
    if (req.object.get("metadata") or {}).get("deletionTimestamp") or (old is not None and old == new):
        return None
    name = _name(req.object) or req.name
    config: NodePoolSettings = ctx.settings(NODE_POOL_SETTINGS)
    errors = field_errors(name, new, config)
    warning = None
    if (old is None or old["labels"] != new["labels"]) and new["labels"]:
        try:
            other = selecting_the_same_nodes(name, new, ctx.list(NODE_POOL, req.cluster))
        except ReadError as e:
            other, warning = None, f"whether another pool already selects these nodes was not checked: {e.message}"
        if other is not None:
            errors.append(FieldError.forbidden("spec.labels", f"pool {json.dumps(_name(other))} already selects these nodes (its labels are the same, so both RuntimeClasses would schedule onto the same nodes)"))
    verdict = Verdict(Denial(invalid_message(KIND, GROUP, name, errors), 422, [(e.field, e.body) for e in errors])) if errors else Verdict.allow()
    return verdict.warn(warning) if warning else verdict


@admission.mutate(NODE_POOL, id="handler")
def default_the_handler(ctx: Context, req) -> Optional[dict]:
    """A pool without ``spec.handler`` gets the operator's ``defaultHandler``."""
    if req.object is None or (req.object.get("metadata") or {}).get("deletionTimestamp") or _spec(req.object)["handler"]:
        return None
    config: NodePoolSettings = ctx.settings(NODE_POOL_SETTINGS)
    req.object.setdefault("spec", {})["handler"] = config.default_handler
    return req.object


# --- conversion (the Rust seed's src/v1alpha1.rs): v1alpha1's
# spec.runtimeHandler is v1's spec.handler; storage stays v1 --------------------

conversion = ConversionHandlers()


def _renamed(obj: dict, old: str, new: str) -> dict:
    spec = obj.get("spec")
    if isinstance(spec, dict) and old in spec:
        spec[new] = spec.pop(old)
    return obj


@conversion.convert(NODE_POOL, "v1alpha1", "v1")
def to_v1(ctx: Context, obj: dict) -> dict:
    return _renamed(obj, "runtimeHandler", "handler")


@conversion.convert(NODE_POOL, "v1", "v1alpha1")
def to_v1alpha1(ctx: Context, obj: dict) -> dict:
    return _renamed(obj, "handler", "runtimeHandler")


try:  # the component's exports; absent under pytest, where wit_world is not generated
    from rekon_sdk.component import export_plugin
    from rekon_sdk.component_admission import export_admission
    from rekon_sdk.component_conversion import export_conversion

    Guest = export_plugin(plugin)
    Admission = export_admission(admission)
    Conversion = export_conversion(conversion)
except ImportError:
    pass

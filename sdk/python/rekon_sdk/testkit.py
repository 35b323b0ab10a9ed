"""The native test kit (pytest): ``World`` and recorded-case replay.

``World`` runs a plugin (and its admission handlers: ``validate``,
``mutate``) as the host would: the host's rule for whether and
in which phase a request is reconciled (finalizer first, ``deleting``,
``leaving``), only the reads the registration declares, permissions checked
before anything is written, actions performed (create-if-absent, apply,
merge and JSON patch with the resourceVersion guard, delete honouring
finalizers), the finalizer released after a finalized cleanup.

``RecordedCase`` replays a case ``rekon run --record`` wrote and compares
the decision in the host's own case format (``host/src/record.rs``).
``inspect_component`` runs ``rekon plugin inspect`` on a built component:
the registration rules live once, in the host.
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional

from . import action as a
from .admission import AdmissionHandlers, AdmissionRequest, Mutation, Verdict
from .context import Context, canonical
from .conversion import ConversionHandlers, ConversionRequest
from .errors import ReadError, ReconcileError, to_reconcile_error
from .plugin import Plugin, dispatch
from .settings import check_at_register, with_backend
from .types import ClusterInfo, Registration, Request, ResourceType, Timestamp, format_time

CASE_FORMAT = "rekon.dev/case/v1"

# ---- label selectors (the host's parser: rules/src/selector.rs) ----

_KEY = r"[^\s=!(),]+"


def parse_selector(text: str) -> list[tuple]:
    terms, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    out = []
    for t in (t.strip() for t in terms):
        if not t:
            continue
        if m := re.fullmatch(rf"({_KEY})\s+(in|notin)\s+\(([^)]*)\)", t):
            out.append(("eq" if m[2] == "in" else "ne", m[1], [v.strip() for v in m[3].split(",")]))
        elif m := re.fullmatch(rf"({_KEY})\s*(==|=|!=)\s*([^\s=!(),]*)", t):
            out.append(("ne" if m[2] == "!=" else "eq", m[1], [m[3]]))
        elif m := re.fullmatch(rf"!\s*({_KEY})", t):
            out.append(("absent", m[1], []))
        elif re.fullmatch(_KEY, t):
            out.append(("exists", t, []))
        else:
            raise ValueError(f"label selector {text!r}: cannot parse {t!r}")
    return out


def matches(selector: list[tuple], labels: dict[str, str]) -> bool:
    for op, key, values in selector:
        has = key in labels
        ok = {
            "eq": has and labels.get(key) in values,
            "ne": not has or labels.get(key) not in values,
            "exists": has,
            "absent": not has,
        }[op]
        if not ok:
            return False
    return True


# ---- the host's case format ----


def _ref(o: a.ObjectRef) -> dict:
    r = o.resource
    return {
        "cluster": o.cluster,
        "resource": {"group": r.group, "version": r.version, "kind": r.kind, "plural": r.plural, "scope": "Cluster" if r.scope == "cluster" else "Namespaced"},
        "namespace": o.namespace,
        "name": o.name,
    }


def _redacted(v: Any, redact: bool) -> Any:
    v = json.loads(json.dumps(v))
    if redact and isinstance(v, dict) and v.get("kind") == "Secret":
        for f in ("data", "stringData"):
            if isinstance(v.get(f), dict):
                v[f] = {k: "<redacted>" for k in v[f]}
    return v


def action_value(x: a.Action, redact: bool = False) -> dict:
    """An action as the host records it (``{"apply": {...}}``, objects as JSON)."""
    if isinstance(x, a.Apply):
        return {"apply": {"cluster": x.cluster, "object": _redacted(x.object, redact), "status": x.status, "force": x.force}}
    if isinstance(x, a.Patch):
        return {"patch": {"target": _ref(x.target), "patch_type": x.patch_type.capitalize(), "patch": _redacted(x.patch, redact), "resource_version": x.resource_version, "status": x.status}}
    if isinstance(x, a.Delete):
        return {"delete": {"target": _ref(x.target), "uid": x.uid, "propagation": None if x.propagation is None else x.propagation.capitalize()}}
    if isinstance(x, a.Create):
        return {"create": {"cluster": x.cluster, "object": _redacted(x.object, redact)}}
    return {"event": {"regarding": _ref(x.regarding), "event_type": x.event_type.capitalize(), "reason": x.reason, "action": x.action, "note": x.note}}


def outcome_value(plugin: str, run: Callable[[], a.Outcome], redact: bool = False) -> dict:
    """The decision of a call as the host records it."""
    try:
        o = run()
    except Exception as e:  # what the plugin raised is its decision
        err = to_reconcile_error(e)
        return {"error": {"kind": "plugin_error", "message": f"plugin {plugin} failed to reconcile: {err.message}", "retryable": err.retryable}}
    ok: dict[str, Any] = {"actions": [action_value(x, redact) for x in o.actions]}
    if o.requeue_after_ms is not None:
        ok["requeueAfterMs"] = o.requeue_after_ms
    if o.finalized:
        ok["finalized"] = True
    return {"ok": ok}


_READ_ERRORS = {"NotWatched": "not-watched", "UnknownCluster": "unknown-cluster", "InvalidSelector": "invalid-selector"}
_HEALTH = {"Syncing": "syncing", "Unreachable": "unreachable"}


def _api(r: dict | ResourceType) -> str:
    if isinstance(r, ResourceType):
        return f"{r.group}/{r.version}/{r.kind}"
    return f"{r['group']}/{r['version']}/{r['kind']}"


class RecordedCase:
    """One recorded reconcile."""

    def __init__(self, path: str):
        self.path = path
        try:
            c = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"failed to load case {path}: {e}") from e
        if c.get("format") != CASE_FORMAT:
            raise ValueError(f"failed to load case {path}: not a case of format {CASE_FORMAT}")
        r = c["request"]
        self.request = Request(cluster=r["cluster"], namespace=r.get("namespace"), name=r["name"])
        self.plugin = c["plugin"]["name"]
        self.phase = {"Deleting": "deleting", "Leaving": "leaving"}.get(c.get("phase"), "live")
        t = c.get("requestTime", {})
        self.time = Timestamp(t.get("seconds", 0), t.get("nanoseconds", 0))
        self.clusters = [ClusterInfo(x["name"], bool(x.get("primary")), _HEALTH.get(x.get("health"), "ready")) for x in c.get("clusters", [])]
        self.outcome = c["outcome"]
        self.redacted = bool(c.get("secretsRedacted"))
        recorded = (c.get("plugin") or {}).get("settings")
        self.settings = None if recorded is None else json.dumps(recorded)
        self.reads: dict[tuple, Any] = {}
        for read in c.get("reads", []):
            op = read["op"]
            what = read.get("name") if op == "get" else read.get("labelSelector")
            key = (op, read["cluster"], _api(read["resource"]), read.get("namespace"), what)
            res = read["result"]
            if key in self.reads:
                continue
            if "error" in res:
                tag, msg = next(iter(res["error"].items()))
                self.reads[key] = ReadError(_READ_ERRORS.get(tag, "invalid-selector"), msg)
            elif "object" in res:
                self.reads[key] = res["object"]
            else:
                self.reads[key] = res.get("objects", [])

    @staticmethod
    def load_dir(directory: str) -> list["RecordedCase"]:
        """Every case under ``directory`` (``*.json``, recursively, in path order)."""
        return [RecordedCase(str(p)) for p in sorted(Path(directory).rglob("*.json"))]

    def replay(self, plugin: Plugin) -> dict:
        """Runs ``plugin`` on the recorded request, phase and time, reads from the recording."""
        missing: list[str] = []
        case = self

        def answer(op, cluster, r, ns, what):
            key = (op, cluster, _api(r), ns, what)
            if key not in case.reads:
                d = f"{op} {_api(r)} {ns + '/' if ns else ''}{what or ''} in cluster {cluster}"
                missing.append(d)
                raise ReadError("not-watched", f"not in the recording: {d}")
            v = case.reads[key]
            if isinstance(v, ReadError):
                raise v
            return v

        class Backend:
            def get(self, cluster, r, ns, name):
                v = answer("get", cluster, r, ns, name)
                return None if v is None else json.dumps(v)

            def list(self, cluster, r, ns, sel):
                return [json.dumps(o) for o in answer("list", cluster, r, ns, sel) or []]

            def clusters(self):
                return [ClusterInfo(c.name, c.primary, c.health) for c in case.clusters]

            def log(self, level, message, fields):
                pass

            def request_time(self):
                return case.time

            def settings(self):
                return case.settings

            def declare_settings_schema(self, schema):
                pass

        backend = Backend()
        ctx = Context(backend, self.phase)

        def run():
            with with_backend(backend):
                return dispatch(plugin, ctx, self.request)

        replayed = outcome_value(self.plugin, run, self.redacted)
        identical = not missing and canonical(replayed) == canonical(self.outcome)
        return {"recorded": self.outcome, "replayed": replayed, "missing_reads": missing, "identical": identical}


def assert_cases(plugin: Plugin, directory: str) -> int:
    """Replays every case under ``directory``; raises naming each that decides differently."""
    cases = RecordedCase.load_dir(directory)
    failures = []
    for c in cases:
        r = c.replay(plugin)
        if not r["identical"]:
            failures.append(
                f"case {c.path} decides differently\nreads not in the recording: {r['missing_reads']}\n"
                f"--- recorded\n{json.dumps(r['recorded'], indent=2)}\n--- replayed\n{json.dumps(r['replayed'], indent=2)}"
            )
    if failures:
        raise AssertionError(f"{len(failures)} of {len(cases)} cases decide differently:\n" + "\n".join(failures))
    return len(cases)


def inspect_component(wasm: str) -> dict:
    """The registration the host reads from ``wasm`` (``$REKON`` or ``rekon`` on PATH)."""
    binary = os.environ.get("REKON", "rekon")
    try:
        out = subprocess.run([binary, "plugin", "inspect", "-o", "json", wasm], capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"failed to run {binary} (set REKON to the rekon binary, or put it on PATH): {e}") from e
    if out.returncode != 0:
        raise RuntimeError(f"rekon plugin inspect refused {wasm}:\n{out.stderr}{out.stdout}")
    return json.loads(out.stdout)


# ---- the in-memory world ----


def _step(declared: bool, in_scope: bool, deleting: bool, has_finalizer: bool):
    """The host's rule (rules/src/scope.rs): "ignore", "add-finalizer" or (phase, release)."""
    has = declared and has_finalizer
    if deleting and has:
        return ("deleting", True)
    if deleting and declared:
        return "ignore"
    if deleting:
        return ("deleting", False) if in_scope else "ignore"
    if not in_scope:
        return ("leaving", True) if has else "ignore"
    if declared and not has:
        return "add-finalizer"
    return ("live", False)


def _unescape(seg: str) -> str:
    return seg.replace("~1", "/").replace("~0", "~")


def _json_patch(doc: dict, ops: list) -> dict:
    out = copy.deepcopy(doc)
    for op in ops:
        parts = [_unescape(p) for p in op["path"].split("/")[1:]]
        last = parts.pop()
        parent: Any = out
        for p in parts:
            parent = parent[int(p)] if isinstance(parent, list) else parent.get(p) if isinstance(parent, dict) else None
            if parent is None:
                raise ValueError(f"path {op['path']} does not exist")
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                i = len(parent) if last == "-" else int(last)
                parent[i:i + (op["op"] == "replace")] = [copy.deepcopy(op["value"])]
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ValueError(f"path {op['path']} does not exist")
        elif op["op"] == "test":
            if canonical(parent.get(last) if isinstance(parent, dict) else parent[int(last)]) != canonical(op["value"]):
                raise ValueError(f"test of {op['path']} failed")
        else:
            raise ValueError(f"unsupported JSON patch op {op['op']}")
    return out


def _merge(target: dict, patch: dict) -> dict:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


class World:
    """An in-memory world of clusters and objects."""

    def __init__(self) -> None:
        self._clusters: list[ClusterInfo] = []
        self._objects: dict[tuple, dict] = {}
        self.time = Timestamp(1_735_689_600, 0)
        self._rv = 1
        self._uid = 1
        self.events: list[a.Event] = []
        self.logs: list[tuple[str, str, list]] = []
        self._settings: Optional[str] = None
        self._settings_schema: Optional[str] = None

    def with_settings(self, settings: Any) -> "World":
        """Gives the plugin ``settings`` (as a Plugin object's ``spec.settings`` would)."""
        self.set_settings(settings)
        return self

    def set_settings(self, settings: Any) -> None:
        """Changes the settings (``None``: none given, the plugin's defaults)."""
        self._settings = None if settings is None else json.dumps(settings)

    def settings_schema(self) -> Any:
        """The JSON Schema the plugin declared at its last registration in this world."""
        return None if self._settings_schema is None else json.loads(self._settings_schema)

    def register(self, plugin: Plugin) -> Registration:
        """``plugin.register()`` with this world's settings, checked as the host does:
        invalid settings (or settings for a plugin declaring none) raise ``ValueError``
        (``invalid settings: …``)."""
        backend = self._backend(None)
        with with_backend(backend):
            try:
                reg = plugin.register()
            except ReconcileError as e:  # as the host sees it: the message refuses the load
                raise ValueError(e.message) from None
            check_at_register(reg, backend)
        return reg

    def primary(self, name: str) -> "World":
        self._clusters.append(ClusterInfo(name, True))
        return self

    def cluster(self, name: str) -> "World":
        self._clusters.append(ClusterInfo(name, False))
        return self

    def set_health(self, name: str, health: str) -> None:
        next(c for c in self._clusters if c.name == name).health = health

    def clusters(self) -> list[ClusterInfo]:
        return [ClusterInfo(c.name, c.primary, c.health) for c in self._clusters]

    def _primary(self) -> Optional[str]:
        return next((c.name for c in self._clusters if c.primary), None)

    @staticmethod
    def _key(cluster: str, group: str, kind: str, ns: Optional[str], name: str) -> tuple:
        return (cluster, group, kind, ns, name)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _named(self, x: "a.Create") -> "a.Create":
        """A create named by the server (``generateName``, no name): named
        here as the API server does, the prefix and five characters of its
        alphabet (from a counter, so a test names objects the same way
        every run)."""
        meta = x.object.get("metadata") or {}
        prefix = meta.get("generateName")
        if meta.get("name") or not prefix:
            return x
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        n = self._uid
        self._uid += 1
        suffix = ""
        for _ in range(5):
            suffix += alphabet[n % len(alphabet)]
            n //= len(alphabet)
        obj = copy.deepcopy(x.object)
        obj["metadata"]["name"] = prefix + suffix
        return a.Create(cluster=x.cluster, object=obj)

    def _stamp(self, o: dict) -> None:
        meta = o.setdefault("metadata", {})
        if "uid" not in meta:
            meta["uid"] = f"00000000-0000-4000-8000-{self._uid:012d}"
            self._uid += 1
        meta.setdefault("creationTimestamp", format_time(self.time))
        meta["resourceVersion"] = self._bump()

    def insert(self, cluster: str, obj: dict) -> None:
        o = copy.deepcopy(obj)
        self._stamp(o)
        group = o.get("apiVersion", "").rpartition("/")[0]
        self._objects[self._key(cluster, group, o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])] = o

    def get(self, kind: ResourceType, cluster: str, namespace: Optional[str], name: str) -> Optional[dict]:
        o = self._objects.get(self._key(cluster, kind.group, kind.kind, namespace, name))
        return copy.deepcopy(o) if o is not None else None

    def list(self, kind: ResourceType, cluster: str, namespace: Optional[str] = None, selector: Optional[str] = None) -> list[dict]:
        sel = parse_selector(selector) if selector else []
        out = [
            copy.deepcopy(o)
            for (c, g, k, ns, _), o in sorted(self._objects.items(), key=lambda kv: (kv[0][3] or "", kv[0][4]))
            if c == cluster and g == kind.group and k == kind.kind and (namespace is None or ns == namespace)
            and matches(sel, o["metadata"].get("labels") or {})
        ]
        return out

    def modify(self, kind: ResourceType, cluster: str, namespace: Optional[str], name: str, f: Callable[[dict], None]) -> bool:
        o = self._objects.get(self._key(cluster, kind.group, kind.kind, namespace, name))
        if o is None:
            return False
        f(o)
        o["metadata"]["resourceVersion"] = self._bump()
        return True

    def delete(self, kind: ResourceType, cluster: str, namespace: Optional[str], name: str) -> bool:
        k = self._key(cluster, kind.group, kind.kind, namespace, name)
        o = self._objects.get(k)
        if o is None:
            return False
        if o["metadata"].get("finalizers"):
            if "deletionTimestamp" not in o["metadata"]:
                o["metadata"]["deletionTimestamp"] = format_time(self.time)
                o["metadata"]["resourceVersion"] = self._bump()
        else:
            del self._objects[k]
        return True

    def _backend(self, reg: Optional[Registration]):
        world = self

        def allowed(cluster: str, r: ResourceType) -> None:
            if not any(c.name == cluster for c in world._clusters):
                raise ReadError("unknown-cluster", cluster)
            if reg is None:
                return
            p = world._primary()
            ok = (r.group == reg.primary.group and r.kind == reg.primary.kind and reg.primary_clusters.contains(cluster, p)) or any(
                w.resource.group == r.group and w.resource.kind == r.kind and w.clusters.contains(cluster, p) for w in reg.watches
            )
            if not ok:
                raise ReadError("not-watched", f"{r.api_version}/{r.kind} in cluster {cluster}")

        class Backend:
            def get(self, cluster, r, ns, name):
                allowed(cluster, r)
                o = world.get(r, cluster, ns, name)
                return None if o is None else json.dumps(o)

            def list(self, cluster, r, ns, sel):
                allowed(cluster, r)
                try:
                    return [json.dumps(o) for o in world.list(r, cluster, ns, sel)]
                except ValueError as e:
                    raise ReadError("invalid-selector", str(e)) from None

            def clusters(self):
                return world.clusters()

            def log(self, level, message, fields):
                world.logs.append((level, message, fields))

            def request_time(self):
                return world.time

            def settings(self):
                return world._settings

            def declare_settings_schema(self, schema):
                world._settings_schema = schema

        return Backend()

    def context(self, phase: str = "live") -> Context:
        return Context(self._backend(None), phase)  # type: ignore[arg-type]

    def validate(self, admission: AdmissionHandlers, req: AdmissionRequest, plugin: Optional[Plugin] = None) -> Verdict:
        """``validate`` for ``req`` as the host calls it: every matching handler, reading this
        world (only what ``plugin`` declares, when given, as the host serves a plugin's own
        caches), with its settings. An ``AdmissionError``, ``ReadError`` or ``ReconcileError``
        denies; anything else raised propagates (the host's 500: the rule's failure policy)."""
        backend = self._backend(self.register(plugin) if plugin is not None else None)
        with with_backend(backend):
            return admission.run_validate(Context(backend), req)  # type: ignore[arg-type]

    def mutate(self, admission: AdmissionHandlers, req: AdmissionRequest, plugin: Optional[Plugin] = None) -> Mutation:
        """``mutate`` for ``req`` as the host calls it (see ``validate``)."""
        backend = self._backend(self.register(plugin) if plugin is not None else None)
        with with_backend(backend):
            return admission.run_mutate(Context(backend), req)  # type: ignore[arg-type]

    def convert(self, conversion: ConversionHandlers, req: ConversionRequest, plugin: Optional[Plugin] = None) -> dict:
        """``convert`` for ``req`` as the host calls it, reading this world (only what
        ``plugin`` declares, when given). A refusal raises ``ConversionError``; anything else
        raised propagates (a trap). The host then checks the kind, name, namespace and uid are
        kept; ``inspect_component`` shows its verdict on the declared conversions."""
        backend = self._backend(self.register(plugin) if plugin is not None else None)
        with with_backend(backend):
            return conversion.run_convert(Context(backend), req)  # type: ignore[arg-type]

    def round_trip(self, conversion: ConversionHandlers, obj: dict, via: str, plugin: Optional[Plugin] = None) -> dict:
        """``obj`` converted to ``via`` and back to its own apiVersion with ``convert``:
        equal to ``obj`` when the conversion loses nothing."""
        there = self.convert(conversion, ConversionRequest(obj, via), plugin)
        return self.convert(conversion, ConversionRequest(there, obj.get("apiVersion", "")), plugin)

    def _step_for(self, reg: Registration, req: Request):
        o = self.get(reg.primary, req.cluster, req.namespace, req.name)
        if o is None:
            return None
        meta = o.get("metadata", {})
        in_scope = reg.primary_clusters.contains(req.cluster, self._primary()) and (
            reg.primary_selector is None or matches(parse_selector(reg.primary_selector), meta.get("labels") or {})
        )
        return _step(reg.finalizer is not None, in_scope, "deletionTimestamp" in meta, reg.finalizer in (meta.get("finalizers") or []))

    def reconcile(self, plugin: Plugin, req: Request) -> a.Outcome:
        """Runs the plugin for ``req`` as the host would; the outcome is returned, not applied."""
        reg = self.register(plugin)
        s = self._step_for(reg, req)
        if s is None or s == "ignore":
            return a.Outcome.done()
        phase = "live"
        if s == "add-finalizer":
            self.modify(reg.primary, req.cluster, req.namespace, req.name, lambda o: o["metadata"].setdefault("finalizers", []).append(reg.finalizer))
        else:
            phase = s[0]
        backend = self._backend(reg)
        try:
            with with_backend(backend):
                return dispatch(plugin, Context(backend, phase), req)  # type: ignore[arg-type]
        except Exception as e:
            raise to_reconcile_error(e).context(f"failed to reconcile {req}") from e

    def _check(self, reg: Registration, x: a.Action) -> None:
        verb = {a.Apply: "patch", a.Patch: "patch", a.Create: "create", a.Delete: "delete"}.get(type(x))
        if verb is None:
            return
        t = a.target_of(x)
        status = getattr(x, "status", False)
        p = self._primary()
        if not any(
            q.resource.group == t.resource.group and q.resource.kind == t.resource.kind and verb in q.verbs and (q.status or not status) and q.clusters.contains(t.cluster, p)
            for q in reg.permissions
        ):
            raise PermissionError(f"plugin {reg.name} may not {verb}{' the status of' if status else ''} {t.resource.api_version} {t.resource.kind} {t.namespace or ''}/{t.name} in cluster {t.cluster}")

    def _perform(self, x: a.Action) -> bool:
        if isinstance(x, a.Event):
            self.events.append(x)
            return False
        if isinstance(x, a.Create):
            x = self._named(x)
        t = a.target_of(x)
        k = self._key(t.cluster, t.resource.group, t.resource.kind, t.namespace, t.name)
        existing = self._objects.get(k)

        def bare(o):
            o = copy.deepcopy(o)
            o.get("metadata", {}).pop("resourceVersion", None)
            return canonical(o)

        def store(o: dict) -> bool:
            if existing is not None and bare(o) == bare(existing):
                return False
            if existing is None:
                self._stamp(o)
            else:
                o["metadata"]["resourceVersion"] = self._bump()
            self._objects[k] = o
            return True

        if isinstance(x, a.Create):
            return False if existing is not None else store(copy.deepcopy(x.object))
        if isinstance(x, a.Apply):
            body = copy.deepcopy(x.object)
            if existing is None:
                return store(body)
            nxt = copy.deepcopy(existing)
            if x.status:
                nxt["status"] = _merge(nxt.get("status") or {}, body.get("status") or {})
            else:
                body.pop("status", None)
                _merge(nxt, body)
            return store(nxt)
        if isinstance(x, a.Patch):
            if existing is None:
                raise LookupError(f"cannot patch absent {t.name} in cluster {t.cluster}")
            if x.resource_version is not None and x.resource_version != existing["metadata"].get("resourceVersion"):
                raise ValueError(f"conflict: {t.name} has resourceVersion {existing['metadata'].get('resourceVersion')}, not {x.resource_version}")
            if x.patch_type == "merge":
                nxt = copy.deepcopy(existing)
                patch = copy.deepcopy(x.patch)
                if x.status:
                    nxt["status"] = _merge(nxt.get("status") or {}, patch.get("status") or {})
                else:
                    patch.pop("status", None)
                    _merge(nxt, patch)
            else:
                nxt = _json_patch(existing, x.patch)
                if not x.status and "status" in existing:
                    nxt["status"] = copy.deepcopy(existing["status"])
            return store(nxt)
        if existing is None or (x.uid is not None and x.uid != existing["metadata"].get("uid")):
            return False
        return self.delete(t.resource, t.cluster, t.namespace, t.name)

    def apply(self, plugin: Plugin, req: Request, outcome: a.Outcome) -> bool:
        """Applies an outcome as the host would; returns whether the world changed (events do not count)."""
        reg = self.register(plugin)
        s = self._step_for(reg, req)
        release = isinstance(s, tuple) and s[1]
        for x in outcome.actions:
            self._check(reg, x)
        per_cluster: dict[str, list] = {}
        for x in outcome.actions:
            per_cluster.setdefault(a.target_of(x).cluster, []).append(x)
        changed, failed = False, []
        for actions in per_cluster.values():
            for x in actions:
                try:
                    changed = self._perform(x) or changed
                except (LookupError, ValueError) as e:
                    failed.append(str(e))
                    break
        if failed:
            raise RuntimeError("failed writes: " + "; ".join(failed))
        if outcome.finalized and release and reg.finalizer is not None:
            k = self._key(req.cluster, reg.primary.group, reg.primary.kind, req.namespace, req.name)
            o = self._objects.get(k)
            if o is not None:
                o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers", []) if f != reg.finalizer]
                if not o["metadata"]["finalizers"] and "deletionTimestamp" in o["metadata"]:
                    del self._objects[k]
                else:
                    o["metadata"]["resourceVersion"] = self._bump()
                changed = True
        return changed

    def converge(self, plugin: Plugin, req: Request, max_rounds: int = 10) -> list[a.Outcome]:
        """Reconcile → apply until a round changes nothing; returns every outcome."""
        outcomes = []
        for _ in range(max_rounds):
            o = self.reconcile(plugin, req)
            outcomes.append(o)
            if not self.apply(plugin, req, o):
                return outcomes
        raise AssertionError(f"{req} did not converge in {max_rounds} rounds; last outcome: {outcomes[-1]}")

    def assert_no_writes(self, plugin: Plugin, req: Request) -> None:
        writes = self.reconcile(plugin, req).writes()
        assert not writes, f"expected no writes for {req}, got {writes}"

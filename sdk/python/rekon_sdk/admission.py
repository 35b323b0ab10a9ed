"""The API side of a plugin: admission webhooks the host serves (``rekon run
--webhook-addr``) from the same component as the reconcile side.

Handlers are declared with decorators, as kopf's ``@kopf.on.validate`` and
``@kopf.on.mutate``; each one is one webhook (one rule)::

    admission = AdmissionHandlers()

    @admission.validate(WIDGET, timeout_seconds=5)
    def size(ctx, req):
        if req.object["spec"]["size"] > 10:
            raise AdmissionError("too large", code=422, fields={"spec.size": "must be at most 10"})

    @admission.mutate(WIDGET, operations=("create",))
    def tier(ctx, req):
        req.object["metadata"].setdefault("labels", {}).setdefault("tier", "standard")
        return req.object

The rule's name is the function's, ``_`` as ``-`` (``id=`` names it
otherwise). A validating handler returns a ``Verdict`` or ``None``
(allowed); a mutating one the object as it should be stored (a ``dict`` or a
``Mutation``: the host diffs it into the JSON Patch) or ``None`` (unchanged).
The host calls one ``validate`` and one ``mutate`` per plugin: every handler
whose rule admits the request's resource and operation runs, in declaration
order; a denial stops the rest, warnings add up, and each mutating handler
sees the object the previous one returned.

Export it beside the plugin's ``Guest``: ``Admission =
export_admission(admission)`` (``rekon_sdk.component_admission``); the
build (``rekon-py-build``) then targets world ``admission-plugin``. A
component without it has no webhook.

What is raised decides how a request fails: an ``AdmissionError`` denies
with its code (400 unless given) and fields; a ``ReadError`` or
``ReconcileError`` denies with 400 and its message (as ``?`` on an ``Err``
does in the Rust SDK); anything else (a bug: ``KeyError``...) traps, so the
host answers 500 and the API server applies the rule's failure policy.

The rules are checked once, by the host at load (``rekon_rules::admission``);
a test sees the host's verdict on them through
``rekon_sdk.testkit.inspect_component``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Optional

from .context import Context
from .errors import ReadError, ReconcileError
from .types import ResourceType

@dataclass
class AdmissionRule:
    """One webhook of the plugin (``<name>.<plugin>.rekon.dev`` in the configuration)."""

    name: str
    kind: str  # "validate" or "mutate"
    resources: list[ResourceType]
    operations: list[str] = field(default_factory=lambda: ["create", "update"])
    failure_policy: str = "fail"  # or "ignore"
    timeout_seconds: Optional[int] = None
    match_conditions: list[tuple[str, str]] = field(default_factory=list)

    def admits(self, resource: ResourceType, operation: str) -> bool:
        """Whether a request for ``resource`` and ``operation`` is this rule's."""
        return operation in self.operations and any(r.group == resource.group and r.kind == resource.kind for r in self.resources)


@dataclass
class UserInfo:
    """Who made a request."""

    username: str
    uid: str = ""
    groups: list[str] = field(default_factory=list)


@dataclass
class AdmissionRequest:
    """One admission request; its objects are the API's JSON as ``dict``s."""

    uid: str
    cluster: str
    resource: ResourceType
    operation: str
    name: str
    namespace: Optional[str] = None
    object: Optional[dict] = None
    old_object: Optional[dict] = None
    user: UserInfo = field(default_factory=lambda: UserInfo("kubernetes-admin", "", ["system:masters", "system:authenticated"]))
    dry_run: bool = False
    sub_resource: Optional[str] = None

    @staticmethod
    def _of(kind: ResourceType, cluster: str, operation: str, obj: Optional[dict], old: Optional[dict]) -> "AdmissionRequest":
        meta = (obj if obj is not None else old or {}).get("metadata") or {}
        return AdmissionRequest(
            uid="00000000-0000-0000-0000-000000000000",
            cluster=cluster,
            resource=kind,
            operation=operation,
            name=meta.get("name", ""),
            namespace=meta.get("namespace"),
            object=copy.deepcopy(obj),
            old_object=copy.deepcopy(old),
        )

    @staticmethod
    def create(kind: ResourceType, cluster: str, obj: dict) -> "AdmissionRequest":
        """A create of ``obj`` in ``cluster`` by ``kubernetes-admin`` (for tests)."""
        return AdmissionRequest._of(kind, cluster, "create", obj, None)

    @staticmethod
    def update(kind: ResourceType, cluster: str, old: dict, obj: dict) -> "AdmissionRequest":
        """An update of ``old`` to ``obj`` (for tests)."""
        return AdmissionRequest._of(kind, cluster, "update", obj, old)

    @staticmethod
    def delete(kind: ResourceType, cluster: str, obj: dict) -> "AdmissionRequest":
        """A delete of ``obj``: no object, ``old_object`` is the one deleted (for tests)."""
        return AdmissionRequest._of(kind, cluster, "delete", None, obj)


@dataclass
class Denial:
    """Why a request is refused: the message, the HTTP code, ``(path, message)`` of the fields."""

    message: str
    code: int = 403
    field_errors: list[tuple[str, str]] = field(default_factory=list)


class Verdict:
    """A validating webhook's answer: allowed, or denied; warnings either way."""

    def __init__(self, denial: Optional[Denial] = None, warnings: Iterable[str] = ()):
        self.denial = denial
        self.warnings = list(warnings)

    @staticmethod
    def allow(*warnings: str) -> "Verdict":
        """Allowed (with these warnings)."""
        return Verdict(None, warnings)

    @staticmethod
    def deny(message: str, code: int = 403, fields: Optional[dict[str, str]] = None) -> "Verdict":
        """Denied with ``message``, HTTP ``code`` (400 to 599) and ``fields`` (path: message)."""
        return Verdict(Denial(message, code, list((fields or {}).items())))

    def warn(self, warning: str) -> "Verdict":
        """Adds a warning for the client (``kubectl`` prints ``Warning: ...``); returns ``self``."""
        self.warnings.append(warning)
        return self

    @property
    def allowed(self) -> bool:
        return self.denial is None

    def __repr__(self) -> str:
        return f"Verdict(denial={self.denial!r}, warnings={self.warnings!r})"


class Mutation:
    """A mutating webhook's answer: ``Mutation(obj)`` stores ``obj`` (in full),
    ``Mutation.unchanged()``, or ``Mutation.deny(verdict)``; warnings with ``warn``."""

    def __init__(self, obj: Optional[dict] = None, verdict: Optional[Verdict] = None):
        self.object = copy.deepcopy(obj)
        self.verdict = verdict or Verdict.allow()

    @staticmethod
    def unchanged(*warnings: str) -> "Mutation":
        return Mutation(None, Verdict.allow(*warnings))

    @staticmethod
    def deny(verdict: Verdict) -> "Mutation":
        return Mutation(None, verdict)

    def warn(self, warning: str) -> "Mutation":
        self.verdict.warn(warning)
        return self

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed

    @property
    def warnings(self) -> list[str]:
        return self.verdict.warnings

    def __repr__(self) -> str:
        return f"Mutation(object={self.object!r}, verdict={self.verdict!r})"


class AdmissionError(Exception):
    """Raised from a handler: denies the request with ``code`` (400 unless
    given) and ``fields`` (path: message), as kopf's ``AdmissionError``."""

    def __init__(self, message: str, code: int = 400, fields: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.fields = dict(fields or {})

    def verdict(self) -> Verdict:
        return Verdict.deny(self.message, self.code, self.fields)


def _raised_verdict(e: Exception) -> Optional[Verdict]:
    """The denial a raised exception stands for; ``None`` when it must trap."""
    if isinstance(e, AdmissionError):
        return e.verdict()
    if isinstance(e, (ReadError, ReconcileError)):
        return Verdict.deny(e.message, 400)
    return None


Handler = Callable[[Context, AdmissionRequest], object]


class AdmissionHandlers:
    """The admission side of a plugin: its handlers and their rules (named so
    that the app module's ``Admission``, the export componentize-py looks
    for, does not hide it)."""

    def __init__(self) -> None:
        self._handlers: list[tuple[AdmissionRule, Handler]] = []

    def _on(self, kind: str, resources: tuple[ResourceType, ...], id: Optional[str], operations: Iterable[str],
            failure_policy: str, timeout_seconds: Optional[int], match_conditions: Optional[dict[str, str]]):
        def decorate(fn: Handler) -> Handler:
            rule = AdmissionRule(
                name=id or fn.__name__.replace("_", "-"),
                kind=kind,
                resources=list(resources),
                operations=[o.lower() for o in operations],
                failure_policy=failure_policy.lower(),
                timeout_seconds=timeout_seconds,
                match_conditions=list((match_conditions or {}).items()),
            )
            self._handlers.append((rule, fn))
            return fn

        return decorate

    def validate(self, *resources: ResourceType, id: Optional[str] = None, operations: Iterable[str] = ("create", "update"),
                 failure_policy: str = "fail", timeout_seconds: Optional[int] = None,
                 match_conditions: Optional[dict[str, str]] = None):
        """Decorates a validating handler ``(ctx, req) -> Verdict | None`` for ``resources``."""
        return self._on("validate", resources, id, operations, failure_policy, timeout_seconds, match_conditions)

    def mutate(self, *resources: ResourceType, id: Optional[str] = None, operations: Iterable[str] = ("create", "update"),
               failure_policy: str = "fail", timeout_seconds: Optional[int] = None,
               match_conditions: Optional[dict[str, str]] = None):
        """Decorates a mutating handler ``(ctx, req) -> dict | Mutation | None`` for ``resources``."""
        return self._on("mutate", resources, id, operations, failure_policy, timeout_seconds, match_conditions)

    def rules(self) -> list[AdmissionRule]:
        """The webhooks, one per handler, in declaration order."""
        return [copy.deepcopy(rule) for rule, _ in self._handlers]

    def _matching(self, kind: str, req: AdmissionRequest) -> list[Handler]:
        return [fn for rule, fn in self._handlers if rule.kind == kind and rule.admits(req.resource, req.operation)]

    def run_validate(self, ctx: Context, req: AdmissionRequest) -> Verdict:
        """``validate`` as the host calls it (see the module for what is raised)."""
        warnings: list[str] = []
        for fn in self._matching("validate", req):
            try:
                v = fn(ctx, req)
            except Exception as e:
                v = _raised_verdict(e)
                if v is None:
                    raise
            if v is None:
                continue
            if not isinstance(v, Verdict):
                raise TypeError(f"validating handler {fn.__name__} returned {type(v).__name__}, not a Verdict or None")
            warnings += v.warnings
            if not v.allowed:
                return Verdict(v.denial, warnings)
        return Verdict(None, warnings)

    def run_mutate(self, ctx: Context, req: AdmissionRequest) -> Mutation:
        """``mutate`` as the host calls it: the handlers chained (see the module)."""
        current, changed, warnings = req.object, False, []
        for fn in self._matching("mutate", req):
            try:
                m = fn(ctx, replace(req, object=copy.deepcopy(current)))
            except Exception as e:
                v = _raised_verdict(e)
                if v is None:
                    raise
                m = Mutation.deny(v)
            if m is None:
                continue
            if isinstance(m, dict):
                m = Mutation(m)
            if not isinstance(m, Mutation):
                raise TypeError(f"mutating handler {fn.__name__} returned {type(m).__name__}, not a dict, Mutation or None")
            warnings += m.warnings
            if not m.allowed:
                return Mutation.deny(Verdict(m.verdict.denial, warnings))
            if m.object is not None:
                current, changed = m.object, True
        return Mutation(current if changed else None, Verdict(None, warnings))


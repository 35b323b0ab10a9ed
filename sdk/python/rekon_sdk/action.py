"""Actions a plugin returns and the ``Outcome`` carrying them (mirrors the Rust SDK's builders)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Optional, Union

from .kinds import typed
from .types import Request, ResourceType


@dataclass(frozen=True)
class ObjectRef:
    cluster: str
    resource: ResourceType
    name: str
    namespace: Optional[str] = None

    @staticmethod
    def new(kind: ResourceType, cluster: str, namespace: Optional[str], name: str) -> "ObjectRef":
        return ObjectRef(cluster=cluster, resource=kind, namespace=namespace, name=name)

    @staticmethod
    def for_request(kind: ResourceType, req: Request) -> "ObjectRef":
        return ObjectRef(cluster=req.cluster, resource=kind, namespace=req.namespace, name=req.name)


@dataclass(frozen=True)
class Apply:
    cluster: str
    object: dict
    status: bool = False
    force: bool = False

    def with_status(self) -> "Apply":
        return replace(self, status=True)

    def forced(self) -> "Apply":
        return replace(self, force=True)


@dataclass(frozen=True)
class Patch:
    target: ObjectRef
    patch_type: Literal["merge", "json"]
    patch: Any
    resource_version: Optional[str] = None
    status: bool = False

    def with_status(self) -> "Patch":
        return replace(self, status=True)

    def guarded(self, resource_version: Optional[str]) -> "Patch":
        return self if resource_version is None else replace(self, resource_version=resource_version)


@dataclass(frozen=True)
class Delete:
    target: ObjectRef
    uid: Optional[str] = None
    propagation: Optional[Literal["background", "foreground", "orphan"]] = None

    def with_uid(self, uid: Optional[str]) -> "Delete":
        return self if uid is None else replace(self, uid=uid)

    def with_propagation(self, p: Literal["background", "foreground", "orphan"]) -> "Delete":
        return replace(self, propagation=p)


@dataclass(frozen=True)
class Create:
    cluster: str
    object: dict


@dataclass(frozen=True)
class Event:
    regarding: ObjectRef
    event_type: Literal["normal", "warning"]
    reason: str
    action: str
    note: str


Action = Union[Apply, Patch, Delete, Create, Event]


def apply(cluster: str, kind: ResourceType, obj: dict) -> Apply:
    return Apply(cluster, typed(kind, obj))


def merge_patch(target: ObjectRef, patch: Any) -> Patch:
    return Patch(target, "merge", patch)


def json_patch(target: ObjectRef, ops: list) -> Patch:
    return Patch(target, "json", ops)


def delete(target: ObjectRef) -> Delete:
    return Delete(target)


def create(cluster: str, kind: ResourceType, obj: dict) -> Create:
    return Create(cluster, typed(kind, obj))


def normal_event(regarding: ObjectRef, reason: str, action: str, note: str) -> Event:
    return Event(regarding, "normal", reason, action, note)


def warning_event(regarding: ObjectRef, reason: str, action: str, note: str) -> Event:
    return Event(regarding, "warning", reason, action, note)


def is_write(a: Action) -> bool:
    return not isinstance(a, Event)


def target_of(a: Action) -> ObjectRef:
    """The object an action targets."""
    if isinstance(a, (Apply, Create)):
        meta = a.object.get("metadata") or {}
        group, _, version = (a.object.get("apiVersion") or "").rpartition("/")
        ns = meta.get("namespace")
        kind = ResourceType(group, version, a.object.get("kind") or "", "", "namespaced" if ns is not None else "cluster")
        return ObjectRef(cluster=a.cluster, resource=kind, namespace=ns, name=meta.get("name") or "")
    if isinstance(a, Event):
        return a.regarding
    return a.target


@dataclass
class Outcome:
    """The result of a successful reconcile."""

    actions: list = field(default_factory=list)
    requeue_after_ms: Optional[int] = None
    finalized: bool = False
    keep_finalizer: bool = False

    @staticmethod
    def done() -> "Outcome":
        return Outcome()

    @staticmethod
    def with_actions(actions: Iterable[Action]) -> "Outcome":
        return Outcome(actions=list(actions))

    def push(self, action: Action) -> "Outcome":
        self.actions.append(action)
        return self

    def requeue_after(self, ms: float) -> "Outcome":
        self.requeue_after_ms = math.ceil(ms)
        return self

    def keeping_finalizer(self) -> "Outcome":
        self.keep_finalizer = True
        return self

    def writes(self) -> list:
        return [a for a in self.actions if is_write(a)]

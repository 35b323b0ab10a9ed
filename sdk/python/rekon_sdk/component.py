"""The component glue for componentize-py.

A plugin's app module says ``Guest = export_plugin(MyPlugin())``; the only
module that imports the generated ``wit_world`` bindings, so plugin code and
its pytest tests never see them.
"""
from __future__ import annotations

import json

from componentize_py_types import Err  # type: ignore[import-not-found]
from wit_world.imports import host  # type: ignore[import-not-found]
from wit_world.imports import types as wit  # type: ignore[import-not-found]

from . import action as a
from .context import Context
from .errors import ReadError, to_reconcile_error
from .plugin import Plugin, dispatch
from .settings import check_at_register, with_backend
from .types import ClusterInfo, ClusterSet, Mapping, Registration, Request, ResourceType, Timestamp

_SCOPE = {"namespaced": wit.Scope.NAMESPACED, "cluster": wit.Scope.CLUSTER}
_HEALTH = {wit.ClusterHealth.READY: "ready", wit.ClusterHealth.SYNCING: "syncing", wit.ClusterHealth.UNREACHABLE: "unreachable"}
_LEVEL = {"debug": wit.LogLevel.DEBUG, "info": wit.LogLevel.INFO, "warn": wit.LogLevel.WARN, "error": wit.LogLevel.ERROR}
_PHASE = {wit.Phase.LIVE: "live", wit.Phase.DELETING: "deleting", wit.Phase.LEAVING: "leaving"}


def _resource(r: ResourceType):
    return wit.Resource(group=r.group, version=r.version, kind=r.kind, plural=r.plural, scope=_SCOPE[r.scope])


def _read_error(e: Err) -> ReadError:
    v = e.value
    kind = {wit.ReadError_NotWatched: "not-watched", wit.ReadError_UnknownCluster: "unknown-cluster"}.get(type(v), "invalid-selector")
    return ReadError(kind, v.value)


class _HostBackend:
    def get(self, cluster, resource, namespace, name):
        try:
            return host.get(cluster, _resource(resource), namespace, name)
        except Err as e:
            raise _read_error(e) from None

    def list(self, cluster, resource, namespace, label_selector):
        try:
            return host.list(cluster, _resource(resource), namespace, label_selector)
        except Err as e:
            raise _read_error(e) from None

    def clusters(self):
        return [ClusterInfo(c.name, c.primary, _HEALTH[c.health]) for c in host.clusters()]

    def log(self, level, message, fields):
        host.log(_LEVEL[level], message, fields)

    def request_time(self):
        t = host.request_time()
        return Timestamp(t.seconds, t.nanoseconds)

    def settings(self):
        return host.settings()

    def declare_settings_schema(self, schema):
        host.settings_schema(schema)


def _cluster_set(s: ClusterSet):
    if s.tag == "named":
        return wit.ClusterSet_Named(list(s.names))
    return {"primary": wit.ClusterSet_Primary, "all": wit.ClusterSet_All, "others": wit.ClusterSet_Others}[s.tag]()


def _mapping(m: Mapping):
    if m.tag == "owner-labels":
        k = m.owner_labels
        return wit.Mapping_OwnerLabels(wit.OwnerLabels(cluster=k.cluster, namespace=k.namespace, name=k.name))
    if m.tag == "label-key-prefixes":
        return wit.Mapping_LabelKeyPrefixes(list(m.prefixes))
    return {
        "itself": wit.Mapping_Itself,
        "owner-reference": wit.Mapping_OwnerReference,
        "all-primaries": wit.Mapping_AllPrimaries,
        "custom": wit.Mapping_Custom,
    }[m.tag]()


def _registration(r: Registration):
    return wit.Registration(
        name=r.name,
        version=r.version,
        primary=_resource(r.primary),
        primary_clusters=_cluster_set(r.primary_clusters),
        primary_selector=r.primary_selector,
        clusters=_cluster_set(r.clusters),
        watches=[wit.Watch(resource=_resource(w.resource), clusters=_cluster_set(w.clusters), mapping=_mapping(w.mapping), label_selector=w.label_selector) for w in r.watches],
        finalizer=r.finalizer,
        permissions=[wit.Permission(resource=_resource(p.resource), verbs=list(p.verbs), status=p.status, clusters=_cluster_set(p.clusters)) for p in r.permissions],
        crds=[json.dumps(c) for c in r.crds],
        max_concurrent_reconciles=r.max_concurrent_reconciles,
    )


def _ref(o: a.ObjectRef):
    return wit.ObjectRef(cluster=o.cluster, resource=_resource(o.resource), namespace=o.namespace, name=o.name)


_PROPAGATION = {"background": wit.Propagation.BACKGROUND, "foreground": wit.Propagation.FOREGROUND, "orphan": wit.Propagation.ORPHAN}


def _action(x):
    if isinstance(x, a.Apply):
        return wit.Action_Apply(wit.ApplyAction(cluster=x.cluster, object=json.dumps(x.object), status=x.status, force=x.force))
    if isinstance(x, a.Patch):
        pt = wit.PatchType.MERGE if x.patch_type == "merge" else wit.PatchType.JSON
        return wit.Action_Patch(wit.PatchAction(target=_ref(x.target), patch_type=pt, patch=json.dumps(x.patch), resource_version=x.resource_version, status=x.status))
    if isinstance(x, a.Delete):
        p = None if x.propagation is None else _PROPAGATION[x.propagation]
        return wit.Action_Delete(wit.DeleteAction(target=_ref(x.target), uid=x.uid, propagation=p))
    if isinstance(x, a.Create):
        return wit.Action_Create(wit.CreateAction(cluster=x.cluster, object=json.dumps(x.object)))
    et = wit.EventType.NORMAL if x.event_type == "normal" else wit.EventType.WARNING
    return wit.Action_Event(wit.EventAction(regarding=_ref(x.regarding), event_type=et, reason=x.reason, action=x.action, note=x.note))


def export_plugin(plugin: Plugin):
    """The ``Guest`` class componentize-py exports for ``plugin``."""

    class Guest:
        def register(self):
            backend = _HostBackend()
            try:
                with with_backend(backend):
                    reg = plugin.register()
                    check_at_register(reg, backend)
                return _registration(reg)
            except Exception as e:  # a failed registration refuses the load
                raise Err(str(e)) from None

        def reconcile(self, request, phase):
            backend = _HostBackend()
            ctx = Context(backend, _PHASE[phase])
            req = Request(cluster=request.cluster, namespace=request.namespace, name=request.name)
            try:
                with with_backend(backend):
                    o = dispatch(plugin, ctx, req)
            except Exception as e:
                err = to_reconcile_error(e)
                raise Err(wit.ReconcileError(message=err.message, retryable=err.retryable)) from None
            return wit.Outcome(actions=[_action(x) for x in o.actions], requeue_after_ms=o.requeue_after_ms, finalized=o.finalized)

        def map(self, cluster, resource, obj):
            ctx = Context(_HostBackend())
            r = ResourceType(resource.group, resource.version, resource.kind, resource.plural, "cluster" if resource.scope == wit.Scope.CLUSTER else "namespaced")
            try:
                with with_backend(ctx._backend):
                    reqs = plugin.map(ctx, cluster, r, json.loads(obj)) if hasattr(plugin, "map") else []
            except Exception as e:
                ctx.warn(f"failed to map the object: {e}", cluster=cluster)
                return []
            return [wit.Request(cluster=q.cluster, namespace=q.namespace, name=q.name) for q in reqs]

    return Guest

"""The ``admission`` export for componentize-py: a plugin's app module says
``Admission = export_admission(admission)`` beside ``Guest``. Apart from
``component`` because it imports the bindings of world
``admission-plugin`` (``wit_world.exports.admission``), which a component
of world ``plugin`` does not have.
"""
from __future__ import annotations

import json

from wit_world.exports import admission as wit  # type: ignore[import-not-found]
from wit_world.imports import types as wit_types  # type: ignore[import-not-found]

from .admission import AdmissionHandlers, AdmissionRequest, AdmissionRule, UserInfo, Verdict
from .component import _HostBackend, _resource
from .context import Context
from .settings import with_backend
from .types import ResourceType

_OPERATION = {"create": wit.Operation.CREATE, "update": wit.Operation.UPDATE, "delete": wit.Operation.DELETE, "connect": wit.Operation.CONNECT}
_OPERATION_NAME = {v: k for k, v in _OPERATION.items()}


def _rule(r: AdmissionRule):
    return wit.AdmissionRule(
        name=r.name,
        kind=wit.AdmissionKind.MUTATE if r.kind == "mutate" else wit.AdmissionKind.VALIDATE,
        resources=[_resource(t) for t in r.resources],
        operations=[_OPERATION[o] for o in r.operations],
        failure_policy=wit.FailurePolicy.IGNORE if r.failure_policy == "ignore" else wit.FailurePolicy.FAIL,
        timeout_seconds=r.timeout_seconds,
        match_conditions=[wit.MatchCondition(name=n, expression=e) for n, e in r.match_conditions],
    )


def _request(r) -> AdmissionRequest:
    t = r.resource
    scope = "cluster" if t.scope == wit_types.Scope.CLUSTER else "namespaced"
    return AdmissionRequest(
        uid=r.uid,
        cluster=r.cluster,
        resource=ResourceType(t.group, t.version, t.kind, t.plural, scope),
        operation=_OPERATION_NAME[r.operation],
        name=r.name,
        namespace=r.namespace,
        object=None if r.object is None else json.loads(r.object),
        old_object=None if r.old_object is None else json.loads(r.old_object),
        user=UserInfo(r.user.username, r.user.uid, list(r.user.groups)),
        dry_run=r.dry_run,
        sub_resource=r.sub_resource,
    )


def _denial(v: Verdict):
    d = v.denial
    if d is None:
        return None
    return wit.Denial(message=d.message, code=d.code, field_errors=[wit.FieldError(path=p, message=m) for p, m in d.field_errors])


def export_admission(admission: AdmissionHandlers):
    """The ``Admission`` class componentize-py exports for ``admission``."""

    class Exported:
        def rules(self):
            return [_rule(r) for r in admission.rules()]

        def validate(self, request):
            backend = _HostBackend()
            with with_backend(backend):
                v = admission.run_validate(Context(backend), _request(request))
            return wit.Verdict(denied=_denial(v), warnings=list(v.warnings))

        def mutate(self, request):
            backend = _HostBackend()
            with with_backend(backend):
                m = admission.run_mutate(Context(backend), _request(request))
            obj = None if m.object is None else json.dumps(m.object)
            return wit.Mutation(object=obj, denied=_denial(m.verdict), warnings=list(m.warnings))

    return Exported

"""The ``policies`` export for componentize-py: a plugin's app module says
``Policies = export_policies([...])`` beside ``Guest``. Apart from
``component`` because it imports the bindings of a world with ``policies``
(``wit_world.exports.policies``), which other worlds do not have.
"""
from __future__ import annotations

from wit_world.exports import policies as wit  # type: ignore[import-not-found]

from .component import _resource
from .policies import Policy

_OPERATION = {"create": wit.PolicyOperation.CREATE, "update": wit.PolicyOperation.UPDATE,
              "delete": wit.PolicyOperation.DELETE, "connect": wit.PolicyOperation.CONNECT}
_REASON = {"unauthorized": wit.PolicyReason.UNAUTHORIZED, "forbidden": wit.PolicyReason.FORBIDDEN,
           "invalid": wit.PolicyReason.INVALID, "request-entity-too-large": wit.PolicyReason.REQUEST_ENTITY_TOO_LARGE}


def _policy(p: Policy):
    return wit.Policy(
        name=p.name,
        resources=[_resource(t) for t in p.resources],
        operations=[_OPERATION[o] for o in p.operations],
        failure_policy=wit.PolicyFailure.IGNORE if p.failure_policy == "ignore" else wit.PolicyFailure.FAIL,
        match_conditions=[wit.PolicyCondition(name=n, expression=e) for n, e in p.match_conditions],
        validations=[
            wit.PolicyValidation(
                expression=v.expression,
                message=v.message,
                message_expression=v.message_expression,
                reason=None if v.reason is None else _REASON[v.reason],
            )
            for v in p.validations
        ],
    )


def export_policies(policies: list[Policy]):
    """The ``Policies`` class componentize-py exports for ``policies``."""

    class Exported:
        def policies(self):
            return [_policy(p) for p in policies]

    return Exported

"""CEL admission policies a plugin declares (``wit/policies.wit``): checks
the API server evaluates itself, with no webhook in the request path.
``rekon policies DIR`` writes each as a ValidatingAdmissionPolicy and its
binding; the host compiles every expression with kube-cel when it loads
the plugin and refuses one whose CEL does not compile.

The app module exports them beside ``Guest``: ``Policies =
export_policies([Policy(...)])`` (``rekon_sdk.component_policies``); a
component without it declares none. The rules and the compile check live
once, in the host: a test runs them on the built component with
``rekon_sdk.testkit.inspect_component`` (its ``policies`` are what the host
read).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .types import ResourceType


@dataclass
class PolicyValidation:
    """One check: the request is refused when ``expression`` (CEL over
    ``object``, ``oldObject``, ``request``, ``namespaceObject``) is false."""

    expression: str
    message: Optional[str] = None
    message_expression: Optional[str] = None
    #: ``unauthorized``, ``forbidden`` (the server's default), ``invalid`` or ``request-entity-too-large``.
    reason: Optional[str] = None


@dataclass
class Policy:
    """One policy (``<name>.<plugin>.rekon.dev``)."""

    name: str
    resources: list[ResourceType]
    validations: list[PolicyValidation]
    operations: list[str] = field(default_factory=lambda: ["create", "update"])
    failure_policy: str = "fail"  # or "ignore"
    match_conditions: list[tuple[str, str]] = field(default_factory=list)

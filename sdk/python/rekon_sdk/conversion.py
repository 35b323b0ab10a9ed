"""Converting a plugin's CRDs between versions: the conversion webhook the
host serves (``/convert/<plugin>``) from the same component as the
reconcile side.

Converters are declared with a decorator, one per direction, as kopf
declares handlers::

    conversion = ConversionHandlers()

    @conversion.convert(WIDGET, "v1alpha1", "v1")
    def to_v1(ctx, obj):
        obj["spec"] = {"size": obj["spec"]["amount"]}
        return obj

    @conversion.convert(WIDGET, "v1", "v1alpha1")
    def to_v1alpha1(ctx, obj):
        obj["spec"] = {"amount": obj["spec"]["size"]}
        return obj

A converter gets a copy of the object at its version and returns it at the
other (a ``dict``); the SDK sets its ``apiVersion`` to the desired one. The
CRDs declared converted are those of the decorated resource types, between
every version their converters name (the host requires exactly the CRD's
versions). Keep ``metadata`` as it is: the host checks the kind, name,
namespace and uid are kept, as the API server does.

Export it beside the plugin's ``Guest``: ``Conversion =
export_conversion(conversion)`` (``rekon_sdk.component_conversion``); the
build (``rekon-py-build``) then targets world ``conversion-plugin`` (or
``admission-conversion-plugin`` beside ``Admission``). A component without
it converts nothing.

A ``ConversionError`` (or a ``ReadError`` / ``ReconcileError``) raised by a
converter fails the API server's request with its message, as does a
direction no converter handles; anything else raised traps, which fails it
too, with the trap.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from .context import Context
from .errors import ReadError, ReconcileError
from .types import ResourceType


def version_of(api_version: str) -> str:
    """The version of an apiVersion (``v1alpha1`` of ``example.dev/v1alpha1``)."""
    return api_version.rsplit("/", 1)[-1]


def _group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@dataclass
class Conversion:
    """One CRD the plugin converts, between all its versions."""

    group: str
    kind: str
    plural: str
    versions: list[str]


@dataclass
class ConversionRequest:
    """One object to convert (its JSON as a ``dict``) and the apiVersion it is converted to."""

    object: dict
    desired_api_version: str

    @property
    def version(self) -> str:
        """The object's version."""
        return version_of(self.object.get("apiVersion", ""))

    @property
    def desired_version(self) -> str:
        """The desired version."""
        return version_of(self.desired_api_version)


class ConversionError(Exception):
    """Raised by a converter: the API server's request fails with the message."""


Converter = Callable[[Context, dict], dict]


class ConversionHandlers:
    """A plugin's converters, declared with ``@conversion.convert(KIND, FROM, TO)``."""

    def __init__(self) -> None:
        self._converters: list[tuple[ResourceType, str, str, Converter]] = []

    def convert(self, resource: ResourceType, from_version: str, to_version: str):
        """Decorates a converter ``(ctx, obj) -> dict`` of ``resource`` from ``from_version`` to ``to_version``."""

        def decorate(fn: Converter) -> Converter:
            self._converters.append((resource, from_version, to_version, fn))
            return fn

        return decorate

    def conversions(self) -> list[Conversion]:
        """The CRDs converted, with every version their converters name, in declaration order."""
        out: dict[tuple[str, str, str], list[str]] = {}
        for r, a, b, _ in self._converters:
            versions = out.setdefault((r.group, r.kind, r.plural), [])
            versions += [v for v in (a, b) if v not in versions]
        return [Conversion(g, k, p, vs) for (g, k, p), vs in out.items()]

    def run_convert(self, ctx: Context, req: ConversionRequest) -> dict:
        """``convert`` as the host calls it: the converter of the object's
        kind and direction; raises ``ConversionError`` for a refusal (see
        the module), anything else for a trap."""
        api_version = req.object.get("apiVersion", "")
        kind = req.object.get("kind", "")
        for r, a, b, fn in self._converters:
            if (r.group, r.kind, a, b) == (_group_of(api_version), kind, req.version, req.desired_version):
                try:
                    out = fn(ctx, copy.deepcopy(req.object))
                except (ReadError, ReconcileError) as e:
                    raise ConversionError(str(e)) from None
                if not isinstance(out, dict):
                    raise TypeError(f"converter {fn.__name__} returned {type(out).__name__}, not a dict")
                return {**out, "apiVersion": req.desired_api_version}
        raise ConversionError(f"no converter of {kind} from {api_version} to {req.desired_api_version}")

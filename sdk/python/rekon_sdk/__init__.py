"""rekon_sdk — write rekon plugins in Python.

The same shape as the Rust ``rekon-sdk``: a ``Plugin`` with a primary kind,
a ``Registration`` builder, a typed ``Context`` over the host's caches,
action builders in an ``Outcome``, ``Apply``/``Cleanup`` events with a
structural finalizer, retryable vs terminal ``ReconcileError``.

| module | what |
|---|---|
| ``types`` | dataclasses of the WIT vocabulary, ``Registration`` |
| ``kinds`` | built-in resource types |
| ``context`` | ``Context``, ``status_changed`` |
| ``action`` | action builders, ``Outcome`` |
| ``plugin`` | ``Plugin``, ``Apply``/``Cleanup``, ``dispatch`` |
| ``errors`` | ``ReconcileError``, ``ReadError`` |
| ``admission`` | ``AdmissionHandlers`` (``@admission.validate``/``@admission.mutate``), ``Verdict``, ``Mutation``, ``AdmissionError``, ``AdmissionRequest`` |
| ``conversion`` | ``ConversionHandlers`` (``@conversion.convert(KIND, FROM, TO)``), ``ConversionRequest``, ``ConversionError`` |
| ``settings`` | typed plugin settings: ``dataclass_settings``, ``settings`` |
| ``component`` | ``export_plugin``: the component's ``Guest`` (componentize-py) |
| ``component_admission`` | ``export_admission``: the component's ``Admission`` (world ``admission-plugin``) |
| ``component_conversion`` | ``export_conversion``: the component's ``Conversion`` (world ``conversion-plugin``) |
| ``policies`` | ``Policy``, ``PolicyValidation``: CEL admission policies the API server evaluates |
| ``component_policies`` | ``export_policies``: the component's ``Policies`` (world ``policies-plugin``, or with admission/conversion) |
| ``testkit`` | ``World`` and recorded-case replay under pytest |
| ``build`` | ``rekon-py-build``: the component build |
"""
from . import action, kinds
from .admission import AdmissionError, AdmissionHandlers, AdmissionRequest, AdmissionRule, Mutation, UserInfo, Verdict
from .action import ObjectRef, Outcome
from .context import Context, canonical, status_changed
from .conversion import Conversion, ConversionError, ConversionHandlers, ConversionRequest, version_of
from .policies import Policy, PolicyValidation
from .errors import ReadError, ReconcileError
from .plugin import Apply, Cleanup, Plugin, dispatch
from .settings import SETTINGS_REFUSAL_PREFIX, dataclass_settings, settings
from .types import (
    ALL,
    ALL_PRIMARIES,
    CUSTOM,
    ITSELF,
    OTHERS,
    OWNER_REFERENCE,
    PRIMARY,
    ClusterInfo,
    ClusterSet,
    Mapping,
    OwnerLabels,
    Registration,
    Request,
    ResourceType,
    Timestamp,
    format_time,
    named,
)

__all__ = [
    "action", "kinds", "ObjectRef", "Outcome", "Context", "canonical", "status_changed",
    "ReadError", "ReconcileError", "Apply", "Cleanup", "Plugin", "dispatch", "ALL",
    "ALL_PRIMARIES", "CUSTOM", "ITSELF", "OTHERS", "OWNER_REFERENCE", "PRIMARY", "ClusterInfo",
    "ClusterSet", "Mapping", "OwnerLabels", "Registration", "Request", "ResourceType", "Timestamp",
    "format_time", "named", "SETTINGS_REFUSAL_PREFIX", "dataclass_settings", "settings",
    "AdmissionError", "AdmissionHandlers", "AdmissionRequest", "AdmissionRule", "Mutation", "UserInfo", "Verdict",
    "Conversion", "ConversionError", "ConversionHandlers", "ConversionRequest", "version_of",
    "Policy", "PolicyValidation",
]

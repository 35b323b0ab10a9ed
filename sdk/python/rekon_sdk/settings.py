"""Typed plugin settings: what an operator configures per plugin instance.

The same protocol as the Rust SDK's ``rekon_sdk::settings``: a plugin
declares a settings type with ``Registration.with_settings(type)``; at every
load the SDK parses what the host gives (``None`` when nothing was given)
and refuses the load with ``invalid settings: <reason>`` (the host reports
``InvalidSettings`` and keeps the serving version); settings given to a
plugin that declares none are refused; the type's JSON Schema is handed to
the host (``rekon plugin inspect`` prints it). Read them with
``ctx.settings(type)`` in ``reconcile``/``map`` and ``settings(type)`` in
``register``.

A settings type is anything with a ``schema`` (a JSON Schema dict) and a
``parse(raw)`` that returns the settings or raises; ``dataclass_settings``
makes one from a dataclass (unknown fields refused, field types checked,
defaults from the dataclass, an optional ``validate()`` method run).
"""
from __future__ import annotations

import dataclasses
import json
import typing
from contextlib import contextmanager
from typing import Any, Generic, Iterator, Optional, Protocol, TypeVar

from .errors import ReconcileError

#: The start of a ``register`` error refusing the settings: the same literal
#: as the host's ``rekon_rules::settings::REFUSAL_PREFIX`` (documented in
#: ``wit/host.wit``; a test checks the text there).
SETTINGS_REFUSAL_PREFIX = "invalid settings: "

S = TypeVar("S")


class SettingsType(Protocol[S]):  # type: ignore[misc]
    """A settings type: its JSON Schema and how raw JSON becomes it."""

    schema: dict

    def parse(self, raw: Any) -> S: ...


def parse_settings(kind: "SettingsType[S]", text: Optional[str]) -> S:
    """Settings text parsed with ``kind`` (``None``: none given). Raises the reason."""
    return kind.parse(None if text is None else json.loads(text))


_current: list = []


@contextmanager
def with_backend(backend) -> Iterator[None]:
    """Makes ``backend`` the current call's, for ``settings()``."""
    _current.append(backend)
    try:
        yield
    finally:
        _current.pop()


def settings(kind: "SettingsType[S]") -> S:
    """The settings of the current call as ``kind`` (use it in ``register``). Raises a terminal ``ReconcileError``."""
    text = _current[-1].settings() if _current else None
    try:
        return parse_settings(kind, text)
    except Exception as e:  # noqa: BLE001 - any failure is the reason
        raise ReconcileError.terminal(f"{SETTINGS_REFUSAL_PREFIX}{e}") from None


def check_at_register(reg, backend) -> None:
    """What ``register`` checks (refusal as ``ValueError``), then hands the schema to the host."""
    given = backend.settings()
    kind = getattr(reg, "settings_type", None)
    if kind is None:
        if given is not None:
            raise ValueError(f"{SETTINGS_REFUSAL_PREFIX}this plugin takes no settings (it declares no settings type)")
        return
    try:
        parse_settings(kind, given)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{SETTINGS_REFUSAL_PREFIX}{e}") from None
    backend.declare_settings_schema(json.dumps(kind.schema))


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_of(t: Any) -> dict:
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return _schema_of(inner[0]) if len(inner) == 1 else {}
    if origin in (list, tuple):
        return {"type": "array", "items": _schema_of(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(args[1]) if len(args) == 2 else {}}
    if dataclasses.is_dataclass(t):
        return _dataclass_schema(t)
    return {"type": _JSON_TYPES[t]} if t in _JSON_TYPES else {}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _dataclass_schema(cls) -> dict:
    hints = typing.get_type_hints(cls)
    props = {}
    required = []
    for f in dataclasses.fields(cls):
        props[_camel(f.name)] = _schema_of(hints[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(_camel(f.name))
    schema: dict = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _check(t: Any, v: Any, where: str) -> Any:
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Union and type(None) in args:
        if v is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check(inner[0], v, where) if len(inner) == 1 else v
    if origin in (list, tuple):
        if not isinstance(v, list):
            raise ValueError(f"{where}: expected an array, got {json.dumps(v)}")
        return [_check(args[0], x, f"{where}[{i}]") if args else x for i, x in enumerate(v)]
    if origin is dict:
        if not isinstance(v, dict):
            raise ValueError(f"{where}: expected an object, got {json.dumps(v)}")
        return {k: _check(args[1], x, f"{where}.{k}") if len(args) == 2 else x for k, x in v.items()}
    if dataclasses.is_dataclass(t):
        return _build(t, v, where)
    if t in _JSON_TYPES:
        ok = isinstance(v, t) and not (t is int and isinstance(v, bool))
        if t is float and isinstance(v, int) and not isinstance(v, bool):
            ok = True
        if not ok:
            raise ValueError(f"{where}: expected {_JSON_TYPES[t]}, got {json.dumps(v)}")
    return v


def _build(cls, raw: Any, where: str):
    if not isinstance(raw, dict):
        raise ValueError(f"{where or 'settings'}: expected an object, got {json.dumps(raw)}")
    hints = typing.get_type_hints(cls)
    by_key = {_camel(f.name): f for f in dataclasses.fields(cls)}
    unknown = [k for k in raw if k not in by_key]
    if unknown:
        raise ValueError(f"unknown field `{unknown[0]}`, expected one of {', '.join(sorted(by_key))}")
    values = {}
    for key, f in by_key.items():
        if key in raw:
            values[f.name] = _check(hints[f.name], raw[key], f"{where}.{key}" if where else key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"missing field `{key}`")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


class dataclass_settings(Generic[S]):
    """A settings type from a dataclass: camelCase JSON keys, unknown keys refused,
    field types checked, dataclass defaults for what is absent, ``validate()`` (if
    the class has one; raise to refuse) run on the result."""

    def __init__(self, cls: type[S]):
        self.cls = cls
        self.schema = _dataclass_schema(cls)

    def parse(self, raw: Any) -> S:
        if raw is None:
            raw = {}
        return _build(self.cls, raw, "")

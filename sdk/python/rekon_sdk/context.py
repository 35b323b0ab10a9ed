"""``Context``: typed reads from the host's caches, clusters, log, request time.

Backed by the host imports in a component and by the test kit natively.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Protocol

from .types import ClusterInfo, Phase, ResourceType, Timestamp, format_time


class Backend(Protocol):
    """Where a context gets its data; objects are JSON text, as over the WIT."""

    def get(self, cluster: str, resource: ResourceType, namespace: Optional[str], name: str) -> Optional[str]: ...
    def list(self, cluster: str, resource: ResourceType, namespace: Optional[str], label_selector: Optional[str]) -> list[str]: ...
    def clusters(self) -> list[ClusterInfo]: ...
    def log(self, level: str, message: str, fields: list[tuple[str, str]]) -> None: ...
    def request_time(self) -> Timestamp: ...
    def settings(self) -> Optional[str]: ...
    def declare_settings_schema(self, schema: str) -> None: ...


class Context:
    """What a plugin can see during one call."""

    def __init__(self, backend: Backend, phase: Phase = "live"):
        self._backend = backend
        self.phase: Phase = phase

    def get(self, kind: ResourceType, cluster: str, namespace: Optional[str], name: str) -> Optional[dict]:
        """The object, or None. Raises ``ReadError``."""
        text = self._backend.get(cluster, kind, namespace, name)
        return None if text is None else json.loads(text)

    def list(self, kind: ResourceType, cluster: str, namespace: Optional[str] = None, label_selector: Optional[str] = None) -> list[dict]:
        """Objects of a kind, optionally in one namespace and matching a label selector. Raises ``ReadError``."""
        return [json.loads(t) for t in self._backend.list(cluster, kind, namespace, label_selector)]

    def clusters(self) -> list[ClusterInfo]:
        return self._backend.clusters()

    def settings(self, kind: Any) -> Any:
        """The plugin's settings as ``kind`` (the type its registration declares): what the
        operator configured, or the defaults. Validated at load, so this raises (a terminal
        ``ReconcileError``) only for another type."""
        from .errors import ReconcileError
        from .settings import SETTINGS_REFUSAL_PREFIX, parse_settings

        try:
            return parse_settings(kind, self._backend.settings())
        except Exception as e:  # noqa: BLE001
            raise ReconcileError.terminal(f"{SETTINGS_REFUSAL_PREFIX}{e}") from None

    def primary_cluster(self) -> Optional[str]:
        return next((c.name for c in self.clusters() if c.primary), None)

    def now(self) -> Timestamp:
        return self._backend.request_time()

    def now_seconds(self) -> str:
        """The request time as a Kubernetes ``Time`` string, whole seconds."""
        return format_time(self._backend.request_time())

    def log(self, level: str, message: str, **fields: Any) -> None:
        self._backend.log(level, message, [(k, str(v)) for k, v in fields.items()])

    def debug(self, message: str, **fields: Any) -> None:
        self.log("debug", message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        self.log("info", message, **fields)

    def warn(self, message: str, **fields: Any) -> None:
        self.log("warn", message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.log("error", message, **fields)


def canonical(v: Any) -> str:
    """JSON text with sorted keys: equal values give equal text."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def status_changed(stored: Any, computed: Any) -> bool:
    """Whether ``computed`` differs from ``stored`` as JSON; nothing stored always differs."""
    return stored is None or canonical(stored) != canonical(computed)

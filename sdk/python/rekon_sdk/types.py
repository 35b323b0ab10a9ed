"""The vocabulary of the WIT contract (``wit/types.wit``) as dataclasses.

The component glue (``rekon_sdk.component``) converts them to the
bindings componentize-py generates; nothing here depends on those.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

Scope = Literal["namespaced", "cluster"]
Phase = Literal["live", "deleting", "leaving"]
ClusterHealth = Literal["ready", "syncing", "unreachable"]
LogLevel = Literal["debug", "info", "warn", "error"]


@dataclass(frozen=True)
class ResourceType:
    """A Kubernetes resource type (``batch/v1 Job``, plural ``jobs``)."""

    group: str
    version: str
    kind: str
    plural: str
    scope: Scope

    @staticmethod
    def of(api_version: str, kind: str, plural: str, scope: Scope) -> "ResourceType":
        group, _, version = api_version.rpartition("/")
        return ResourceType(group, version, kind, plural, scope)

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"


@dataclass(frozen=True)
class Request:
    """The key of one object to reconcile (level-based: no payload)."""

    cluster: str
    name: str
    namespace: Optional[str] = None

    @staticmethod
    def namespaced(cluster: str, namespace: str, name: str) -> "Request":
        return Request(cluster=cluster, namespace=namespace, name=name)

    @staticmethod
    def cluster_scoped(cluster: str, name: str) -> "Request":
        return Request(cluster=cluster, name=name)

    def __str__(self) -> str:
        if self.namespace is None:
            return f"{self.cluster}/{self.name}"
        return f"{self.cluster}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClusterSet:
    """A set of clusters: ``primary``, ``all``, ``others`` or ``named``."""

    tag: Literal["primary", "all", "others", "named"]
    names: tuple[str, ...] = ()

    def contains(self, cluster: str, primary: Optional[str]) -> bool:
        if self.tag == "primary":
            return primary == cluster
        if self.tag == "all":
            return True
        if self.tag == "others":
            return primary is not None and primary != cluster
        return cluster in self.names


PRIMARY = ClusterSet("primary")
ALL = ClusterSet("all")
OTHERS = ClusterSet("others")


def named(*names: str) -> ClusterSet:
    return ClusterSet("named", tuple(names))


@dataclass
class ClusterInfo:
    name: str
    primary: bool
    health: ClusterHealth = "ready"

    @property
    def is_ready(self) -> bool:
        return self.health == "ready"


@dataclass(frozen=True)
class Timestamp:
    seconds: int
    nanoseconds: int = 0


def format_time(t: Timestamp) -> str:
    """RFC 3339 with whole seconds, as a Kubernetes ``Time`` serializes."""
    return datetime.datetime.fromtimestamp(t.seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class OwnerLabels:
    """Label keys on a child naming its primary (possibly in another cluster).

    A sharded host caches on each replica only the objects naming one of its
    own primaries (and those naming none): a reconcile sees its primary's
    children, not another shard's."""

    cluster: str
    namespace: str
    name: str

    def labels_for(self, owner: Request) -> dict[str, str]:
        labels = {self.cluster: owner.cluster}
        if owner.namespace is not None:
            labels[self.namespace] = owner.namespace
        labels[self.name] = owner.name
        return labels

    def owner_of(self, labels: Optional[dict[str, str]]) -> Optional[Request]:
        labels = labels or {}
        if self.cluster not in labels or self.name not in labels:
            return None
        ns = labels.get(self.namespace) or None
        return Request(cluster=labels[self.cluster], namespace=ns, name=labels[self.name])


@dataclass(frozen=True)
class Mapping:
    """How an event on a watched object becomes requests."""

    tag: Literal["itself", "owner-reference", "owner-labels", "label-key-prefixes", "all-primaries", "custom"]
    owner_labels: Optional[OwnerLabels] = None
    prefixes: tuple[str, ...] = ()

    @staticmethod
    def label_key_prefixes(*prefixes: str) -> "Mapping":
        return Mapping("label-key-prefixes", prefixes=prefixes)

    @staticmethod
    def by_owner_labels(keys: OwnerLabels) -> "Mapping":
        return Mapping("owner-labels", owner_labels=keys)


ITSELF = Mapping("itself")
OWNER_REFERENCE = Mapping("owner-reference")
ALL_PRIMARIES = Mapping("all-primaries")
CUSTOM = Mapping("custom")


@dataclass
class Watch:
    resource: ResourceType
    clusters: ClusterSet
    mapping: Mapping
    label_selector: Optional[str] = None


@dataclass
class Permission:
    resource: ResourceType
    verbs: list[str]
    status: bool
    clusters: ClusterSet


@dataclass
class Registration:
    """What a plugin declares. Builder methods mutate and return ``self``."""

    name: str
    version: str
    primary: ResourceType
    primary_clusters: ClusterSet = PRIMARY
    primary_selector: Optional[str] = None
    clusters: ClusterSet = PRIMARY
    watches: list[Watch] = field(default_factory=list)
    finalizer: Optional[str] = None
    permissions: list[Permission] = field(default_factory=list)
    crds: list[dict] = field(default_factory=list)
    max_concurrent_reconciles: Optional[int] = None
    #: The settings type, if the plugin takes settings (``with_settings``).
    settings_type: Any = None

    def with_settings(self, kind: Any) -> "Registration":
        """The plugin takes settings of ``kind`` (see ``rekon_sdk.settings``): validated at
        every load, its schema handed to the host. Without it, any settings refuse the load."""
        self.settings_type = kind
        return self

    def in_clusters(self, s: ClusterSet) -> "Registration":
        self.primary_clusters = s
        return self

    def selector(self, selector: str) -> "Registration":
        self.primary_selector = selector
        return self

    def requeue_on(self, s: ClusterSet) -> "Registration":
        self.clusters = s
        return self

    def watch(self, resource: ResourceType, clusters: ClusterSet, mapping: Mapping) -> "Registration":
        self.watches.append(Watch(resource, clusters, mapping))
        return self

    def with_finalizer(self, name: str) -> "Registration":
        self.finalizer = name
        return self

    def permission(self, resource: ResourceType, verbs: list[str], clusters: ClusterSet) -> "Registration":
        self.permissions.append(Permission(resource, list(verbs), False, clusters))
        return self

    def status_permission(self, resource: ResourceType, verbs: list[str], clusters: ClusterSet) -> "Registration":
        self.permissions.append(Permission(resource, list(verbs), True, clusters))
        return self

    def crd(self, manifest: dict) -> "Registration":
        self.crds.append(manifest)
        return self

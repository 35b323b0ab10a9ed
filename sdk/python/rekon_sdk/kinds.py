"""Resource types of the built-in kinds.

Objects are the JSON the Kubernetes API speaks, as ``dict``s: the
``kubernetes`` client's models are classes with snake_case attributes that
need its ApiClient to (de)serialize and pull urllib3 and more into an 18 MB
component; a plugin reads and writes API JSON, so JSON it is. The
TypedDicts in ``rekon_sdk.objects`` type the fields plugins touch most.
"""
from .types import ResourceType

CONFIG_MAP = ResourceType("", "v1", "ConfigMap", "configmaps", "namespaced")
SECRET = ResourceType("", "v1", "Secret", "secrets", "namespaced")
SERVICE = ResourceType("", "v1", "Service", "services", "namespaced")
POD = ResourceType("", "v1", "Pod", "pods", "namespaced")
NAMESPACE = ResourceType("", "v1", "Namespace", "namespaces", "cluster")
NODE = ResourceType("", "v1", "Node", "nodes", "cluster")
DEPLOYMENT = ResourceType("apps", "v1", "Deployment", "deployments", "namespaced")
STATEFUL_SET = ResourceType("apps", "v1", "StatefulSet", "statefulsets", "namespaced")
DAEMON_SET = ResourceType("apps", "v1", "DaemonSet", "daemonsets", "namespaced")
JOB = ResourceType("batch", "v1", "Job", "jobs", "namespaced")
CRON_JOB = ResourceType("batch", "v1", "CronJob", "cronjobs", "namespaced")
RUNTIME_CLASS = ResourceType("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "cluster")
LEASE = ResourceType("coordination.k8s.io", "v1", "Lease", "leases", "namespaced")


def typed(kind: ResourceType, obj: dict) -> dict:
    """``obj`` with ``apiVersion`` and ``kind`` of ``kind`` filled in."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}

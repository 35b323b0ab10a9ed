"""The NodePool validation written as a Python author would write it without
rekon: a kopf validating handler (``@kopf.on.validate``) served by kopf's
own HTTPS webhook server. The rules rekon's nodepool plugin checks without
its cache (``plugins/nodepool``, ``validate``):

- each taint's effect is ``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``;
- each label key and taint key is a qualified name, each label value a valid
  label value (Kubernetes' ``IsQualifiedName``, ``IsValidLabelValue``);
- each taint value is a valid label value;
- a pool's labels carry no role label (``node-role.kubernetes.io/<x>``):
  another pool's would make its nodes join that pool, and its own is set by
  whoever assigns a node to the pool.

Denied with HTTP 422 and every problem in one message. The kopf peer of
tests/bench/admission_peers.py (a bench, not a product):

    KOPF_WEBHOOK_PORT=8443 KOPF_CERT=tls.crt KOPF_KEY=tls.key \\
        kopf run --standalone nodepool_kopf_validate.py

kopf serves the handler at ``https://127.0.0.1:$KOPF_WEBHOOK_PORT/nodepool``
(its path is the handler's id). It configures no webhook configuration
(``settings.admission.managed`` unset): the bench posts reviews to it.
"""
from __future__ import annotations

import os
import re

import kopf

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ROLE_PREFIX = "node-role.kubernetes.io/"
NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.level = 100
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["KOPF_WEBHOOK_PORT"]),
        certfile=os.environ["KOPF_CERT"],
        pkeyfile=os.environ["KOPF_KEY"],
    )


def name_ok(name: str) -> bool:
    return 0 < len(name) <= 63 and NAME.match(name) is not None


def qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and all(DNS_LABEL.match(p) for p in prefix.split("."))):
        return False
    return name_ok(name)


def problems(pool: str, spec: dict) -> list[str]:
    found = []
    for key, value in (spec.get("labels") or {}).items():
        if not qualified_name(key):
            found.append(f"spec.labels[{key}]: Invalid value: {key!r}: not a qualified name")
        if value and not name_ok(value):
            found.append(f"spec.labels[{key}]: Invalid value: {value}: not a valid label value")
        role = key[len(ROLE_PREFIX):] if key.startswith(ROLE_PREFIX) else ""
        if role == pool:
            found.append(f"spec.labels[{key}]: Forbidden: the pool's own role label is set by "
                         "whoever assigns a node to the pool")
        elif role:
            found.append(f"spec.labels[{key}]: Forbidden: may not claim pool {role!r}'s role label")
    for i, taint in enumerate(spec.get("taints") or []):
        key = taint.get("key") or ""
        if not qualified_name(key):
            found.append(f"spec.taints[{i}].key: Invalid value: {key!r}: not a qualified name")
        value = taint.get("value") or ""
        if value and not name_ok(value):
            found.append(f"spec.taints[{i}].value: Invalid value: {value!r}: not a valid label value")
        effect = taint.get("effect") or ""
        if not effect:
            found.append(f"spec.taints[{i}].effect: Required value")
        elif effect not in TAINT_EFFECTS:
            found.append(
                f"spec.taints[{i}].effect: Unsupported value: {effect!r}: supported values: "
                '"NoSchedule", "PreferNoSchedule", "NoExecute"'
            )
    return found


@kopf.on.validate("nodes.lailin.xyz", "v1", "nodepools", id="nodepool")
def nodepool(name, spec, **_):
    found = problems(name or "", dict(spec or {}))
    if found:
        raise kopf.AdmissionError(", ".join(found), code=422)

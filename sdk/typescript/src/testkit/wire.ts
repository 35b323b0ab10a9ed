/**
 * Decisions in the host's case format (`host/src/record.rs`): what `rekon
 * run --record` writes as a case's `outcome`, so a native replay compares
 * exactly what `rekon plugin replay` compares.
 */
import type { Action, ObjectRef, Outcome } from "../action.js";
import { toReconcileError } from "../errors.js";

const cap = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

function redacted(v: unknown, redact: boolean): unknown {
  const obj = v as { kind?: string; [k: string]: unknown };
  if (!redact || obj?.kind !== "Secret") return v;
  const out: Record<string, unknown> = { ...obj };
  for (const field of ["data", "stringData"]) {
    const entries = out[field] as Record<string, unknown> | undefined;
    if (entries && typeof entries === "object") {
      out[field] = Object.fromEntries(Object.keys(entries).map((k) => [k, "<redacted>"]));
    }
  }
  return out;
}

function ref(o: ObjectRef) {
  return {
    cluster: o.cluster,
    resource: { ...o.resource, scope: o.resource.scope === "cluster" ? "Cluster" : "Namespaced" },
    namespace: o.namespace ?? null,
    name: o.name,
  };
}

/** An action as the host records it (`{"apply": {...}}`, objects as JSON). */
export function actionValue(a: Action, redact = false): unknown {
  // Through JSON text and back, as the action crosses the WIT.
  const json = (v: unknown) => redacted(JSON.parse(JSON.stringify(v)), redact);
  switch (a.type) {
    case "apply":
      return { apply: { cluster: a.cluster, object: json(a.object), status: a.status, force: a.force } };
    case "patch":
      return {
        patch: {
          target: ref(a.target),
          patch_type: cap(a.patchType),
          patch: json(a.patch),
          resource_version: a.resourceVersion ?? null,
          status: a.status,
        },
      };
    case "delete":
      return {
        delete: { target: ref(a.target), uid: a.uid ?? null, propagation: a.propagation ? cap(a.propagation) : null },
      };
    case "create":
      return { create: { cluster: a.cluster, object: json(a.object) } };
    case "event":
      return {
        event: {
          regarding: ref(a.regarding),
          event_type: cap(a.eventType),
          reason: a.reason,
          action: a.action,
          note: a.note,
        },
      };
  }
}

/** The decision of a call (`Outcome` or a thrown error) as the host records it. */
export function outcomeValue(plugin: string, run: () => Outcome, redact = false): unknown {
  try {
    const o = run();
    const ok: Record<string, unknown> = { actions: o.actions.map((a) => actionValue(a, redact)) };
    if (o.requeueAfterMs !== undefined) ok.requeueAfterMs = o.requeueAfterMs;
    if (o.finalized) ok.finalized = true;
    return { ok };
  } catch (e) {
    const err = toReconcileError(e);
    return {
      error: {
        kind: "plugin_error",
        message: `plugin ${plugin} failed to reconcile: ${err.message}`,
        retryable: err.retryable,
      },
    };
  }
}

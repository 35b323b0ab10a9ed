/// <reference path="./host.d.ts" />
/**
 * The component glue: `export const guest = exportPlugin(plugin)` in a
 * plugin's entry module makes it the `rekon:plugin/guest@0.3.1` export
 * componentize-js builds; `export const admission =
 * exportAdmission(admission)` beside it adds the optional
 * `rekon:plugin/admission@0.3.1` export (world `admission-plugin`, chosen
 * by `rekon-build` when the entry exports `admission`); `export const
 * conversion = exportConversion(convert)` the optional
 * `rekon:plugin/conversion@0.3.1` export (world `conversion-plugin`, or
 * `admission-conversion-plugin` with both). The only module
 * that imports the host; plugin code and tests never see the WIT
 * representation.
 */
import * as host from "rekon:plugin/host@0.3.1";
import { type Convert, runConvert } from "./conversion.js";
import { type Admission, type AdmissionRequest, type AdmissionRule, type Mutation, type Operation, type Verdict, runMutate, runValidate } from "./admission.js";
import type { Action, ObjectRef } from "./action.js";
import { type Backend, Context } from "./context.js";
import { ReadError, type ReadErrorKind, toReconcileError } from "./errors.js";
import { type Plugin, dispatch } from "./plugin.js";
import type { Policies } from "./policies.js";
import type { KubeObject } from "./resources.js";
import type { Mapping, Registration } from "./registration.js";
import { checkSettingsAtRegister, withBackend } from "./settings.js";
import type { Phase, Request, ResourceType } from "./types.js";

/**
 * The engine `rekon-build` built the component for (an esbuild define):
 * `quickjs` (componentize-qjs) or `starlingmonkey` (componentize-js). Both
 * bind the WIT as jco does (records as objects, variants as {tag, val}, a
 * result's error thrown with its value in `payload`) with two differences
 * handled here: componentize-qjs passes u64/s64 as numbers (jco: bigint)
 * and an absent option as null (jco: undefined).
 */
declare const __REKON_ENGINE__: string | undefined;
const QUICKJS = typeof __REKON_ENGINE__ !== "undefined" && __REKON_ENGINE__ === "quickjs";

/** A u64 for the host, in the representation of the engine's bindings. */
function u64(n: number): bigint | number {
  return QUICKJS ? n : BigInt(n);
}

function readError(e: unknown): unknown {
  const payload = (e as { payload?: { tag: ReadErrorKind; val: string } }).payload;
  return payload ? new ReadError(payload.tag, payload.val) : e;
}

const hostBackend: Backend = {
  get(cluster, resource, namespace, name) {
    try {
      return host.get(cluster, resource, namespace, name) ?? undefined;
    } catch (e) {
      throw readError(e);
    }
  },
  list(cluster, resource, namespace, labelSelector) {
    try {
      return host.list(cluster, resource, namespace, labelSelector);
    } catch (e) {
      throw readError(e);
    }
  },
  clusters: () => host.clusters(),
  log: (level, message, fields) => host.log(level, message, fields),
  requestTime() {
    const t = host.requestTime();
    return { seconds: Number(t.seconds), nanoseconds: t.nanoseconds };
  },
  settings: () => host.settings() ?? undefined,
  declareSettingsSchema: (schema) => host.settingsSchema(schema),
};

/** A component's error result: jco takes the `payload` of what is thrown. */
class ComponentError {
  constructor(readonly payload: unknown) {}
}

function witRequest(r: Request) {
  return { cluster: r.cluster, namespace: r.namespace, name: r.name };
}

function witMapping(m: Mapping) {
  return m.tag === "owner-labels"
    ? { tag: m.tag, val: { cluster: m.val.cluster, namespace: m.val.namespace, name: m.val.name } }
    : m;
}

function witRef(o: ObjectRef) {
  return { cluster: o.cluster, resource: o.resource, namespace: o.namespace, name: o.name };
}

function witAction(a: Action) {
  switch (a.type) {
    case "apply":
      return { tag: "apply", val: { cluster: a.cluster, object: JSON.stringify(a.object), status: a.status, force: a.force } };
    case "patch":
      return {
        tag: "patch",
        val: {
          target: witRef(a.target),
          patchType: a.patchType,
          patch: JSON.stringify(a.patch),
          resourceVersion: a.resourceVersion,
          status: a.status,
        },
      };
    case "delete":
      return { tag: "delete", val: { target: witRef(a.target), uid: a.uid, propagation: a.propagation } };
    case "create":
      return { tag: "create", val: { cluster: a.cluster, object: JSON.stringify(a.object) } };
    case "event":
      return {
        tag: "event",
        val: { regarding: witRef(a.regarding), eventType: a.eventType, reason: a.reason, action: a.action, note: a.note },
      };
  }
}

/** The registration in the WIT representation. */
export function witRegistration(r: Registration) {
  return {
    name: r.name,
    version: r.version,
    primary: r.primary,
    primaryClusters: r.primaryClusters,
    primarySelector: r.primarySelector,
    clusters: r.clusters,
    watches: r.watches.map((w) => ({
      resource: w.resource,
      clusters: w.clusters,
      mapping: witMapping(w.mapping),
      labelSelector: w.labelSelector,
    })),
    finalizer: r.finalizer,
    permissions: r.permissions,
    crds: r.crds.map((c) => JSON.stringify(c)),
    maxConcurrentReconciles: r.maxConcurrentReconciles,
  };
}

/** The `guest` export of a component serving `plugin`. */
export function exportPlugin<T extends KubeObject>(plugin: Plugin<T>) {
  return {
    register() {
      try {
        return withBackend(hostBackend, () => {
          const reg = plugin.register();
          checkSettingsAtRegister(reg, hostBackend);
          return witRegistration(reg);
        });
      } catch (e) {
        throw new ComponentError(e instanceof Error ? e.message : String(e));
      }
    },
    reconcile(request: Request, phase: Phase) {
      const ctx = new Context(hostBackend, phase);
      try {
        const o = withBackend(hostBackend, () =>
          dispatch(plugin, ctx, { cluster: request.cluster, namespace: request.namespace ?? undefined, name: request.name }),
        );
        return {
          actions: o.actions.map(witAction),
          requeueAfterMs: o.requeueAfterMs === undefined ? undefined : u64(o.requeueAfterMs),
          finalized: o.finalized,
        };
      } catch (e) {
        const err = toReconcileError(e);
        throw new ComponentError({ message: err.message, retryable: err.retryable });
      }
    },
    map(cluster: string, resource: ResourceType, object: string) {
      const ctx = new Context(hostBackend);
      if (!plugin.map) return [];
      try {
        const map = plugin.map.bind(plugin);
        return withBackend(hostBackend, () => map(ctx, cluster, resource, JSON.parse(object) as KubeObject)).map(witRequest);
      } catch (e) {
        ctx.warn(`failed to map the object: ${e instanceof Error ? e.message : String(e)}`, { cluster });
        return [];
      }
    },
  };
}

function witRule(r: AdmissionRule) {
  return {
    name: r.name,
    kind: r.kind,
    resources: r.resources,
    operations: r.operations,
    failurePolicy: r.failurePolicy,
    timeoutSeconds: r.timeoutSeconds,
    matchConditions: r.matchConditions,
  };
}

/** The WIT `admission-request` (jco's representation; null or undefined for an absent option). */
interface WitAdmissionRequest {
  uid: string;
  cluster: string;
  resource: ResourceType;
  subResource?: string | null;
  operation: Operation;
  namespace?: string | null;
  name: string;
  object?: string | null;
  oldObject?: string | null;
  user: { username: string; uid: string; groups: string[] };
  dryRun: boolean;
}

function fromWitRequest(r: WitAdmissionRequest): AdmissionRequest {
  const parse = (t: string | null | undefined) => (t === null || t === undefined ? undefined : (JSON.parse(t) as KubeObject));
  return {
    uid: r.uid,
    cluster: r.cluster,
    resource: r.resource,
    subResource: r.subResource ?? undefined,
    operation: r.operation,
    namespace: r.namespace ?? undefined,
    name: r.name,
    object: parse(r.object),
    oldObject: parse(r.oldObject),
    user: r.user,
    dryRun: r.dryRun,
  };
}

function witDenial(v: Verdict) {
  const d = v.denial;
  return d === undefined ? undefined : { message: d.message, code: d.code, fieldErrors: d.fieldErrors.map((f) => ({ path: f.path, message: f.message })) };
}

/**
 * The `admission` export of a component serving `admission`. What
 * `validate`/`mutate` throw denies or traps as `runValidate`/`runMutate`
 * say; a throwing `rules()` traps the load.
 */
export function exportAdmission(admission: Admission) {
  return {
    rules() {
      return withBackend(hostBackend, () => admission.rules()).map(witRule);
    },
    validate(request: WitAdmissionRequest) {
      const ctx = new Context(hostBackend);
      const v = withBackend(hostBackend, () => runValidate(admission, ctx, fromWitRequest(request)));
      return { denied: witDenial(v), warnings: v.warnings };
    },
    mutate(request: WitAdmissionRequest) {
      const ctx = new Context(hostBackend);
      const m: Mutation = withBackend(hostBackend, () => runMutate(admission, ctx, fromWitRequest(request)));
      return {
        object: m.object === undefined ? undefined : JSON.stringify(m.object),
        denied: witDenial(m.verdict),
        warnings: m.warnings,
      };
    },
  };
}

/**
 * The `conversion` export of a component serving `conversion`. What
 * `convert` throws on purpose refuses the conversion with its message;
 * anything else traps (see `runConvert`); a throwing `conversions()` traps
 * the load.
 */
export function exportConversion(conversion: Convert) {
  return {
    conversions() {
      return withBackend(hostBackend, () => conversion.conversions()).map((c) => ({
        group: c.group,
        kind: c.kind,
        plural: c.plural,
        versions: [...c.versions],
      }));
    },
    convert(object: string, desiredApiVersion: string): string {
      const ctx = new Context(hostBackend);
      const out = withBackend(hostBackend, () =>
        runConvert(conversion, ctx, { object: JSON.parse(object) as KubeObject, desiredApiVersion }),
      );
      if ("error" in out) throw new ComponentError(out.error);
      return JSON.stringify(out.ok);
    },
  };
}

/**
 * The `policies` export of a component declaring CEL admission policies
 * (`export const policies = exportPolicies(gadgetPolicies)`). A throwing
 * `policies()` traps the load.
 */
export function exportPolicies(policies: Policies) {
  return {
    policies() {
      return withBackend(hostBackend, () => policies.policies()).map((p) => ({
        name: p.name,
        resources: p.resources,
        operations: p.operations,
        failurePolicy: p.failurePolicy,
        matchConditions: p.matchConditions,
        validations: p.validations.map((v) => ({
          expression: v.expression,
          message: v.message,
          messageExpression: v.messageExpression,
          reason: v.reason,
        })),
      }));
    },
  };
}

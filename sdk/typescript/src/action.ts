/**
 * Actions a plugin returns, and the {@link Outcome} that carries them.
 * Every builder mirrors the Rust SDK's `Action::...`.
 */
import { type Kind, type KubeObject, typed } from "./resources.js";
import { type Request, type ResourceType, apiVersion } from "./types.js";

/** The object an action targets. */
export interface ObjectRef {
  cluster: string;
  resource: ResourceType;
  namespace?: string;
  name: string;
}

/** The object `name` of `kind` in `cluster` (`namespace` for namespaced kinds). */
export function objectRef(kind: ResourceType, cluster: string, namespace: string | undefined, name: string): ObjectRef {
  return { cluster, resource: { ...kind }, namespace, name };
}

/** The object a request names, as `kind`. */
export function refForRequest(kind: ResourceType, req: Request): ObjectRef {
  return objectRef(kind, req.cluster, req.namespace, req.name);
}

export type PatchType = "merge" | "json";
export type Propagation = "background" | "foreground" | "orphan";
export type EventType = "normal" | "warning";

export interface ApplyAction {
  type: "apply";
  cluster: string;
  object: KubeObject;
  status: boolean;
  force: boolean;
}
export interface PatchAction {
  type: "patch";
  target: ObjectRef;
  patchType: PatchType;
  patch: unknown;
  resourceVersion?: string;
  status: boolean;
}
export interface DeleteAction {
  type: "delete";
  target: ObjectRef;
  uid?: string;
  propagation?: Propagation;
}
export interface CreateAction {
  type: "create";
  cluster: string;
  object: KubeObject;
}
export interface EventAction {
  type: "event";
  regarding: ObjectRef;
  eventType: EventType;
  reason: string;
  action: string;
  note: string;
}

/** One decision, performed by the host. */
export type Action = ApplyAction | PatchAction | DeleteAction | CreateAction | EventAction;

/** The builders. Each returns a plain action object; modifiers return a copy. */
export const Action = {
  /** Server-side apply of `obj` (its `apiVersion`/`kind` filled from `kind`). */
  apply<T extends KubeObject>(cluster: string, kind: Kind<T>, obj: T): ApplyAction {
    return { type: "apply", cluster, object: typed(kind, obj), status: false, force: false };
  },
  /** Server-side apply of an untyped object (it names its own apiVersion and kind). */
  applyJson(cluster: string, object: KubeObject): ApplyAction {
    return { type: "apply", cluster, object, status: false, force: false };
  },
  /** An RFC 7386 merge patch. */
  mergePatch(target: ObjectRef, patch: unknown): PatchAction {
    return { type: "patch", target, patchType: "merge", patch, status: false };
  },
  /** An RFC 6902 JSON patch (`ops` is the array of operations). */
  jsonPatch(target: ObjectRef, ops: unknown[]): PatchAction {
    return { type: "patch", target, patchType: "json", patch: ops, status: false };
  },
  /** Delete (an absent object is success). */
  delete(target: ObjectRef): DeleteAction {
    return { type: "delete", target };
  },
  /** Create `obj` unless it exists. */
  create<T extends KubeObject>(cluster: string, kind: Kind<T>, obj: T): CreateAction {
    return { type: "create", cluster, object: typed(kind, obj) };
  },
  /** Create an untyped object unless it exists. */
  createJson(cluster: string, object: KubeObject): CreateAction {
    return { type: "create", cluster, object };
  },
  /** A Kubernetes Event about `regarding`. */
  event(regarding: ObjectRef, eventType: EventType, reason: string, action: string, note: string): EventAction {
    return { type: "event", regarding, eventType, reason, action, note };
  },
  normalEvent(regarding: ObjectRef, reason: string, action: string, note: string): EventAction {
    return Action.event(regarding, "normal", reason, action, note);
  },
  warningEvent(regarding: ObjectRef, reason: string, action: string, note: string): EventAction {
    return Action.event(regarding, "warning", reason, action, note);
  },
  /** The apply or patch, on the `status` subresource. */
  status<A extends ApplyAction | PatchAction>(a: A): A {
    return { ...a, status: true };
  },
  /** The apply, taking ownership of fields other managers own. */
  force(a: ApplyAction): ApplyAction {
    return { ...a, force: true };
  },
  /** The patch, guarded by `resourceVersion`. */
  guarded(p: PatchAction, resourceVersion: string | undefined): PatchAction {
    return resourceVersion === undefined ? p : { ...p, resourceVersion };
  },
  /** The delete, only of this UID. */
  uid(d: DeleteAction, uid: string | undefined): DeleteAction {
    return uid === undefined ? d : { ...d, uid };
  },
  /** The delete, with a propagation policy. */
  propagation(d: DeleteAction, propagation: Propagation): DeleteAction {
    return { ...d, propagation };
  },
};

/** Whether the action writes (everything but events). */
export function isWrite(a: Action): boolean {
  return a.type !== "event";
}

/** The cluster an action concerns. */
export function actionCluster(a: Action): string {
  switch (a.type) {
    case "apply":
    case "create":
      return a.cluster;
    case "patch":
    case "delete":
      return a.target.cluster;
    case "event":
      return a.regarding.cluster;
  }
}

/** The object an action targets. */
export function actionTarget(a: Action): ObjectRef {
  switch (a.type) {
    case "apply":
    case "create": {
      const meta = a.object.metadata ?? {};
      const api = a.object.apiVersion ?? "";
      const slash = api.indexOf("/");
      return {
        cluster: a.cluster,
        resource: {
          group: slash < 0 ? "" : api.slice(0, slash),
          version: slash < 0 ? api : api.slice(slash + 1),
          kind: a.object.kind ?? "",
          plural: "",
          scope: meta.namespace === undefined ? "cluster" : "namespaced",
        },
        namespace: meta.namespace,
        name: meta.name ?? "",
      };
    }
    case "patch":
    case "delete":
      return a.target;
    case "event":
      return a.regarding;
  }
}

/** The result of a successful reconcile. */
export class Outcome {
  actions: Action[] = [];
  /** Reconcile again after this many milliseconds. */
  requeueAfterMs?: number;
  /** Set by the SDK for a cleanup that returned without `keepFinalizer`. */
  finalized = false;
  /** A cleanup that is not complete yet: the finalizer stays. */
  keepFinalizer = false;

  /** Nothing to do. */
  static done(): Outcome {
    return new Outcome();
  }

  /** An outcome with these actions. */
  static withActions(actions: Iterable<Action>): Outcome {
    const o = new Outcome();
    o.actions.push(...actions);
    return o;
  }

  /** Adds an action (chainable). */
  with(action: Action): this {
    this.actions.push(action);
    return this;
  }

  /** Adds an action. */
  push(action: Action): void {
    this.actions.push(action);
  }

  /** Reconcile again after `ms` milliseconds (chainable). */
  requeueAfter(ms: number): this {
    this.requeueAfterMs = Math.ceil(ms);
    return this;
  }

  /** Keep the finalizer: cleanup is not done yet (chainable). */
  keepingFinalizer(): this {
    this.keepFinalizer = true;
    return this;
  }

  /** The write actions. */
  writes(): Action[] {
    return this.actions.filter(isWrite);
  }

  /** The actions of one type. */
  ofType<T extends Action["type"]>(type: T): Extract<Action, { type: T }>[] {
    return this.actions.filter((a): a is Extract<Action, { type: T }> => a.type === type);
  }
}

export { apiVersion };

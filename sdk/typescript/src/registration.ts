/**
 * {@link Registration}: what a plugin declares about itself — primary,
 * watches with their mappings, finalizer, permissions, CRDs. The host
 * checks it at load (`rekon plugin inspect` shows the verdict); the test
 * kit runs the same check through `rekon plugin inspect` on the built
 * component (see `testkit/inspect.ts`).
 */
import type { ClusterSet, ResourceType } from "./types.js";
import type { Request } from "./types.js";
import type { SettingsType } from "./settings.js";

/** Kubernetes RBAC verbs. */
export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "delete";

/** Label keys on a child naming its primary (possibly in another cluster). */
export class OwnerLabels {
  constructor(
    readonly cluster: string,
    readonly namespace: string,
    readonly name: string,
  ) {}

  /** The labels a child of `owner` carries. */
  labelsFor(owner: Request): Record<string, string> {
    const labels: Record<string, string> = { [this.cluster]: owner.cluster };
    if (owner.namespace !== undefined) labels[this.namespace] = owner.namespace;
    labels[this.name] = owner.name;
    return labels;
  }

  /** The primary these labels name, if they name one. */
  ownerOf(labels: Record<string, string> | undefined): Request | undefined {
    const cluster = labels?.[this.cluster];
    const name = labels?.[this.name];
    if (cluster === undefined || name === undefined) return undefined;
    const ns = labels?.[this.namespace];
    return ns === undefined || ns === "" ? { cluster, name } : { cluster, namespace: ns, name };
  }
}

/** How an event on a watched object becomes requests. */
export type Mapping =
  | { tag: "itself" }
  | { tag: "owner-reference" }
  | { tag: "owner-labels"; val: OwnerLabels }
  | { tag: "label-key-prefixes"; val: string[] }
  | { tag: "all-primaries" }
  | { tag: "custom" };

/**
 * Mapping builders. With `ownerLabels`, a sharded host caches on each
 * replica only the objects naming one of its own primaries (and those
 * naming none): a reconcile sees its primary's children, not another
 * shard's.
 */
export const Mapping = {
  itself: { tag: "itself" } as Mapping,
  ownerReference: { tag: "owner-reference" } as Mapping,
  ownerLabels: (keys: OwnerLabels): Mapping => ({ tag: "owner-labels", val: keys }),
  labelKeyPrefixes: (prefixes: string[]): Mapping => ({ tag: "label-key-prefixes", val: [...prefixes] }),
  allPrimaries: { tag: "all-primaries" } as Mapping,
  custom: { tag: "custom" } as Mapping,
};

export interface Watch {
  resource: ResourceType;
  clusters: ClusterSet;
  mapping: Mapping;
  labelSelector?: string;
}

export interface Permission {
  resource: ResourceType;
  verbs: Verb[];
  status: boolean;
  clusters: ClusterSet;
}

/** What a plugin declares. Builder methods mutate and return `this`. */
export class Registration {
  primaryClusters: ClusterSet = { tag: "primary" };
  primarySelector?: string;
  clusters: ClusterSet = { tag: "primary" };
  watches: Watch[] = [];
  finalizer?: string;
  permissions: Permission[] = [];
  /** CRD manifests as JSON values. */
  crds: unknown[] = [];
  maxConcurrentReconciles?: number;
  /** The settings type, if the plugin takes settings ({@link Registration.withSettings}). */
  settingsType?: SettingsType<unknown>;

  constructor(
    readonly name: string,
    readonly version: string,
    readonly primary: ResourceType,
  ) {}

  /** Clusters whose primaries are reconciled (default: the primary cluster). */
  inClusters(set: ClusterSet): this {
    this.primaryClusters = set;
    return this;
  }

  /** Narrow the primaries by a label selector. */
  selector(selector: string): this {
    this.primarySelector = selector;
    return this;
  }

  /** Clusters whose (dis)engagement requeues every primary. */
  requeueOn(set: ClusterSet): this {
    this.clusters = set;
    return this;
  }

  /** Watch `resource` in `clusters`, mapping its events with `mapping`. */
  watch(resource: ResourceType, clusters: ClusterSet, mapping: Mapping): this {
    this.watches.push({ resource: { ...resource }, clusters, mapping });
    return this;
  }

  /** The finalizer the host adds to every primary. */
  withFinalizer(name: string): this {
    this.finalizer = name;
    return this;
  }

  /** Allow `verbs` on `resource` in `clusters`. */
  permission(resource: ResourceType, verbs: Verb[], clusters: ClusterSet): this {
    this.permissions.push({ resource: { ...resource }, verbs: [...verbs], status: false, clusters });
    return this;
  }

  /** Allow `verbs` on `resource` and its `status` subresource. */
  statusPermission(resource: ResourceType, verbs: Verb[], clusters: ClusterSet): this {
    this.permissions.push({ resource: { ...resource }, verbs: [...verbs], status: true, clusters });
    return this;
  }

  /** Own a CRD (its manifest as a JSON value). */
  crd(manifest: unknown): this {
    this.crds.push(manifest);
    return this;
  }

  /**
   * The plugin takes settings of `type`: validated at every load (invalid
   * ones refuse the load with the reason), its schema handed to the host.
   * Without this, any settings refuse the load.
   */
  withSettings<S>(type: SettingsType<S>): this {
    this.settingsType = type;
    return this;
  }

  /** Upper bound of concurrent reconciles. */
  concurrency(n: number): this {
    this.maxConcurrentReconciles = n;
    return this;
  }
}

/**
 * The vocabulary of the WIT contract (`wit/types.wit`), as TypeScript
 * values a plugin author writes. The component glue (`component.ts`)
 * converts them to the WIT representation; nothing here depends on it.
 */

/** Whether a resource lives in a namespace or at cluster scope. */
export type Scope = "namespaced" | "cluster";

/** A Kubernetes resource type (`batch/v1 Job`, plural `jobs`). */
export interface ResourceType {
  /** API group; empty for the core group. */
  group: string;
  /** Version within the group (`v1`). */
  version: string;
  /** Kind, CamelCase. */
  kind: string;
  /** Plural as used in URLs and RBAC; may be empty (the host resolves it). */
  plural: string;
  /** Namespaced or cluster-scoped. */
  scope: Scope;
}

/** `group/version`, or `version` for the core group. */
export function apiVersion(r: ResourceType): string {
  return r.group === "" ? r.version : `${r.group}/${r.version}`;
}

/** A resource type spelled out: `resource("example.com/v1", "Widget", "widgets", "namespaced")`. */
export function resource(
  apiVersionText: string,
  kind: string,
  plural: string,
  scope: Scope,
): ResourceType {
  const slash = apiVersionText.indexOf("/");
  const [group, version] =
    slash < 0
      ? ["", apiVersionText]
      : [apiVersionText.slice(0, slash), apiVersionText.slice(slash + 1)];
  return { group, version, kind, plural, scope };
}

/** The key of one object to reconcile (level-based: no event payload). */
export interface Request {
  /** The cluster the object lives in. */
  cluster: string;
  /** Namespace, for namespaced resources. */
  namespace?: string;
  /** Object name. */
  name: string;
}

/** A request for a namespaced object. */
export function namespaced(cluster: string, namespace: string, name: string): Request {
  return { cluster, namespace, name };
}

/** A request for a cluster-scoped object. */
export function clusterScoped(cluster: string, name: string): Request {
  return { cluster, name };
}

/** `cluster/namespace/name` or `cluster/name`, as the Rust SDK prints a request. */
export function requestText(r: Request): string {
  return r.namespace === undefined
    ? `${r.cluster}/${r.name}`
    : `${r.cluster}/${r.namespace}/${r.name}`;
}

/** Whether two requests name the same object. */
export function sameRequest(a: Request, b: Request): boolean {
  return a.cluster === b.cluster && a.namespace === b.namespace && a.name === b.name;
}

/** A set of clusters, resolved by the host against the engaged ones. */
export type ClusterSet =
  | { tag: "primary" }
  | { tag: "all" }
  | { tag: "others" }
  | { tag: "named"; val: string[] };

/** The cluster sets, as values. */
export const ClusterSet = {
  primary: { tag: "primary" } as ClusterSet,
  all: { tag: "all" } as ClusterSet,
  others: { tag: "others" } as ClusterSet,
  named: (names: string[]): ClusterSet => ({ tag: "named", val: [...names] }),
};

/** Whether `cluster` belongs to `set`, given the primary cluster. */
export function clusterSetContains(set: ClusterSet, cluster: string, primary?: string): boolean {
  switch (set.tag) {
    case "primary":
      return primary === cluster;
    case "all":
      return true;
    case "others":
      return primary !== undefined && primary !== cluster;
    case "named":
      return set.val.includes(cluster);
  }
}

/** Why a reconcile runs (see `guest.reconcile` in the WIT). */
export type Phase = "live" | "deleting" | "leaving";

/** Health of an engaged cluster. */
export type ClusterHealth = "ready" | "syncing" | "unreachable";

/** An engaged cluster. */
export interface ClusterInfo {
  name: string;
  primary: boolean;
  health: ClusterHealth;
}

/** Severity of a log line. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** A point in time: seconds since the epoch and nanoseconds. */
export interface Timestamp {
  seconds: number;
  nanoseconds: number;
}

/** RFC 3339 with whole seconds, as a Kubernetes `Time` serializes. */
export function formatTime(t: Timestamp): string {
  return new Date(t.seconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

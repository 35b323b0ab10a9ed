/**
 * Resource types of the built-in kinds, each typed with its object shape
 * from `kubernetes-types` (JSON-shaped interfaces generated from the
 * Kubernetes OpenAPI spec: what `JSON.parse` of an object gives, timestamps
 * as strings). Custom resources: {@link customKind}.
 */
import type { ConfigMap, Namespace, Node, Pod, Secret, Service, ServiceAccount } from "kubernetes-types/core/v1";
import type { DaemonSet, Deployment, ReplicaSet, StatefulSet } from "kubernetes-types/apps/v1";
import type { CronJob, Job } from "kubernetes-types/batch/v1";
import type { RuntimeClass } from "kubernetes-types/node/v1";
import type { Lease } from "kubernetes-types/coordination/v1";
import type { ObjectMeta } from "kubernetes-types/meta/v1";
import { type ResourceType, type Scope, resource } from "./types.js";

/** Any Kubernetes object as JSON. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

/**
 * A resource type that also names the TypeScript type of its objects, so
 * reads and builders are typed: `ctx.get(kinds.Job, ...)` gives a `Job`.
 */
export interface Kind<T extends KubeObject = KubeObject> extends ResourceType {
  /** Never set; carries `T` for the type checker. */
  readonly __object?: T;
}

function kind<T extends KubeObject>(api: string, k: string, plural: string, scope: Scope): Kind<T> {
  return resource(api, k, plural, scope) as Kind<T>;
}

/** The built-in kinds the SDK knows with their plural and scope. */
export const kinds = {
  ConfigMap: kind<ConfigMap>("v1", "ConfigMap", "configmaps", "namespaced"),
  Secret: kind<Secret>("v1", "Secret", "secrets", "namespaced"),
  Service: kind<Service>("v1", "Service", "services", "namespaced"),
  ServiceAccount: kind<ServiceAccount>("v1", "ServiceAccount", "serviceaccounts", "namespaced"),
  Pod: kind<Pod>("v1", "Pod", "pods", "namespaced"),
  Namespace: kind<Namespace>("v1", "Namespace", "namespaces", "cluster"),
  Node: kind<Node>("v1", "Node", "nodes", "cluster"),
  Deployment: kind<Deployment>("apps/v1", "Deployment", "deployments", "namespaced"),
  StatefulSet: kind<StatefulSet>("apps/v1", "StatefulSet", "statefulsets", "namespaced"),
  DaemonSet: kind<DaemonSet>("apps/v1", "DaemonSet", "daemonsets", "namespaced"),
  ReplicaSet: kind<ReplicaSet>("apps/v1", "ReplicaSet", "replicasets", "namespaced"),
  Job: kind<Job>("batch/v1", "Job", "jobs", "namespaced"),
  CronJob: kind<CronJob>("batch/v1", "CronJob", "cronjobs", "namespaced"),
  RuntimeClass: kind<RuntimeClass>("node.k8s.io/v1", "RuntimeClass", "runtimeclasses", "cluster"),
  Lease: kind<Lease>("coordination.k8s.io/v1", "Lease", "leases", "namespaced"),
};

/**
 * A custom resource's kind: `customKind<Test>("job.lailin.xyz/v1", "Test",
 * "tests", "namespaced")`. The plural is what kube's derive would give
 * (lowercase kind + "s") unless said otherwise.
 */
export function customKind<T extends KubeObject>(
  api: string,
  k: string,
  plural: string,
  scope: Scope,
): Kind<T> {
  return kind<T>(api, k, plural, scope);
}

/** `obj` with `apiVersion` and `kind` of `k` filled in (first, as k8s-openapi writes them). */
export function typed<T extends KubeObject>(k: Kind<T>, obj: T): T {
  const api = k.group === "" ? k.version : `${k.group}/${k.version}`;
  return { ...obj, apiVersion: api, kind: k.kind };
}

/** The labels of an object (empty when it has none). */
export function labelsOf(obj: KubeObject): Record<string, string> {
  return obj.metadata?.labels ?? {};
}

export type { ObjectMeta };

/**
 * {@link Context}: what a plugin sees during a call — typed reads from the
 * host's caches, the engaged clusters, a structured log and the request
 * time. Backed by the host imports in a component and by the test kit's
 * world natively; plugin code is the same.
 */
import type { Kind, KubeObject } from "./resources.js";
import type { ClusterInfo, LogLevel, Phase, Request, ResourceType, Timestamp } from "./types.js";
import { formatTime } from "./types.js";
import { ReconcileError } from "./errors.js";
import { SETTINGS_REFUSAL_PREFIX, type SettingsHost, type SettingsType, parseSettings } from "./settings.js";

/**
 * Where a context gets its data. Objects are JSON text, as over the WIT;
 * the settings of the load come through {@link SettingsHost}.
 */
export interface Backend extends SettingsHost {
  /** @throws ReadError */
  get(cluster: string, resource: ResourceType, namespace: string | undefined, name: string): string | undefined;
  /** @throws ReadError */
  list(cluster: string, resource: ResourceType, namespace: string | undefined, labelSelector: string | undefined): string[];
  clusters(): ClusterInfo[];
  log(level: LogLevel, message: string, fields: [string, string][]): void;
  requestTime(): Timestamp;
}

/** What a plugin can see during one call. */
export class Context {
  constructor(
    private readonly backend: Backend,
    /** Why the current reconcile runs (`live` in `map`). */
    readonly phase: Phase = "live",
  ) {}

  /** The object `name` of `kind` in `cluster`, or undefined. Throws `ReadError`. */
  get<T extends KubeObject>(kind: Kind<T>, cluster: string, namespace: string | undefined, name: string): T | undefined {
    const text = this.backend.get(cluster, kind, namespace, name);
    return text === undefined ? undefined : (JSON.parse(text) as T);
  }

  /** The object a request names, as `kind`. */
  getRequested<T extends KubeObject>(kind: Kind<T>, req: Request): T | undefined {
    return this.get(kind, req.cluster, req.namespace, req.name);
  }

  /** Objects of `kind` in `cluster`, optionally in one namespace and matching a label selector. */
  list<T extends KubeObject>(kind: Kind<T>, cluster: string, namespace?: string, labelSelector?: string): T[] {
    return this.backend.list(cluster, kind, namespace, labelSelector).map((t) => JSON.parse(t) as T);
  }

  /**
   * The plugin's settings as `type` (the one the registration declares):
   * what the operator configured, or its defaults. Validated at load, so
   * this throws (a terminal `ReconcileError`) only for another type.
   */
  settings<S>(type: SettingsType<S>): S {
    try {
      return parseSettings(type, this.backend.settings());
    } catch (e) {
      throw ReconcileError.terminal(`${SETTINGS_REFUSAL_PREFIX}${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /** The engaged clusters and their health. */
  clusters(): ClusterInfo[] {
    return this.backend.clusters();
  }

  /** The primary cluster's name, if engaged. */
  primaryCluster(): string | undefined {
    return this.clusters().find((c) => c.primary)?.name;
  }

  /** The request time (constant during a call). */
  now(): Timestamp {
    return this.backend.requestTime();
  }

  /** The request time as a Kubernetes `Time` string, whole seconds. */
  nowSeconds(): string {
    return formatTime(this.backend.requestTime());
  }

  /** A structured log line. */
  log(level: LogLevel, message: string, fields: Record<string, unknown> = {}): void {
    this.backend.log(
      level,
      message,
      Object.entries(fields).map(([k, v]) => [k, String(v)]),
    );
  }

  debug(message: string, fields?: Record<string, unknown>): void {
    this.log("debug", message, fields);
  }
  info(message: string, fields?: Record<string, unknown>): void {
    this.log("info", message, fields);
  }
  warn(message: string, fields?: Record<string, unknown>): void {
    this.log("warn", message, fields);
  }
  error(message: string, fields?: Record<string, unknown>): void {
    this.log("error", message, fields);
  }
}

/**
 * Whether `computed` differs from `stored` as the API server stores them:
 * compared as JSON, so keys in another order or an `undefined` field are
 * no difference. Nothing stored always differs.
 */
export function statusChanged(stored: unknown, computed: unknown): boolean {
  if (stored === undefined || stored === null) return true;
  return !jsonEqual(stored, computed);
}

/** Deep equality of two JSON values (undefined fields ignored). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

/** JSON text with object keys sorted: equal values give equal text. */
export function canonical(v: unknown): string {
  return JSON.stringify(sortKeys(v));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v as object).sort()) {
      const x = (v as Record<string, unknown>)[k];
      if (x !== undefined) out[k] = sortKeys(x);
    }
    return out;
  }
  return v;
}

/**
 * {@link World}: an in-memory set of clusters and objects that runs a
 * plugin (and its admission: `validate`, `mutate`) natively as the host would — deciding with the host's rule
 * whether a request is reconciled and in which phase (add the finalizer
 * first, `deleting`, `leaving`), serving only the reads the registration
 * declares, checking every action against the permissions, performing the
 * actions (create-if-absent, apply, merge and JSON patch with the
 * resourceVersion guard, delete honouring finalizers, events) and
 * releasing the finalizer after a finalized cleanup.
 */
import { type Action, type ObjectRef, Outcome, actionCluster, actionTarget } from "../action.js";
import { type Admission, type AdmissionRequest, type Mutation, type Verdict, runMutate, runValidate } from "../admission.js";
import { type ConversionRequest, type Converted, type Convert, ConversionError, runConvert } from "../conversion.js";
import { Context, type Backend, canonical } from "../context.js";
import { ReadError, toReconcileError } from "../errors.js";
import { type Plugin, dispatch } from "../plugin.js";
import { checkSettingsAtRegister, withBackend } from "../settings.js";
import type { Registration, Verb } from "../registration.js";
import type { KubeObject } from "../resources.js";
import {
  type ClusterHealth,
  type ClusterInfo,
  type LogLevel,
  type Phase,
  type Request,
  type ResourceType,
  type Timestamp,
  clusterSetContains,
  formatTime,
  requestText,
} from "../types.js";
import { matches, parseSelector } from "./selector.js";

type Obj = Record<string, any>;

/** A log line a plugin wrote. */
export interface LogLine {
  level: LogLevel;
  message: string;
  fields: [string, string][];
}

/** What the host decides for a request (the rule of `rules/src/scope.rs`). */
type Step = "ignore" | "add-finalizer" | { phase: Phase; release: boolean };

function step(finalizerDeclared: boolean, inScope: boolean, deleting: boolean, hasFinalizer: boolean): Step {
  const has = finalizerDeclared && hasFinalizer;
  if (deleting && has) return { phase: "deleting", release: true };
  if (deleting && finalizerDeclared) return "ignore";
  if (deleting) return inScope ? { phase: "deleting", release: false } : "ignore";
  if (!inScope) return has ? { phase: "leaving", release: true } : "ignore";
  if (finalizerDeclared && !has) return "add-finalizer";
  return { phase: "live", release: false };
}

const apiOf = (r: { group: string; version: string }) => (r.group ? `${r.group}/${r.version}` : r.version);
const kindKey = (cluster: string, group: string, kind: string, ns: string | undefined, name: string) =>
  JSON.stringify([cluster, group, kind, ns ?? null, name]);

function groupOf(apiVersion: string): string {
  const i = apiVersion.indexOf("/");
  return i < 0 ? "" : apiVersion.slice(0, i);
}

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v));

function deepMerge(target: Obj, patch: Obj): Obj {
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete target[k];
    else if (typeof v === "object" && !Array.isArray(v) && typeof target[k] === "object" && target[k] !== null && !Array.isArray(target[k])) {
      deepMerge(target[k], v);
    } else target[k] = clone(v);
  }
  return target;
}

function unescape(seg: string): string {
  return seg.replace(/~1/g, "/").replace(/~0/g, "~");
}

/** RFC 6902 on a copy; throws on a failed `test` or a missing path. */
function jsonPatch(doc: Obj, ops: Obj[]): Obj {
  const out = clone(doc);
  for (const op of ops) {
    const parts = String(op.path).split("/").slice(1).map(unescape);
    const last = parts.pop() as string;
    let parent: any = out;
    for (const p of parts) {
      if (parent === undefined || parent === null || typeof parent !== "object") throw new Error(`path ${op.path} does not exist`);
      parent = parent[p];
    }
    if (parent === undefined || parent === null || typeof parent !== "object") throw new Error(`path ${op.path} does not exist`);
    switch (op.op) {
      case "add":
      case "replace":
        if (Array.isArray(parent)) parent.splice(last === "-" ? parent.length : Number(last), op.op === "replace" ? 1 : 0, clone(op.value));
        else parent[last] = clone(op.value);
        break;
      case "remove":
        if (!(last in parent)) throw new Error(`path ${op.path} does not exist`);
        if (Array.isArray(parent)) parent.splice(Number(last), 1);
        else delete parent[last];
        break;
      case "test":
        if (canonical(parent[last]) !== canonical(op.value)) throw new Error(`test of ${op.path} failed`);
        break;
      default:
        throw new Error(`unsupported JSON patch op ${op.op}`);
    }
  }
  return out;
}

/** An in-memory world of clusters and objects. */
export class World {
  private readonly clusterList: ClusterInfo[] = [];
  private readonly objects = new Map<string, Obj>();
  private time: Timestamp = { seconds: 1_735_689_600, nanoseconds: 0 };
  private nextRv = 1;
  private nextUid = 1;
  private readonly failing = new Set<string>();
  readonly events: Extract<Action, { type: "event" }>[] = [];
  readonly logs: LogLine[] = [];
  private settingsText?: string;
  private settingsSchemaText?: string;

  /** Gives the plugin `settings` (as a Plugin object's `spec.settings` would; chainable). */
  withSettings(settings: unknown): this {
    this.setSettings(settings);
    return this;
  }

  /** Changes the settings (`undefined`/`null`: none given, the plugin's defaults). */
  setSettings(settings: unknown): void {
    this.settingsText = settings === undefined || settings === null ? undefined : JSON.stringify(settings);
  }

  /** The JSON Schema the plugin declared at its last registration in this world. */
  settingsSchema(): unknown {
    return this.settingsSchemaText === undefined ? undefined : JSON.parse(this.settingsSchemaText);
  }

  /**
   * `plugin.register()` with this world's settings, checked as the host
   * does: invalid settings (or settings for a plugin declaring none) throw
   * `invalid settings: …`.
   */
  register<T extends KubeObject>(plugin: Plugin<T>): Registration {
    const backend = this.backend(undefined);
    return withBackend(backend, () => {
      const reg = plugin.register();
      checkSettingsAtRegister(reg, backend);
      return reg;
    });
  }

  /** Adds the primary cluster `name` (chainable). */
  primary(name: string): this {
    this.clusterList.push({ name, primary: true, health: "ready" });
    return this;
  }

  /** Adds a non-primary cluster (chainable). */
  cluster(name: string): this {
    this.clusterList.push({ name, primary: false, health: "ready" });
    return this;
  }

  /** Removes a cluster from the engaged set (its objects stay). */
  removeCluster(name: string): void {
    const i = this.clusterList.findIndex((c) => c.name === name);
    if (i >= 0) this.clusterList.splice(i, 1);
  }

  /** Sets a cluster's health. */
  setHealth(name: string, health: ClusterHealth): void {
    const c = this.clusterList.find((x) => x.name === name);
    if (!c) throw new Error(`unknown cluster ${name}`);
    c.health = health;
  }

  /** Makes every write to `cluster` fail until {@link heal}. */
  failWrites(cluster: string): void {
    this.failing.add(cluster);
  }

  heal(cluster: string): void {
    this.failing.delete(cluster);
  }

  clusters(): ClusterInfo[] {
    return this.clusterList.map((c) => ({ ...c }));
  }

  setTime(t: Timestamp): void {
    this.time = { ...t };
  }

  /** Moves the clock forward by `ms` milliseconds. */
  advance(ms: number): void {
    const total = this.time.nanoseconds + Math.round(ms * 1e6);
    this.time = { seconds: this.time.seconds + Math.floor(total / 1e9), nanoseconds: total % 1e9 };
  }

  now(): Timestamp {
    return { ...this.time };
  }

  private stamp(obj: Obj): void {
    obj.metadata ??= {};
    obj.metadata.uid ??= `00000000-0000-4000-8000-${String(this.nextUid++).padStart(12, "0")}`;
    obj.metadata.creationTimestamp ??= formatTime(this.time);
    obj.metadata.resourceVersion = String(this.nextRv++);
  }

  /** Inserts (or replaces) an object as JSON; returns its reference. */
  insert<T extends KubeObject>(cluster: string, obj: T): ObjectRef {
    const o = clone(obj) as unknown as Obj;
    this.stamp(o);
    const ns = o.metadata.namespace;
    this.objects.set(kindKey(cluster, groupOf(o.apiVersion ?? ""), o.kind, ns, o.metadata.name), o);
    return actionTarget({ type: "create", cluster, object: o as KubeObject });
  }

  /** The object, as JSON, or undefined. */
  get<T extends KubeObject = KubeObject>(kind: ResourceType, cluster: string, namespace: string | undefined, name: string): T | undefined {
    const o = this.objects.get(kindKey(cluster, kind.group, kind.kind, namespace, name));
    return o === undefined ? undefined : (clone(o) as unknown as T);
  }

  /** Objects of a kind in a cluster. */
  list<T extends KubeObject = KubeObject>(kind: ResourceType, cluster: string, namespace?: string, selector?: string): T[] {
    const sel = selector === undefined ? [] : parseSelector(selector);
    const out: Obj[] = [];
    for (const [k, o] of this.objects) {
      const [c, g, kd, ns] = JSON.parse(k);
      if (c !== cluster || g !== kind.group || kd !== kind.kind) continue;
      if (namespace !== undefined && ns !== namespace) continue;
      if (!matches(sel, o.metadata?.labels ?? {})) continue;
      out.push(clone(o));
    }
    return out.sort((a, b) => (a.metadata.namespace ?? "").localeCompare(b.metadata.namespace ?? "") || a.metadata.name.localeCompare(b.metadata.name)) as unknown as T[];
  }

  /** Changes an object in place (bumping its resourceVersion); false when absent. */
  modify(kind: ResourceType, cluster: string, namespace: string | undefined, name: string, f: (o: Obj) => void): boolean {
    const k = kindKey(cluster, kind.group, kind.kind, namespace, name);
    const o = this.objects.get(k);
    if (!o) return false;
    f(o);
    o.metadata.resourceVersion = String(this.nextRv++);
    return true;
  }

  /** Asks for deletion: with finalizers the object gets a deletionTimestamp, else it goes. */
  delete(kind: ResourceType, cluster: string, namespace: string | undefined, name: string): boolean {
    const k = kindKey(cluster, kind.group, kind.kind, namespace, name);
    const o = this.objects.get(k);
    if (!o) return false;
    if ((o.metadata.finalizers ?? []).length > 0) {
      if (!o.metadata.deletionTimestamp) {
        o.metadata.deletionTimestamp = formatTime(this.time);
        o.metadata.resourceVersion = String(this.nextRv++);
      }
    } else this.objects.delete(k);
    return true;
  }

  private backend(reg: Registration | undefined): Backend {
    const allowed = (cluster: string, r: ResourceType) => {
      if (!reg) return;
      const primary = this.clusterList.find((c) => c.primary)?.name;
      const ok =
        (r.group === reg.primary.group && r.kind === reg.primary.kind && clusterSetContains(reg.primaryClusters, cluster, primary)) ||
        reg.watches.some((w) => w.resource.group === r.group && w.resource.kind === r.kind && clusterSetContains(w.clusters, cluster, primary));
      if (!ok) throw new ReadError("not-watched", `${apiOf(r)}/${r.kind} in cluster ${cluster}`);
    };
    const engaged = (cluster: string) => {
      if (!this.clusterList.some((c) => c.name === cluster)) throw new ReadError("unknown-cluster", cluster);
    };
    return {
      get: (cluster, r, ns, name) => {
        engaged(cluster);
        allowed(cluster, r);
        const o = this.get(r, cluster, ns, name);
        return o === undefined ? undefined : JSON.stringify(o);
      },
      list: (cluster, r, ns, sel) => {
        engaged(cluster);
        allowed(cluster, r);
        try {
          return this.list(r, cluster, ns, sel).map((o) => JSON.stringify(o));
        } catch (e) {
          throw new ReadError("invalid-selector", (e as Error).message);
        }
      },
      clusters: () => this.clusters(),
      log: (level, message, fields) => this.logs.push({ level, message, fields }),
      requestTime: () => this.now(),
      settings: () => this.settingsText,
      declareSettingsSchema: (schema) => {
        this.settingsSchemaText = schema;
      },
    };
  }

  /** A context over the whole world (no read restrictions), for helpers. */
  context(phase: Phase = "live"): Context {
    return new Context(this.backend(undefined), phase);
  }

  /**
   * Calls `admission.validate` for `req` as the host would: reading this
   * world (only what `plugin` declares, when given, as the host serves a
   * plugin's own caches), with its settings; a thrown `AdmissionError`,
   * `ReadError` or `ReconcileError` denies, anything else is thrown (the
   * host's 500: the rule's failure policy).
   */
  validate<T extends KubeObject>(admission: Admission, req: AdmissionRequest, plugin?: Plugin<T>): Verdict {
    const backend = this.backend(plugin ? this.register(plugin) : undefined);
    return withBackend(backend, () => runValidate(admission, new Context(backend), req));
  }

  /** Calls `admission.mutate` for `req` as the host would (see {@link validate}). */
  mutate<T extends KubeObject>(admission: Admission, req: AdmissionRequest, plugin?: Plugin<T>): Mutation {
    const backend = this.backend(plugin ? this.register(plugin) : undefined);
    return withBackend(backend, () => runMutate(admission, new Context(backend), req));
  }

  /**
   * Calls `conversion.convert` for `req` as the host would: reading this
   * world (only what `plugin` declares, when given), with its settings; a
   * thrown `ConversionError`, `ReadError` or `ReconcileError` is the
   * refusal `{ error }`, anything else is thrown (a trap). The host then
   * checks the object keeps its kind, name, namespace and uid and carries
   * the desired apiVersion; `inspectComponent` shows the host's verdict on
   * the declared conversions.
   */
  convert<T extends KubeObject>(conversion: Convert, req: ConversionRequest, plugin?: Plugin<T>): Converted {
    const backend = this.backend(plugin ? this.register(plugin) : undefined);
    return withBackend(backend, () => runConvert(conversion, new Context(backend), req));
  }

  /**
   * `object` converted to `via` and back to its own apiVersion with
   * {@link convert}: deep-equal to `object` when the conversion loses
   * nothing. A refusal either way is thrown as a `ConversionError`.
   */
  roundTrip<T extends KubeObject>(conversion: Convert, object: KubeObject, via: string, plugin?: Plugin<T>): KubeObject {
    const back = object.apiVersion ?? "";
    const there = this.convert(conversion, { object, desiredApiVersion: via }, plugin);
    if ("error" in there) throw new ConversionError(there.error);
    const again = this.convert(conversion, { object: there.ok, desiredApiVersion: back }, plugin);
    if ("error" in again) throw new ConversionError(again.error);
    return again.ok;
  }

  private stepFor(reg: Registration, req: Request): Step | undefined {
    const o = this.get(reg.primary, req.cluster, req.namespace, req.name);
    if (!o) return undefined;
    const primary = this.clusterList.find((c) => c.primary)?.name;
    const inScope =
      clusterSetContains(reg.primaryClusters, req.cluster, primary) &&
      (reg.primarySelector === undefined || matches(parseSelector(reg.primarySelector), o.metadata?.labels ?? {}));
    const finalizers: string[] = o.metadata?.finalizers ?? [];
    return step(reg.finalizer !== undefined, inScope, !!o.metadata?.deletionTimestamp, reg.finalizer !== undefined && finalizers.includes(reg.finalizer));
  }

  /** Runs the plugin for `req` as the host would; returns the outcome, not applied. Throws `ReconcileError`. */
  reconcile<T extends KubeObject>(plugin: Plugin<T>, req: Request): Outcome {
    const reg = this.register(plugin);
    const s = this.stepFor(reg, req);
    if (s === undefined || s === "ignore") return Outcome.done();
    let phase: Phase = "live";
    if (s === "add-finalizer") {
      this.modify(reg.primary, req.cluster, req.namespace, req.name, (o) => {
        o.metadata.finalizers = [...(o.metadata.finalizers ?? []), reg.finalizer];
      });
    } else phase = s.phase;
    try {
      const backend = this.backend(reg);
      return withBackend(backend, () => dispatch(plugin, new Context(backend, phase), req));
    } catch (e) {
      throw toReconcileError(e).context(`failed to reconcile ${requestText(req)}`);
    }
  }

  private check(reg: Registration, a: Action): void {
    const verb: Verb | undefined = a.type === "apply" || a.type === "patch" ? "patch" : a.type === "create" ? "create" : a.type === "delete" ? "delete" : undefined;
    if (!verb) return;
    const t = actionTarget(a);
    const status = (a.type === "apply" || a.type === "patch") && a.status;
    const primary = this.clusterList.find((c) => c.primary)?.name;
    const ok = reg.permissions.some(
      (p) =>
        p.resource.group === t.resource.group &&
        p.resource.kind === t.resource.kind &&
        p.verbs.includes(verb) &&
        (!status || p.status) &&
        clusterSetContains(p.clusters, t.cluster, primary),
    );
    if (!ok) {
      throw new Error(`plugin ${reg.name} may not ${verb}${status ? " the status of" : ""} ${apiOf(t.resource)} ${t.resource.kind} ${t.namespace ?? ""}/${t.name} in cluster ${t.cluster}`);
    }
  }

  /**
   * A create named by the server (`generateName`, no name): named here as
   * the API server does, the prefix and five characters of its alphabet
   * (from a counter, so a test names objects the same way every run).
   */
  private named(a: Action): Action {
    if (a.type !== "create") return a;
    const meta = a.object.metadata ?? {};
    const prefix = meta.generateName;
    if (meta.name || !prefix) return a;
    const alphabet = "bcdfghjklmnpqrstvwxz2456789";
    let n = this.nextUid++;
    let suffix = "";
    for (let i = 0; i < 5; i++) {
      suffix += alphabet[n % alphabet.length];
      n = Math.floor(n / alphabet.length);
    }
    return { ...a, object: { ...a.object, metadata: { ...meta, name: prefix + suffix } } };
  }

  private perform(given: Action): boolean {
    const a = this.named(given);
    if (a.type === "event") {
      this.events.push(a);
      return false;
    }
    const cluster = actionCluster(a);
    if (this.failing.has(cluster)) throw new Error(`write to cluster ${cluster} failed (failWrites)`);
    const t = actionTarget(a);
    const k = kindKey(cluster, t.resource.group, t.resource.kind, t.namespace, t.name);
    const existing = this.objects.get(k);
    const before = existing ? canonical({ ...existing, metadata: { ...existing.metadata, resourceVersion: undefined } }) : undefined;
    const store = (o: Obj) => {
      const after = canonical({ ...o, metadata: { ...o.metadata, resourceVersion: undefined } });
      if (after === before) return false;
      if (existing) o.metadata.resourceVersion = String(this.nextRv++);
      else this.stamp(o);
      this.objects.set(k, o);
      return true;
    };
    switch (a.type) {
      case "create":
        return existing ? false : store(clone(a.object) as unknown as Obj);
      case "apply": {
        const body = clone(a.object) as unknown as Obj;
        if (!existing) {
          if (a.status) throw new Error(`cannot apply the status of absent ${t.name}`);
          return store(body);
        }
        const next = clone(existing);
        if (a.status) next.status = deepMerge(next.status ?? {}, body.status ?? {});
        else {
          delete body.status;
          deepMerge(next, body);
        }
        return store(next);
      }
      case "patch": {
        if (!existing) throw new Error(`cannot patch absent ${t.name} in cluster ${cluster}`);
        if (a.resourceVersion !== undefined && a.resourceVersion !== existing.metadata.resourceVersion) {
          throw new Error(`conflict: ${t.name} has resourceVersion ${existing.metadata.resourceVersion}, not ${a.resourceVersion}`);
        }
        let next: Obj;
        if (a.patchType === "merge") {
          next = clone(existing);
          const patch = clone(a.patch) as Obj;
          if (a.status) next.status = deepMerge(next.status ?? {}, patch.status ?? {});
          else {
            delete patch.status;
            deepMerge(next, patch);
          }
        } else {
          next = jsonPatch(existing, a.patch as Obj[]);
          if (!a.status) next.status = existing.status;
        }
        return store(next);
      }
      case "delete": {
        if (!existing) return false;
        if (a.uid !== undefined && a.uid !== existing.metadata.uid) return false;
        return this.delete(t.resource, cluster, t.namespace, t.name);
      }
    }
  }

  /**
   * Applies an outcome for `req` as the host would: permissions first
   * (nothing written if one is missing), then the actions in order per
   * cluster (a failure stops that cluster's remaining actions), then the
   * finalizer release of a finalized cleanup. Returns whether the world
   * changed (events do not count); throws on a forbidden action or failed
   * writes (what succeeded stays applied).
   */
  apply<T extends KubeObject>(plugin: Plugin<T>, req: Request, outcome: Outcome): boolean {
    const reg = this.register(plugin);
    const s = this.stepFor(reg, req);
    const release = typeof s === "object" && s.release;
    for (const a of outcome.actions) this.check(reg, a);
    const perCluster = new Map<string, Action[]>();
    for (const a of outcome.actions) {
      const c = actionCluster(a);
      perCluster.set(c, [...(perCluster.get(c) ?? []), a]);
    }
    let changed = false;
    const failed: string[] = [];
    for (const actions of perCluster.values()) {
      for (const a of actions) {
        try {
          changed = this.perform(a) || changed;
        } catch (e) {
          failed.push((e as Error).message);
          break;
        }
      }
    }
    if (failed.length > 0) throw new Error(`failed writes: ${failed.join("; ")}`);
    if (outcome.finalized && release && reg.finalizer !== undefined) {
      const k = kindKey(req.cluster, reg.primary.group, reg.primary.kind, req.namespace, req.name);
      const o = this.objects.get(k);
      if (o) {
        o.metadata.finalizers = (o.metadata.finalizers ?? []).filter((f: string) => f !== reg.finalizer);
        if (o.metadata.finalizers.length === 0 && o.metadata.deletionTimestamp) this.objects.delete(k);
        else o.metadata.resourceVersion = String(this.nextRv++);
        changed = true;
      }
    }
    return changed;
  }

  /** Reconcile → apply until a round changes nothing; returns every outcome. */
  converge<T extends KubeObject>(plugin: Plugin<T>, req: Request, maxRounds = 10): Outcome[] {
    const outcomes: Outcome[] = [];
    for (let i = 0; i < maxRounds; i++) {
      const o = this.reconcile(plugin, req);
      outcomes.push(o);
      if (!this.apply(plugin, req, o)) return outcomes;
    }
    throw new Error(`${requestText(req)} did not converge in ${maxRounds} rounds; last outcome: ${JSON.stringify(outcomes.at(-1))}`);
  }

  /** Throws unless reconciling `req` returns no writes (events allowed). */
  assertNoWrites<T extends KubeObject>(plugin: Plugin<T>, req: Request): void {
    const writes = this.reconcile(plugin, req).writes();
    if (writes.length > 0) throw new Error(`expected no writes for ${requestText(req)}, got ${JSON.stringify(writes, null, 2)}`);
  }
}

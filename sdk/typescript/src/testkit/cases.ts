/**
 * Recorded cases as native golden tests: `rekon run --record DIR` writes
 * each reconcile as a case (request, phase, request time, every host read
 * with its answer, the decision). {@link RecordedCase.replay} runs a
 * plugin natively against one, reads served from the recording, and
 * compares the decision in the host's own format — a case identical here
 * is identical under `rekon plugin replay` against the built component.
 */
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { Context, type Backend, canonical } from "../context.js";
import { withBackend } from "../settings.js";
import { ReadError, type ReadErrorKind } from "../errors.js";
import { type Plugin, dispatch } from "../plugin.js";
import type { KubeObject } from "../resources.js";
import type { ClusterHealth, ClusterInfo, Phase, Request, ResourceType, Timestamp } from "../types.js";
import { outcomeValue } from "./wire.js";

/** The case format this kit reads (the host's). */
export const CASE_FORMAT = "rekon.dev/case/v1";

interface CaseRead {
  op: "get" | "list";
  cluster: string;
  resource: ResourceType;
  namespace?: string;
  name?: string;
  labelSelector?: string;
  result: { object?: unknown; objects?: unknown[]; error?: Record<string, string> };
}

const api = (r: ResourceType) => `${r.group}/${r.version}/${r.kind}`;

function key(op: string, cluster: string, r: ResourceType, ns: string | undefined, what: string | undefined): string {
  return JSON.stringify([op, cluster, api(r), ns ?? null, what ?? null]);
}

function describe(op: string, cluster: string, r: ResourceType, ns: string | undefined, what: string | undefined) {
  return `${op} ${api(r)} ${ns ? `${ns}/` : ""}${what ?? ""} in cluster ${cluster}`;
}

const READ_ERRORS: Record<string, ReadErrorKind> = {
  NotWatched: "not-watched",
  UnknownCluster: "unknown-cluster",
  InvalidSelector: "invalid-selector",
};

/** A case replayed natively. */
export interface CaseReplay {
  recorded: unknown;
  replayed: unknown;
  missingReads: string[];
  identical: boolean;
}

/** One recorded reconcile. */
export class RecordedCase {
  private constructor(
    readonly path: string,
    readonly plugin: string,
    readonly request: Request,
    readonly phase: Phase,
    readonly time: Timestamp,
    readonly clusters: ClusterInfo[],
    private readonly reads: Map<string, unknown>,
    readonly outcome: unknown,
    readonly redacted: boolean,
    /** The settings the recorded version ran with (JSON text). */
    readonly settings?: string,
  ) {}

  /** Loads one case file; throws naming the file when it is not a case. */
  static load(path: string): RecordedCase {
    const fail = (why: string) => new Error(`failed to load case ${path}: ${why}`);
    let c: any;
    try {
      c = JSON.parse(readFileSync(path, "utf8"));
    } catch (e) {
      throw fail(String(e));
    }
    if (c?.format !== CASE_FORMAT) throw fail(`not a case of format ${CASE_FORMAT}`);
    const r = c.request ?? {};
    const request: Request = { cluster: r.cluster, name: r.name };
    if (typeof r.namespace === "string") request.namespace = r.namespace;
    const phase = ({ Deleting: "deleting", Leaving: "leaving" } as Record<string, Phase>)[c.phase] ?? "live";
    const health = (h: string): ClusterHealth =>
      h === "Syncing" ? "syncing" : h === "Unreachable" ? "unreachable" : "ready";
    const clusters = (c.clusters ?? []).map((x: any) => ({ name: x.name, primary: !!x.primary, health: health(x.health) }));
    const reads = new Map<string, unknown>();
    for (const read of (c.reads ?? []) as CaseRead[]) {
      if (read.op !== "get" && read.op !== "list") throw fail(`unknown read op ${JSON.stringify(read.op)}`);
      const k = key(read.op, read.cluster, read.resource, read.namespace, read.op === "get" ? read.name : read.labelSelector);
      if (reads.has(k)) continue;
      const res = read.result;
      if (res.error) {
        const [tag, msg] = Object.entries(res.error)[0];
        reads.set(k, new ReadError(READ_ERRORS[tag] ?? "invalid-selector", msg));
      } else if ("object" in res) reads.set(k, res.object);
      else reads.set(k, res.objects ?? []);
    }
    return new RecordedCase(
      path,
      c.plugin?.name,
      request,
      phase,
      { seconds: c.requestTime?.seconds ?? 0, nanoseconds: c.requestTime?.nanoseconds ?? 0 },
      clusters,
      reads,
      c.outcome,
      !!c.secretsRedacted,
      c.plugin?.settings === undefined || c.plugin?.settings === null ? undefined : JSON.stringify(c.plugin.settings),
    );
  }

  /** Every case under `dir` (`*.json`, recursively, in path order). */
  static loadDir(dir: string): RecordedCase[] {
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d).sort()) {
        const p = join(d, e);
        if (statSync(p).isDirectory()) walk(p);
        else if (p.endsWith(".json")) files.push(p);
      }
    };
    walk(dir);
    return files.sort().map((f) => RecordedCase.load(f));
  }

  /** Runs `plugin` on the recorded request, phase and time, reads from the recording. */
  replay<T extends KubeObject>(plugin: Plugin<T>): CaseReplay {
    const missing: string[] = [];
    const answer = (op: string, cluster: string, r: ResourceType, ns?: string, what?: string) => {
      const k = key(op, cluster, r, ns, what);
      if (!this.reads.has(k)) {
        const d = describe(op, cluster, r, ns, what);
        missing.push(d);
        throw new ReadError("not-watched", `not in the recording: ${d}`);
      }
      const v = this.reads.get(k);
      if (v instanceof ReadError) throw v;
      return v;
    };
    const backend: Backend = {
      get: (cluster, r, ns, name) => {
        const v = answer("get", cluster, r, ns, name);
        return v === null || v === undefined ? undefined : JSON.stringify(v);
      },
      list: (cluster, r, ns, sel) => ((answer("list", cluster, r, ns, sel) as unknown[]) ?? []).map((o) => JSON.stringify(o)),
      clusters: () => this.clusters.map((c) => ({ ...c })),
      log: () => {},
      requestTime: () => this.time,
      settings: () => this.settings,
      declareSettingsSchema: () => {},
    };
    const ctx = new Context(backend, this.phase);
    const replayed = outcomeValue(
      this.plugin,
      () => withBackend(backend, () => dispatch(plugin, ctx, this.request)),
      this.redacted,
    );
    const identical = missing.length === 0 && canonical(replayed) === canonical(this.outcome);
    return { recorded: this.outcome, replayed, missingReads: missing, identical };
  }
}

/**
 * Replays every case under `dir` against `plugin`; throws naming every case
 * that decides differently (with both decisions), else returns the count.
 */
export function assertCases<T extends KubeObject>(plugin: Plugin<T>, dir: string): number {
  const cases = RecordedCase.loadDir(dir);
  const failures = cases
    .map((c) => ({ c, r: c.replay(plugin) }))
    .filter(({ r }) => !r.identical)
    .map(
      ({ c, r }) =>
        `case ${c.path} decides differently\nreads not in the recording: ${JSON.stringify(r.missingReads)}\n--- recorded\n${JSON.stringify(r.recorded, null, 2)}\n--- replayed\n${JSON.stringify(r.replayed, null, 2)}`,
    );
  if (failures.length > 0) {
    throw new Error(`${failures.length} of ${cases.length} cases decide differently:\n${failures.join("\n")}`);
  }
  return cases.length;
}

/**
 * test-fanout, in TypeScript: a `Test` (`tests.job.lailin.xyz/v1`) in the
 * primary cluster gets a Job named after it in every engaged cluster; the
 * Test is `finished` as soon as any of those Jobs completed. A port of
 * `plugins/test-fanout` (Rust) that decides exactly what it decides: the
 * recorded cases of the Rust build replay identically against this one
 * (`tests/e2e/tests/sdk_ports.rs`). See the Rust crate's docs for the
 * behaviour in full. Its admission (validate, default) is in
 * `admission.ts`, as the Rust seed's is in `admission.rs`.
 */
import {
  Action,
  type ClusterInfo,
  ClusterSet,
  type Context,
  type Event,
  Mapping,
  type ObjectRef,
  Outcome,
  OwnerLabels,
  type Plugin,
  ReadError,
  ReconcileError,
  Registration,
  type Request,
  type SettingsType,
  customKind,
  formatTime,
  kinds,
  objectRef,
  refForRequest,
  requestText,
  sameRequest,
  settings,
  statusChanged,
} from "@rekon/sdk";
import type { Job } from "kubernetes-types/batch/v1";
import type { ObjectMeta } from "kubernetes-types/meta/v1";
import crd from "../crd.json" with { type: "json" };
// The Rust seed's settings schema, as `rekon plugin inspect` prints it: the
// ports declare exactly what the seed declares (tests/e2e/tests/sdk_ports.rs
// compares the two registrations, schema included).
import settingsSchema from "../settings.schema.json" with { type: "json" };

export const PLUGIN_NAME = "test-fanout";
export const VERSION = "0.1.0";
export const FINALIZER = "job.lailin.xyz/fanout-cleanup";
export const OWNER_LABELS = new OwnerLabels("owner.cluster", "owner.namespace", "owner.name");
/** Milliseconds between looks while a cluster is out of reach or syncing. */
export const UNREACHABLE_RETRY_MS = 30_000;
/** Milliseconds between looks at a running Test. */
export const RESYNC_MS = 60_000;

export type JobState =
  | "Creating"
  | "Pending"
  | "Running"
  | "Complete"
  | "Failed"
  | "Skipped"
  | "Conflict"
  | "Syncing"
  | "Unreachable";

export interface ClusterJob {
  cluster: string;
  state: JobState;
  message?: string;
}

export interface TestStatus {
  phase: "running" | "finished";
  finishedCluster?: string;
  finishedAt?: string;
  clusters: ClusterJob[];
}

export interface Test {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  /** `clusters` absent: every cluster the plugin fans out to. */
  spec: { image: string; clusters?: string[] };
  status?: TestStatus | null;
}

export const TestKind = customKind<Test>("job.lailin.xyz/v1", "Test", "tests", "namespaced");

/** A stored `Time` as the Rust seed re-serializes it: whole seconds. */
function normalTime(t: string): string {
  return formatTime({ seconds: Math.floor(Date.parse(t) / 1000), nanoseconds: 0 });
}

/** A stored status as it decodes: defaults filled, unknown fields gone. */
function decodeStatus(s: Partial<TestStatus> | null | undefined): TestStatus {
  const out: TestStatus = { phase: s?.phase ?? "running", clusters: [] };
  if (s?.finishedCluster != null) out.finishedCluster = s.finishedCluster;
  if (s?.finishedAt != null) out.finishedAt = normalTime(s.finishedAt);
  out.clusters = (s?.clusters ?? []).map((l) =>
    l.message == null ? { cluster: l.cluster, state: l.state } : { cluster: l.cluster, state: l.state, message: l.message },
  );
  return out;
}

/** Job fields every fanned-out Job gets (unset: the API server's defaults). */
export interface JobDefaults {
  backoffLimit?: number;
  activeDeadlineSeconds?: number;
  ttlSecondsAfterFinished?: number;
}

/** What an operator configures: the clusters Jobs go to (empty: all), Job defaults. */
export interface FanoutSettings {
  clusters: string[];
  job: JobDefaults;
}

function fields(raw: unknown, where: string, allowed: string[]): Record<string, unknown> {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new Error(`invalid type: ${JSON.stringify(raw)}, expected ${where}`);
  }
  const unknown = Object.keys(raw).find((k) => !allowed.includes(k));
  if (unknown !== undefined) throw new Error(`unknown field \`${unknown}\`, expected one of ${allowed.map((a) => `\`${a}\``).join(", ")}`);
  return raw as Record<string, unknown>;
}

function integer(v: unknown, name: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v)) throw new Error(`invalid type: ${JSON.stringify(v)}, expected an integer for ${name}`);
  return v;
}

/** The same settings, and the same checks, as the Rust seed's `FanoutSettings`. */
export const FANOUT_SETTINGS: SettingsType<FanoutSettings> = {
  schema: settingsSchema as Record<string, unknown>,
  parse(raw) {
    if (raw === undefined) return { clusters: [], job: {} };
    const f = fields(raw, "struct FanoutSettings", ["clusters", "job"]);
    const clusters = f.clusters ?? [];
    if (!Array.isArray(clusters) || clusters.some((c) => typeof c !== "string")) {
      throw new Error(`invalid type: ${JSON.stringify(clusters)}, expected a sequence of strings for clusters`);
    }
    const j = f.job === undefined ? {} : fields(f.job, "struct JobDefaults", ["backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"]);
    const job: JobDefaults = {};
    const backoffLimit = integer(j.backoffLimit, "backoffLimit");
    const activeDeadlineSeconds = integer(j.activeDeadlineSeconds, "activeDeadlineSeconds");
    const ttlSecondsAfterFinished = integer(j.ttlSecondsAfterFinished, "ttlSecondsAfterFinished");
    if (backoffLimit !== undefined) job.backoffLimit = backoffLimit;
    if (activeDeadlineSeconds !== undefined) job.activeDeadlineSeconds = activeDeadlineSeconds;
    if (ttlSecondsAfterFinished !== undefined) job.ttlSecondsAfterFinished = ttlSecondsAfterFinished;
    const empty = (clusters as string[]).find((c) => c === "");
    if (empty !== undefined) throw new Error(`clusters: ${JSON.stringify(empty)} is not a cluster name`);
    if (backoffLimit !== undefined && backoffLimit < 0) throw new Error("job.backoffLimit must not be negative");
    if (activeDeadlineSeconds !== undefined && activeDeadlineSeconds <= 0) throw new Error("job.activeDeadlineSeconds must be positive");
    if (ttlSecondsAfterFinished !== undefined && ttlSecondsAfterFinished < 0) throw new Error("job.ttlSecondsAfterFinished must not be negative");
    return { clusters: clusters as string[], job };
  },
};

/** The clusters Jobs go to: every one, or the named ones. */
export function fanoutClusters(s: FanoutSettings): ClusterSet {
  return s.clusters.length === 0 ? ClusterSet.all : ClusterSet.named(s.clusters);
}

/** {@link jobFor} with the Job defaults of the settings. */
export function jobWith(test: Test, owner: Request, cluster: string, defaults: JobDefaults): Job {
  const job = jobFor(test, owner, cluster);
  if (job.spec !== undefined) {
    if (defaults.backoffLimit !== undefined) job.spec.backoffLimit = defaults.backoffLimit;
    if (defaults.activeDeadlineSeconds !== undefined) job.spec.activeDeadlineSeconds = defaults.activeDeadlineSeconds;
    if (defaults.ttlSecondsAfterFinished !== undefined) job.spec.ttlSecondsAfterFinished = defaults.ttlSecondsAfterFinished;
  }
  return job;
}

/** The Job `test` wants in `cluster` (owner reference only in the Test's own cluster). */
export function jobFor(test: Test, owner: Request, cluster: string): Job {
  const meta = test.metadata ?? {};
  const metadata: ObjectMeta = {
    name: owner.name,
    namespace: owner.namespace,
    labels: OWNER_LABELS.labelsFor(owner),
  };
  if (cluster === owner.cluster && meta.name !== undefined && meta.uid !== undefined) {
    metadata.ownerReferences = [
      { apiVersion: "job.lailin.xyz/v1", kind: "Test", name: meta.name, uid: meta.uid, controller: true },
    ];
  }
  return {
    metadata,
    spec: {
      template: {
        spec: { containers: [{ name: owner.name, image: test.spec.image }], restartPolicy: "Never" },
      },
    },
  };
}

/** How a Job's status reads. */
export function jobState(job: Job): JobState {
  const status = job.status;
  const condition = (type: string) => (status?.conditions ?? []).some((c) => c.type === type && c.status === "True");
  if (condition("Complete") || status?.completionTime != null) return "Complete";
  if (condition("Failed")) return "Failed";
  if ((status?.active ?? 0) > 0) return "Running";
  return "Pending";
}

type Seen = { type: "absent" } | { type: "mine"; job: Job } | { type: "foreign" } | { type: "unknown"; why: string };

interface View {
  info: ClusterInfo;
  seen: Seen;
}

const stateOf = (v: View) => (v.seen.type === "mine" ? jobState(v.seen.job) : undefined);

function observe(ctx: Context, req: Request, namespace: string, s: FanoutSettings, named: string[] | undefined): View[] {
  const fanout = fanoutClusters(s);
  const clusters = ctx
    .clusters()
    .filter((c) => (fanout.tag !== "named" || fanout.val.includes(c.name)) && (named === undefined || named.includes(c.name)))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return clusters.map((info) => {
    let seen: Seen;
    try {
      const job = ctx.get(kinds.Job, info.name, namespace, req.name);
      if (job === undefined) seen = { type: "absent" };
      else {
        const owner = OWNER_LABELS.ownerOf(job.metadata?.labels);
        seen = owner !== undefined && sameRequest(owner, req) ? { type: "mine", job } : { type: "foreign" };
      }
    } catch (e) {
      if (!(e instanceof ReadError)) throw e;
      if (info.health === "ready" && e.kind !== "unknown-cluster") {
        throw ReconcileError.retry(e.message).context(
          `failed to read the job of test ${requestText(req)} in cluster ${info.name}`,
        );
      }
      seen = { type: "unknown", why: e.message };
    }
    return { info, seen };
  });
}

function clusterLine(v: View, finished: boolean, old: TestStatus): ClusterJob {
  const line = (state: JobState, message?: string): ClusterJob =>
    message === undefined ? { cluster: v.info.name, state } : { cluster: v.info.name, state, message };
  if (v.info.health === "unreachable") {
    const last =
      v.seen.type === "mine"
        ? jobState(v.seen.job)
        : old.clusters.find((l) => l.cluster === v.info.name && l.state !== "Unreachable")?.state;
    return line("Unreachable", last === undefined ? undefined : `last seen: ${last}`);
  }
  switch (v.seen.type) {
    case "mine":
      return line(jobState(v.seen.job));
    case "foreign":
      return line("Conflict", "a Job with this name exists without this Test's owner labels");
    case "unknown":
      return line("Syncing", v.seen.why);
    case "absent":
      if (v.info.health === "syncing") return line("Syncing");
      return line(finished ? "Skipped" : "Creating");
  }
}

function converge(ctx: Context, req: Request, test: Test, views: View[], defaults: JobDefaults): Outcome {
  const testRef = refForRequest(TestKind, req);
  const old = decodeStatus(test.status);
  const outcome = Outcome.done();
  const completedIn = views.find((v) => stateOf(v) === "Complete")?.info.name;
  const finished = old.phase === "finished" || completedIn !== undefined;

  const created: string[] = [];
  if (!finished) {
    for (const v of views) {
      if (v.seen.type === "absent" && v.info.health !== "unreachable") {
        if (v.info.name !== req.cluster && req.namespace !== undefined) {
          outcome.push(Action.create(v.info.name, kinds.Namespace, { metadata: { name: req.namespace } }));
        }
        outcome.push(Action.create(v.info.name, kinds.Job, jobWith(test, req, v.info.name, defaults)));
        created.push(v.info.name);
      }
    }
  }

  const clusters = views.map((v) => clusterLine(v, finished, old));
  const status: TestStatus = finished
    ? {
        phase: "finished",
        ...((old.finishedCluster ?? completedIn) !== undefined ? { finishedCluster: old.finishedCluster ?? completedIn } : {}),
        finishedAt: old.finishedAt ?? ctx.nowSeconds(),
        clusters,
      }
    : { phase: "running", clusters };

  if (created.length > 0) {
    ctx.info("creating jobs", { test: requestText(req), clusters: created.join(",") });
    outcome.push(
      Action.normalEvent(testRef, "CreatingJobs", "Create", `creating Job ${req.name} in cluster(s) ${created.join(", ")}`),
    );
  }
  if (finished && old.phase !== "finished") {
    const place = status.finishedCluster ?? "a cluster";
    ctx.info("test finished", { test: requestText(req), cluster: place });
    outcome.push(Action.normalEvent(testRef, "Finished", "Complete", `Job ${req.name} completed in cluster ${place}`));
  }
  for (const line of status.clusters) {
    const wasUnreachable = old.clusters.some((l) => l.cluster === line.cluster && l.state === "Unreachable");
    if (line.state === "Unreachable" && !wasUnreachable) {
      outcome.push(Action.warningEvent(testRef, "ClusterUnreachable", "Observe", `cluster ${line.cluster} cannot be reached`));
    }
  }
  const stored = test.status == null ? undefined : old;
  if (statusChanged(stored, status)) {
    outcome.push(Action.status(Action.mergePatch(testRef, { status })));
  }
  if (!finished) {
    const unreachable = views.some((v) => v.info.health === "unreachable");
    outcome.requeueAfter(unreachable ? UNREACHABLE_RETRY_MS : RESYNC_MS);
  }
  return outcome;
}

function cleanup(ctx: Context, req: Request, namespace: string, views: View[]): Outcome {
  const ready: ReturnType<typeof Action.delete>[] = [];
  const later: ReturnType<typeof Action.delete>[] = [];
  const waiting: string[] = [];
  for (const v of views) {
    const target: ObjectRef = objectRef(kinds.Job, v.info.name, namespace, req.name);
    const isReady = v.info.health === "ready";
    let del: ReturnType<typeof Action.delete> | undefined;
    if (v.seen.type === "mine") {
      del = Action.uid(Action.propagation(Action.delete(target), "background"), v.seen.job.metadata?.uid);
    } else if (v.seen.type === "absent" && isReady) {
      // A ready cache may lag behind a create that just succeeded.
      del = Action.propagation(Action.delete(target), "background");
    }
    if (isReady) {
      if (del) ready.push(del);
    } else {
      if (del) later.push(del);
      waiting.push(v.info.name);
    }
  }
  const outcome = Outcome.withActions([...ready, ...later]);
  if (waiting.length === 0) {
    ctx.info("deleting jobs in every cluster", { test: requestText(req) });
    return outcome;
  }
  ctx.info("waiting for clusters before finishing cleanup", { test: requestText(req), clusters: waiting.join(",") });
  return outcome.keepingFinalizer().requeueAfter(UNREACHABLE_RETRY_MS);
}

/** The plugin. */
export const testFanout: Plugin<Test> = {
  primary: TestKind,

  register: () => {
    // The settings shape the registration: Jobs only where they go.
    const fanout = fanoutClusters(settings(FANOUT_SETTINGS));
    return new Registration(PLUGIN_NAME, VERSION, TestKind)
      .withSettings(FANOUT_SETTINGS)
      .requeueOn(fanout)
      .watch(kinds.Job, fanout, Mapping.ownerLabels(OWNER_LABELS))
      .withFinalizer(FINALIZER)
      .permission(TestKind, ["get", "list", "watch", "patch", "update"], ClusterSet.primary)
      .statusPermission(TestKind, ["get", "patch", "update"], ClusterSet.primary)
      .permission(kinds.Job, ["get", "list", "watch", "create", "delete"], fanout)
      .permission(kinds.Namespace, ["get", "create"], fanout)
      .crd(crd);
  },

  reconcile(ctx: Context, req: Request, event: Event<Test>): Outcome {
    const namespace = req.namespace;
    if (namespace === undefined) throw ReconcileError.terminal(`test ${requestText(req)} has no namespace`);
    const s = ctx.settings(FANOUT_SETTINGS);
    const views = observe(ctx, req, namespace, s, event.primary.spec.clusters ?? undefined);
    return event.type === "apply" ? converge(ctx, req, event.primary, views, s.job) : cleanup(ctx, req, namespace, views);
  },
};

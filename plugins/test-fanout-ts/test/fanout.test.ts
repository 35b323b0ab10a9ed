// test-fanout (TypeScript) through @rekon/sdk's native test kit: the
// behaviours of the Rust seed's tests (plugins/test-fanout/tests/fanout.rs)
// and the Rust seed's recorded cases (test/cases/, recorded on kube-sim by
// `rekon run --record`) replayed natively.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { test } from "node:test";
import { Outcome, kinds, namespaced } from "@rekon/sdk";
import { World, assertCases } from "@rekon/sdk/testkit";
import { FINALIZER, type Test, TestKind, testFanout } from "../src/plugin.js";

const NS = "team-a";
const NAME = "t1";
const req = namespaced("main", NS, NAME);

function world(): World {
  const w = new World().primary("main").cluster("sub");
  w.insert("main", { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } });
  w.insert("main", { apiVersion: "job.lailin.xyz/v1", kind: "Test", metadata: { name: NAME, namespace: NS }, spec: { image: "busybox:1.36" } } as Test);
  return w;
}

const status = (w: World) => w.get<Test>(TestKind, "main", NS, NAME)?.status;
const stateOf = (w: World, cluster: string) => status(w)?.clusters.find((l) => l.cluster === cluster)?.state;
const reasons = (w: World) => w.events.map((e) => e.reason);
const complete = { succeeded: 1, completionTime: "2025-01-01T00:05:00Z", conditions: [{ type: "Complete", status: "True" }] };

test("registration declares the CRD, the Job watch by owner labels and the finalizer", () => {
  const reg = testFanout.register();
  assert.equal(reg.name, "test-fanout");
  assert.equal(reg.finalizer, FINALIZER);
  assert.deepEqual(reg.watches.map((w) => [w.resource.kind, w.clusters.tag, w.mapping.tag]), [["Job", "all", "owner-labels"]]);
  assert.equal((reg.crds[0] as any)?.spec?.names?.plural, "tests", "crd.json is the Rust seed's CRD (make ts-crds)");
});

test("fans a Job out to every cluster, namespace first where it is missing", () => {
  const w = world();
  w.converge(testFanout, req);
  for (const c of ["main", "sub"]) {
    const job = w.get(kinds.Job, c, NS, NAME) as any;
    assert.equal(job.spec.template.spec.containers[0].image, "busybox:1.36");
    assert.equal(job.metadata.labels["owner.cluster"], "main");
    assert.equal(job.metadata.ownerReferences?.length ?? 0, c === "main" ? 1 : 0);
  }
  assert.ok(w.get(kinds.Namespace, "sub", undefined, NS));
  assert.equal(stateOf(w, "main"), "Pending");
  assert.ok(reasons(w).includes("CreatingJobs"));
  w.assertNoWrites(testFanout, req);
});

test("a Job completing only in sub finishes the Test for good", () => {
  const w = world();
  w.converge(testFanout, req);
  w.modify(kinds.Job, "sub", NS, NAME, (j) => (j.status = complete));
  w.converge(testFanout, req);
  assert.equal(status(w)?.phase, "finished");
  assert.equal(status(w)?.finishedCluster, "sub");
  w.delete(kinds.Job, "sub", NS, NAME);
  w.converge(testFanout, req);
  assert.equal(status(w)?.phase, "finished");
  assert.equal(stateOf(w, "sub"), "Skipped");
  assert.equal(w.reconcile(testFanout, req).requeueAfterMs, undefined);
});

test("an unreachable cluster is reported, warned about once and retried sooner", () => {
  const w = world();
  w.converge(testFanout, req);
  w.setHealth("sub", "unreachable");
  const outcomes = w.converge(testFanout, req);
  assert.equal(stateOf(w, "sub"), "Unreachable");
  assert.equal(status(w)?.clusters.find((l) => l.cluster === "sub")?.message, "last seen: Pending");
  assert.equal(outcomes.at(-1)?.requeueAfterMs, 30_000);
  assert.equal(reasons(w).filter((r) => r === "ClusterUnreachable").length, 1);
});

test("a foreign Job with the Test's name is a conflict, never deleted", () => {
  const w = world();
  w.insert("sub", { apiVersion: "batch/v1", kind: "Job", metadata: { name: NAME, namespace: NS }, status: complete } as any);
  w.converge(testFanout, req);
  assert.equal(stateOf(w, "sub"), "Conflict");
  assert.equal(status(w)?.phase, "running");
  w.delete(TestKind, "main", NS, NAME);
  w.converge(testFanout, req);
  assert.ok(w.get(kinds.Job, "sub", NS, NAME), "someone else's Job stays");
  assert.equal(w.get(TestKind, "main", NS, NAME), undefined);
});

test("deletion deletes the Jobs everywhere, and waits for an unreachable cluster", () => {
  const w = world();
  w.converge(testFanout, req);
  w.setHealth("sub", "unreachable");
  w.delete(TestKind, "main", NS, NAME);
  const waiting: Outcome = w.reconcile(testFanout, req);
  assert.equal(waiting.finalized, false);
  assert.equal(waiting.ofType("delete").length, 2);
  w.apply(testFanout, req, waiting);
  assert.ok(w.get(TestKind, "main", NS, NAME), "finalizer kept");
  w.setHealth("sub", "ready");
  w.converge(testFanout, req);
  assert.equal(w.get(TestKind, "main", NS, NAME), undefined);
  assert.equal(w.get(kinds.Job, "main", NS, NAME), undefined);
});

test("the Rust seed's recorded cases decide the same here", () => {
  const dir = new URL("./cases", import.meta.url).pathname;
  assert.ok(existsSync(dir), `no recorded cases in ${dir}`);
  assert.ok(assertCases(testFanout, dir) > 0);
});

// --- settings (the Rust seed's settings tests) ------------------------------

test("job defaults from the settings reach every job", () => {
  const w = world().withSettings({ job: { backoffLimit: 2, activeDeadlineSeconds: 600, ttlSecondsAfterFinished: 3600 } });
  w.converge(testFanout, req);
  for (const c of ["main", "sub"]) {
    const spec = (w.get(kinds.Job, c, NS, NAME) as any).spec;
    assert.deepEqual([spec.backoffLimit, spec.activeDeadlineSeconds, spec.ttlSecondsAfterFinished], [2, 600, 3600], c);
  }
});

test("named clusters narrow the fan-out and the registration", () => {
  const w = world().cluster("other").withSettings({ clusters: ["main", "sub"] });
  const reg = w.register(testFanout);
  assert.deepEqual(reg.clusters, { tag: "named", val: ["main", "sub"] });
  w.converge(testFanout, req);
  assert.ok(w.get(kinds.Job, "sub", NS, NAME));
  assert.equal(w.get(kinds.Job, "other", NS, NAME), undefined);
  assert.deepEqual(status(w)?.clusters.map((l) => l.cluster), ["main", "sub"]);
  w.setSettings(undefined);
  w.converge(testFanout, req);
  assert.ok(w.get(kinds.Job, "other", NS, NAME));
});

test("invalid settings are refused like the Rust seed refuses them", () => {
  for (const [given, reason] of [
    [{ job: { backoffLimit: -1 } }, "backoffLimit must not be negative"],
    [{ clusters: [""] }, "is not a cluster name"],
    [{ cluster: ["a"] }, "unknown field `cluster`"],
  ] as const) {
    assert.throws(() => world().withSettings(given).register(testFanout), (e: Error) => e.message.startsWith("invalid settings: ") && e.message.includes(reason));
  }
});

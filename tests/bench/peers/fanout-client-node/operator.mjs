// The test-fanout job written as a TypeScript/JavaScript author would write
// it without rekon: @kubernetes/client-node informers (a list then a watch
// per resource, an in-memory cache), a work queue keyed by Test, Jobs made
// with server-side apply, the Test's status merge-patched, a finalizer that
// deletes the Jobs. The native peer of rekon + plugins/test-fanout-ts in
// tests/bench/peers.py (a bench, not a product: no leader election, no
// metrics).
//
//   node operator.mjs KUBECONFIG MAIN_CONTEXT SUB_CONTEXT...
//
// Prints "ready" once every informer has listed.
import * as k8s from "@kubernetes/client-node";

const [kubeconfigPath, ...contexts] = process.argv.slice(2);
if (!kubeconfigPath || contexts.length === 0) {
  console.error("usage: node operator.mjs KUBECONFIG MAIN_CONTEXT [OTHER_CONTEXT...]");
  process.exit(2);
}
const GROUP = "job.lailin.xyz";
const VERSION = "v1";
const PLURAL = "tests";
const FINALIZER = "job.lailin.xyz/fanout-cleanup";
const MANAGER = "fanout-client-node";
const OWNER = { cluster: "owner.cluster", namespace: "owner.namespace", name: "owner.name" };
const CONCURRENCY = 8;

function client(context) {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  kc.setCurrentContext(context);
  return {
    name: context,
    kc,
    objects: k8s.KubernetesObjectApi.makeApiClient(kc),
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
    batch: kc.makeApiClient(k8s.BatchV1Api),
    core: kc.makeApiClient(k8s.CoreV1Api),
  };
}

const clusters = contexts.map(client);
const main = clusters[0];
const mergePatch = k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch);

// Informers: Tests in the main cluster, owned Jobs in every cluster.
const tests = k8s.makeInformer(main.kc, `/apis/${GROUP}/${VERSION}/${PLURAL}`, () =>
  main.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL }),
);
const jobs = new Map(
  clusters.map((c) => [
    c.name,
    k8s.makeInformer(
      c.kc,
      "/apis/batch/v1/jobs",
      () => c.batch.listJobForAllNamespaces({ labelSelector: OWNER.name }),
      OWNER.name,
    ),
  ]),
);

// The work queue: one pending entry per Test, at most CONCURRENCY at once,
// a Test never reconciled twice concurrently.
const queued = new Set();
const running = new Set();
const again = new Set();
let active = 0;
const key = (ns, name) => `${ns}/${name}`;

function enqueue(ns, name) {
  const k = key(ns, name);
  if (running.has(k)) {
    again.add(k);
    return;
  }
  queued.add(k);
  pump();
}

function pump() {
  while (active < CONCURRENCY && queued.size > 0) {
    const k = queued.values().next().value;
    queued.delete(k);
    running.add(k);
    active++;
    reconcile(k)
      .catch((e) => {
        console.error(`reconcile ${k}: ${e?.body?.message ?? e?.message ?? e}`);
        setTimeout(() => enqueue(...k.split("/")), 500);
      })
      .finally(() => {
        running.delete(k);
        active--;
        if (again.delete(k)) queued.add(k);
        pump();
      });
  }
}

function jobState(job) {
  const s = job.status ?? {};
  const cond = (t) => (s.conditions ?? []).some((c) => c.type === t && c.status === "True");
  if (cond("Complete") || s.completionTime) return "Complete";
  if (cond("Failed")) return "Failed";
  if ((s.active ?? 0) > 0) return "Running";
  return "Pending";
}

function desiredJob(test, cluster) {
  const { name, namespace, uid } = test.metadata;
  const metadata = {
    name,
    namespace,
    labels: { [OWNER.cluster]: main.name, [OWNER.namespace]: namespace, [OWNER.name]: name },
  };
  if (cluster === main.name) {
    metadata.ownerReferences = [{ apiVersion: `${GROUP}/${VERSION}`, kind: "Test", name, uid, controller: true }];
  }
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata,
    spec: {
      template: { spec: { containers: [{ name, image: test.spec.image }], restartPolicy: "Never" } },
    },
  };
}

async function ensureNamespace(c, namespace) {
  try {
    await c.core.createNamespace({ body: { metadata: { name: namespace } } });
  } catch (e) {
    if (e?.code !== 409) throw e;
  }
}

async function reconcile(k) {
  const [namespace, name] = k.split("/");
  const test = tests.get(name, namespace);
  if (!test) return;
  const ref = { group: GROUP, version: VERSION, namespace, plural: PLURAL, name };
  if (test.metadata.deletionTimestamp) {
    for (const c of clusters) {
      if (jobs.get(c.name).get(name, namespace)) {
        await c.batch.deleteNamespacedJob({ name, namespace, propagationPolicy: "Background" }).catch((e) => {
          if (e?.code !== 404) throw e;
        });
      }
    }
    const finalizers = (test.metadata.finalizers ?? []).filter((f) => f !== FINALIZER);
    await main.custom.patchNamespacedCustomObject(
      { ...ref, body: { metadata: { finalizers, resourceVersion: test.metadata.resourceVersion } } },
      mergePatch,
    );
    return;
  }
  if (!(test.metadata.finalizers ?? []).includes(FINALIZER)) {
    await main.custom.patchNamespacedCustomObject(
      {
        ...ref,
        body: { metadata: { finalizers: [...(test.metadata.finalizers ?? []), FINALIZER], resourceVersion: test.metadata.resourceVersion } },
      },
      mergePatch,
    );
    return; // the update comes back through the informer
  }
  const old = test.status ?? {};
  const lines = [];
  let completedIn;
  for (const c of clusters) {
    const job = jobs.get(c.name).get(name, namespace);
    const state = job ? jobState(job) : undefined;
    if (state === "Complete" && completedIn === undefined) completedIn = c.name;
    lines.push({ c, job, state });
  }
  const finished = old.phase === "finished" || completedIn !== undefined;
  for (const l of lines) {
    if (!l.job && !finished) {
      if (l.c !== main) await ensureNamespace(l.c, namespace);
      await l.c.objects.patch(desiredJob(test, l.c.name), undefined, undefined, MANAGER, true, k8s.PatchStrategy.ServerSideApply);
      l.state = "Creating";
    }
  }
  const status = {
    phase: finished ? "finished" : "running",
    clusters: lines.map((l) => ({ cluster: l.c.name, state: l.state ?? (finished ? "Skipped" : "Creating") })),
  };
  if (finished) {
    status.finishedCluster = old.finishedCluster ?? completedIn;
    status.finishedAt = old.finishedAt ?? new Date().toISOString().replace(/\.\d+Z$/, "Z");
  }
  if (JSON.stringify(status) !== JSON.stringify(old)) {
    await main.custom.patchNamespacedCustomObjectStatus({ ...ref, body: { status } }, mergePatch);
  }
}

tests.on(k8s.ADD, (t) => enqueue(t.metadata.namespace, t.metadata.name));
tests.on(k8s.UPDATE, (t) => enqueue(t.metadata.namespace, t.metadata.name));
for (const informer of jobs.values()) {
  const owner = (job) => {
    const l = job.metadata?.labels ?? {};
    if (l[OWNER.cluster] === main.name && l[OWNER.name]) enqueue(l[OWNER.namespace], l[OWNER.name]);
  };
  informer.on(k8s.ADD, owner);
  informer.on(k8s.UPDATE, owner);
  informer.on(k8s.DELETE, owner);
}
for (const informer of [tests, ...jobs.values()]) {
  informer.on(k8s.ERROR, (e) => {
    console.error(`watch error: ${e?.message ?? e}; restarting in 1 s`);
    setTimeout(() => informer.start(), 1000);
  });
}
await Promise.all([...jobs.values()].map((i) => i.start()));
await tests.start();
console.log("ready");

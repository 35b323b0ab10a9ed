// test-fanout's webhooks (TypeScript) through @rekon/sdk's test kit: the
// cases of the Rust seed's tests/admission.rs, with the same expected
// verdicts, messages and defaults.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { admissionRequest, kinds, namespaced } from "@rekon/sdk";
import { World } from "@rekon/sdk/testkit";
import { DEFAULT_RULE, ParseError, VALIDATE_RULE, parseReference, testFanoutAdmission } from "../src/admission.js";
import { type Test, TestKind, testFanout } from "../src/plugin.js";

const NS = "team-a";

function t(name: string, image: string, clusters?: string[]): Test {
  const spec: Test["spec"] = clusters === undefined ? { image } : { image, clusters };
  return { apiVersion: "job.lailin.xyz/v1", kind: "Test", metadata: { name, namespace: NS }, spec };
}

/** Clusters main (primary), sub and edge. */
const world = () => new World().primary("main").cluster("sub").cluster("edge");
const create = (obj: Test) => admissionRequest.create(TestKind, "main", obj);
const validate = (w: World, obj: Test) => w.validate(testFanoutAdmission, create(obj), testFanout);
const DIGEST = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

test("two webhooks: validate creates, default creates and updates", () => {
  const rules = testFanoutAdmission.rules();
  assert.deepEqual(
    rules.map((r) => [r.name, r.kind, r.operations, r.resources[0]?.plural]),
    [
      [VALIDATE_RULE, "validate", ["create"], "tests"],
      [DEFAULT_RULE, "mutate", ["create", "update"], "tests"],
    ],
  );
});

test("an update setting the untagged image again is defaulted back", () => {
  const stored = t("t1", "busybox:latest");
  const update = admissionRequest.update(TestKind, "main", stored, t("t1", "busybox"));
  const m = world().mutate(testFanoutAdmission, update, testFanout);
  assert.deepEqual((m.object as Test | undefined)?.spec, stored.spec);
});

test("an update of a Test stored untagged changes no image", () => {
  const stored = t("t1", "busybox");
  const labelled = { ...stored, metadata: { ...stored.metadata, labels: { a: "b" } } };
  const m = world().mutate(testFanoutAdmission, admissionRequest.update(TestKind, "main", stored, labelled), testFanout);
  assert.equal(m.object, undefined);
});

test("a valid Test is admitted", () => {
  const w = world();
  for (const image of ["busybox", "busybox:1.36", "registry.example.com:5000/team/app:v1", `ghcr.io/org/tool@${DIGEST}`]) {
    assert.ok(validate(w, t("t1", image)).allowed, image);
  }
  assert.ok(validate(w, t("t1", "busybox:1.36", ["sub", "main"])).allowed);
});

test("an image that is not a reference is invalid as the API server words it", () => {
  const w = world();
  const denial = validate(w, t("t1", "Busy Box")).denial;
  assert.equal(denial?.code, 422);
  assert.deepEqual(denial?.fieldErrors, [{ path: "spec.image", message: 'Invalid value: "Busy Box": invalid reference format' }]);
  assert.equal(denial?.message, 'Test.job.lailin.xyz "t1" is invalid: spec.image: Invalid value: "Busy Box": invalid reference format');
  for (const image of ["Busybox:1.36", "busybox@sha256:abc"]) {
    assert.equal(validate(w, t("t1", image)).denial?.code, 422, image);
  }
  assert.deepEqual(validate(w, t("t1", "")).denial?.fieldErrors, [{ path: "spec.image", message: "Required value" }]);
});

test("a Test naming an unknown cluster is invalid with the known ones listed", () => {
  const w = world();
  const denial = validate(w, t("t1", "busybox:1.36", ["sub", "nope"])).denial;
  assert.equal(denial?.code, 422);
  assert.deepEqual(denial?.fieldErrors, [
    { path: "spec.clusters[1]", message: 'Unsupported value: "nope": supported values: "edge", "main", "sub"' },
  ]);
  const both = validate(w, t("t2", "a b", ["gone"])).denial;
  assert.equal(both?.fieldErrors.length, 2);
  assert.ok(both?.message.startsWith('Test.job.lailin.xyz "t2" is invalid: [spec.image: '), both?.message);
});

test("the known clusters are those the settings fan out to and the host engages", () => {
  const w = world().withSettings({ clusters: ["main", "sub", "later"] });
  assert.equal(
    validate(w, t("t1", "busybox", ["edge"])).denial?.fieldErrors[0]?.message,
    'Unsupported value: "edge": supported values: "main", "sub"',
  );
  assert.equal(validate(w, t("t1", "busybox", ["later"])).allowed, false);
  assert.ok(validate(w, t("t1", "busybox", ["sub"])).allowed);
});

test("an image without tag or digest is defaulted to latest", () => {
  const w = world();
  for (const [image, want] of [
    ["busybox", "busybox:latest"],
    ["localhost:5000/app", "localhost:5000/app:latest"],
    ["busybox:1.36", undefined],
    ["localhost:5000/app:v2", undefined],
    [`busybox@${DIGEST}`, undefined],
    ["Busy Box", undefined],
  ] as const) {
    const m = w.mutate(testFanoutAdmission, create(t("t1", image)), testFanout);
    assert.equal((m.object as Test | undefined)?.spec.image, want, image);
  }
});

test("a defaulted Test reconciles as the Test it was written as", () => {
  const written = t("t1", "busybox");
  const defaulted = world().mutate(testFanoutAdmission, create(written), testFanout).object as Test;
  assert.equal(defaulted.spec.image, "busybox:latest");
  assert.deepEqual(parseReference(written.spec.image), parseReference(defaulted.spec.image));
  const run = (obj: Test) => {
    const w = world();
    w.insert("main", { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } });
    w.insert("main", obj);
    w.converge(testFanout, namespaced("main", NS, "t1"));
    const jobs = ["edge", "main", "sub"].map((c) => {
      const job = w.get(kinds.Job, c, NS, "t1") as any;
      const container = job.spec.template.spec.containers[0];
      const image = parseReference(container.image);
      delete container.image;
      delete job.metadata.ownerReferences?.[0]?.uid;
      return [job, image];
    });
    return [w.get<Test>(TestKind, "main", NS, "t1")?.status, jobs];
  };
  assert.deepEqual(run(written), run(defaulted));
});

test("a Test naming clusters fans out to those only", () => {
  const w = world();
  w.insert("main", { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } });
  w.insert("main", t("t1", "busybox:1.36", ["sub"]));
  w.converge(testFanout, namespaced("main", NS, "t1"));
  assert.ok(w.get(kinds.Job, "sub", NS, "t1"));
  for (const other of ["main", "edge"]) assert.equal(w.get(kinds.Job, other, NS, "t1"), undefined, other);
  assert.deepEqual(w.get<Test>(TestKind, "main", NS, "t1")?.status?.clusters.map((l) => l.cluster), ["sub"]);
});

test("the reference parser answers as oci-spec's", () => {
  // Cases of oci-spec 0.10's own tests (src/distribution/reference.rs).
  assert.deepEqual(parseReference("busybox"), { registry: "docker.io", repository: "library/busybox", tag: "latest" });
  assert.deepEqual(parseReference("test.com:tag"), { registry: "docker.io", repository: "library/test.com", tag: "tag" });
  assert.deepEqual(parseReference("test.com/repo:tag"), { registry: "test.com", repository: "repo", tag: "tag" });
  assert.deepEqual(parseReference("index.docker.io/foo"), { registry: "docker.io", repository: "library/foo", tag: "latest" });
  assert.deepEqual(parseReference(`lowercase:Uppercase`), { registry: "docker.io", repository: "library/lowercase", tag: "Uppercase" });
  assert.throws(() => parseReference("Uppercase:tag"), /^ParseError: invalid reference format$/);
  assert.throws(() => parseReference("busybox@sha256:abc"), /^ParseError: invalid reference format$/);
  assert.throws(() => parseReference(`busybox@sha256:${"a".repeat(63)}`), /invalid checksum digest length/);
  assert.throws(() => parseReference(`busybox@md5:${"a".repeat(32)}`), /unsupported digest algorithm/);
  assert.throws(() => parseReference(`a/${"b".repeat(254)}`), /must not be more than 255 characters/);
  // At the bound: 255 is admitted.
  assert.equal(parseReference(`a/${"b".repeat(253)}`).repository.length, 255);
});

test("the reference parser gives the Rust seed's answers on its table", () => {
  // Written by the Rust seed's test `the_typescript_ports_table_holds_this_parsers_answers`
  // (every string of up to 3 characters over the grammar's classes, and chosen cases).
  const path = new URL("./references.json", import.meta.url);
  assert.ok(existsSync(path), `${path.pathname} is missing`);
  const table = JSON.parse(readFileSync(path, "utf8")) as [string, string][];
  assert.ok(table.length > 800, `${table.length} rows`);
  for (const [input, want] of table) {
    let got: string;
    try {
      const r = parseReference(input);
      got = `${r.registry}|${r.repository}|${r.tag ?? ""}|${r.digest ?? ""}`;
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      got = `error: ${e.message}`;
    }
    assert.equal(got, want, JSON.stringify(input));
  }
});

// The admission side natively: verdicts and mutations as values, what a
// thrown value does (deny with 400, deny with the error's code and fields,
// or trap), and the test kit's validate/mutate reading the world as the
// host reads a plugin's caches.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ConfigMap } from "kubernetes-types/core/v1";
import {
  type Admission,
  AdmissionError,
  AdmissionRule,
  ClusterSet,
  Mutation,
  Outcome,
  type Plugin,
  ReadError,
  Registration,
  Verdict,
  admissionRequest,
  kinds,
} from "../src/index.js";
import { World } from "../src/testkit/index.js";

const cm = (name: string, data: Record<string, string> = {}): ConfigMap => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: "default" },
  data,
});

/** Reads only ConfigMaps (its primary); refuses a password in a ConfigMap. */
const guardPlugin: Plugin<ConfigMap> = {
  primary: kinds.ConfigMap,
  register: () => new Registration("guard", "0.1.0", kinds.ConfigMap).permission(kinds.ConfigMap, ["get", "list", "watch"], ClusterSet.primary),
  reconcile: () => Outcome.done(),
};

const guard: Admission = {
  rules: () => [AdmissionRule.validate("data", kinds.ConfigMap), AdmissionRule.mutate("owner", kinds.ConfigMap).withOperations("create")],
  validate(ctx, req) {
    const obj = req.object as ConfigMap | undefined;
    if (obj?.data?.mode === "bug") return (undefined as unknown as { x: Verdict }).x;
    if (obj?.data?.mode === "secrets") ctx.list(kinds.Secret, req.cluster, req.namespace);
    if (obj?.data?.mode === "throw") throw new AdmissionError("mode throw is refused", 422, [{ path: "data.mode", message: "not throw" }]);
    if (obj?.data?.password !== undefined) {
      return Verdict.deny("passwords belong in Secrets").withField("data.password", "not allowed here").withWarning("see the docs");
    }
    const others = ctx.list(kinds.ConfigMap, req.cluster, req.namespace).length;
    return others > 1 ? Verdict.allow().withWarning(`${others} ConfigMaps already`) : Verdict.allow();
  },
  mutate(_ctx, req) {
    const obj = req.object as ConfigMap;
    if (obj.metadata?.labels?.owner) return Mutation.unchanged();
    return Mutation.object({ ...obj, metadata: { ...obj.metadata, labels: { owner: req.user.username } } }).withWarning("owner defaulted");
  },
};

test("a verdict is built as the Rust SDK builds one", () => {
  const v = Verdict.deny("no").withCode(422).withField("spec.a", "bad").withWarning("w");
  assert.equal(v.allowed, false);
  assert.deepEqual(v.denial, { message: "no", code: 422, fieldErrors: [{ path: "spec.a", message: "bad" }] });
  assert.deepEqual(v.warnings, ["w"]);
  const ok = Verdict.allow().withCode(500).withField("x", "y");
  assert.equal(ok.denial, undefined, "code and fields of an allowed verdict are ignored");
  assert.equal(Verdict.deny("no").denial?.code, 403);
});

test("rules are declared with defaults and builders", () => {
  const r = AdmissionRule.validate("size", kinds.ConfigMap)
    .withResource(kinds.Secret)
    .withFailurePolicy("ignore")
    .withTimeoutSeconds(3)
    .withMatchCondition("not-system", "object.metadata.namespace != 'kube-system'");
  assert.deepEqual([r.name, r.kind, r.resources.map((t) => t.plural), r.operations, r.failurePolicy, r.timeoutSeconds], [
    "size",
    "validate",
    ["configmaps", "secrets"],
    ["create", "update"],
    "ignore",
    3,
  ]);
  const m = AdmissionRule.mutate("x", kinds.ConfigMap);
  assert.deepEqual([m.kind, m.failurePolicy, m.timeoutSeconds, m.matchConditions], ["mutate", "fail", undefined, []]);
});

test("validate denies, warns and reads the world's cache", () => {
  const w = new World().primary("main");
  const denied = w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a", { password: "x" })), guardPlugin);
  assert.deepEqual(denied.denial?.fieldErrors, [{ path: "data.password", message: "not allowed here" }]);
  assert.deepEqual(denied.warnings, ["see the docs"]);
  w.insert("main", cm("b"));
  w.insert("main", cm("c"));
  const warned = w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a")), guardPlugin);
  assert.deepEqual([warned.allowed, warned.warnings], [true, ["2 ConfigMaps already"]]);
});

test("what validate throws: an AdmissionError or a read error denies, a bug is thrown", () => {
  const w = new World().primary("main");
  const thrown = w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a", { mode: "throw" })));
  assert.deepEqual(thrown.denial, { message: "mode throw is refused", code: 422, fieldErrors: [{ path: "data.mode", message: "not throw" }] });
  // The plugin reads Secrets it does not watch: the host refuses the read; a 400.
  const unwatched = w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a", { mode: "secrets" })), guardPlugin);
  assert.equal(unwatched.denial?.code, 400);
  assert.equal(unwatched.denial?.message, new ReadError("not-watched", "v1/Secret in cluster main").message);
  // Without the plugin, the world serves every read (as the Rust test kit's).
  assert.ok(w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a", { mode: "secrets" }))).allowed);
  // A TypeError is a bug: thrown (the component traps; the host answers 500).
  assert.throws(() => w.validate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a", { mode: "bug" }))), TypeError);
});

test("mutate returns the object to store; a missing method allows and changes nothing", () => {
  const w = new World().primary("main");
  const m = w.mutate(guard, admissionRequest.create(kinds.ConfigMap, "main", cm("a")));
  assert.equal(m.object?.metadata?.labels?.owner, "kubernetes-admin");
  assert.deepEqual([m.allowed, m.warnings], [true, ["owner defaulted"]]);
  const labelled = cm("a");
  labelled.metadata!.labels = { owner: "me" };
  assert.equal(w.mutate(guard, admissionRequest.create(kinds.ConfigMap, "main", labelled)).object, undefined);
  const bare: Admission = { rules: () => [] };
  const req = admissionRequest.update(kinds.ConfigMap, "main", cm("a"), cm("a", { k: "v" }));
  assert.ok(w.validate(bare, req).allowed);
  assert.equal(w.mutate(bare, req).object, undefined);
  assert.deepEqual([req.operation, req.oldObject?.data, req.name, req.namespace], ["update", {}, "a", "default"]);
  const del = admissionRequest.delete(kinds.ConfigMap, "main", cm("gone"));
  assert.deepEqual([del.object, del.oldObject?.metadata?.name, del.name], [undefined, "gone", "gone"]);
});

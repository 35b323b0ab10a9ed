// widgets (TypeScript) through @rekon/sdk's native test kit: the cases of
// the Rust plugin's tests (tests/plugins/widgets/tests/widgets.rs), and the
// host's own reading of the built components (`rekon plugin inspect`: the
// rules and conversions are checked once, by the host).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { admissionRequest, conversionRequest, namespaced } from "@rekon/sdk";
import { World, inspectComponent } from "@rekon/sdk/testkit";
import {
  CONVERT_TRAP_NAME,
  MAX_SIZE,
  type OldWidget,
  STRICT_MAX_SIZE,
  TIER_LABEL,
  TRAP_NAME,
  type Widget,
  WidgetKind,
  versionedWidgets,
  strictWidgetsAdmission,
  widgets,
  widgetsAdmission,
  widgetsConversion,
} from "../src/plugin.js";

function widget(name: string, size: number): Widget {
  return { apiVersion: "widgets.rekon.dev/v1", kind: "Widget", metadata: { name, namespace: "default" }, spec: { size } };
}

const create = (w: Widget) => admissionRequest.create(WidgetKind, "main", w);

test("the host reads the built component's rules as declared", () => {
  const out = mkdtempSync(join(tmpdir(), "widgets-ts-"));
  try {
    const wasm = join(out, "widgets_ts.wasm");
    // The package's own build script, its output moved (the last -o wins).
    const built = spawnSync("npm", ["run", "build", "--", "-o", wasm], { encoding: "utf8" });
    assert.equal(built.status, 0, built.stderr);
    assert.match(built.stderr, /world admission-plugin/);
    const inspected = inspectComponent(wasm);
    assert.deepEqual(
      inspected.admission.map((r: any) => [r.name, r.kind, r.operations, r.failurePolicy, r.timeoutSeconds]),
      [
        ["size.widgets.rekon.dev", "validate", ["CREATE", "UPDATE"], "Fail", 5],
        ["tier.widgets.rekon.dev", "mutate", ["CREATE"], "Fail", 10],
      ],
    );
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("a rule the host refuses is refused when the host loads the component", () => {
  const out = mkdtempSync(join(tmpdir(), "widgets-ts-"));
  try {
    const wasm = join(out, "bad.wasm");
    const built = spawnSync("npx", ["rekon-build", "test/fixtures/bad-rules.ts", "-o", wasm], { encoding: "utf8" });
    assert.equal(built.status, 0, built.stderr);
    assert.throws(() => inspectComponent(wasm), /admission rule "size": timeout of 31 s is outside the API server's 1 to 30 s/);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("the host reads and compiles the built component's policies", () => {
  const out = mkdtempSync(join(tmpdir(), "widgets-ts-"));
  try {
    const wasm = join(out, "widgets_ts_policies.wasm");
    const built = spawnSync("npm", ["run", "build:policies", "--", "-o", wasm], { encoding: "utf8" });
    assert.equal(built.status, 0, built.stderr);
    assert.match(built.stderr, /world admission-policies-plugin/);
    const inspected = inspectComponent(wasm);
    assert.deepEqual(inspected.policies, [
      {
        name: "name",
        resources: [{ group: "widgets.rekon.dev", version: "v1", kind: "Widget", plural: "widgets", scope: "Namespaced" }],
        operations: ["CREATE", "UPDATE"],
        failurePolicy: "Fail",
        matchConditions: [],
        validations: [
          {
            expression: "object.metadata.name != 'forbidden'",
            messageExpression: "'the name ' + object.metadata.name + ' is not allowed'",
            reason: "Invalid",
          },
        ],
      },
    ]);
    // The webhooks are still there.
    assert.equal(inspected.admission.length, 2);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("a policy whose CEL does not compile is refused when the host loads the component", () => {
  const out = mkdtempSync(join(tmpdir(), "widgets-ts-"));
  try {
    const wasm = join(out, "bad.wasm");
    const built = spawnSync("npx", ["rekon-build", "test/fixtures/bad-policy.ts", "-o", wasm], { encoding: "utf8" });
    assert.equal(built.status, 0, built.stderr);
    assert.match(built.stderr, /world policies-plugin/);
    assert.throws(
      () => inspectComponent(wasm),
      /policy "name": validations\[0\]\.expression: expression "object\.metadata\.name in \[" does not compile: ERROR: <input>:1:26/,
    );
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("a widget too large is denied with a field error", () => {
  const world = new World().primary("main");
  const denial = world.validate(widgetsAdmission, create(widget("w", 11)), widgets).denial;
  assert.deepEqual(denial, {
    message: "a widget's size is at most 10, not 11",
    code: 422,
    fieldErrors: [{ path: "spec.size", message: `must be at most ${MAX_SIZE}` }],
  });
  const negative = world.validate(widgetsAdmission, create(widget("w", -1)), widgets).denial;
  assert.deepEqual([negative?.code, negative?.fieldErrors.length], [403, 0]);
  assert.ok(world.validate(widgetsAdmission, create(widget("w", 10)), widgets).allowed);
});

test("the strict build denies above 5 what the default admits, in the same words", () => {
  const world = new World().primary("main");
  assert.ok(world.validate(widgetsAdmission, create(widget("w", 7)), widgets).allowed);
  const denial = world.validate(strictWidgetsAdmission, create(widget("w", 7)), widgets).denial;
  assert.deepEqual(denial, {
    message: "a widget's size is at most 5, not 7",
    code: 422,
    fieldErrors: [{ path: "spec.size", message: `must be at most ${STRICT_MAX_SIZE}` }],
  });
  assert.ok(world.validate(strictWidgetsAdmission, create(widget("w", 5)), widgets).allowed);
  assert.deepEqual(world.mutate(strictWidgetsAdmission, create(widget("w", 3)), widgets).warnings, [
    "a widget above size 2 is large",
  ]);
});

test("a plain Error is not a denial: it propagates (the component traps)", () => {
  const world = new World().primary("main");
  assert.throws(() => world.validate(widgetsAdmission, create(widget(TRAP_NAME, 1)), widgets), /widgets: asked to trap/);
});

test("mutate defaults the tier, keeps a given one, and warns about a large widget", () => {
  const world = new World().primary("main");
  const m = world.mutate(widgetsAdmission, create(widget("w", 1)), widgets);
  assert.equal(m.object?.metadata?.labels?.[TIER_LABEL], "standard");
  assert.deepEqual(m.warnings, []);
  const gold = widget("w", 1);
  gold.metadata!.labels = { [TIER_LABEL]: "gold" };
  assert.equal(world.mutate(widgetsAdmission, create(gold), widgets).object, undefined);
  const large = world.mutate(widgetsAdmission, create(widget("w", 7)), widgets);
  assert.deepEqual(large.warnings, ["a widget above size 5 is large"]);
  assert.equal(large.object?.metadata?.labels?.[TIER_LABEL], "standard");
});

test("reconcile reports the size", () => {
  const world = new World().primary("main");
  world.insert("main", widget("w", 3));
  world.converge(widgets, namespaced("main", "default", "w"));
  assert.equal(world.get<Widget>(WidgetKind, "main", "default", "w")?.status?.observedSize, 3);
});

test("a namespace holds at most three widgets, as the cache shows", () => {
  const world = new World().primary("main");
  for (const name of ["a", "b"]) world.insert("main", widget(name, 1));
  assert.ok(world.validate(widgetsAdmission, create(widget("c", 1)), widgets).allowed);
  world.insert("main", widget("c", 1));
  assert.equal(
    world.validate(widgetsAdmission, create(widget("d", 1)), widgets).denial?.message,
    "namespace default already holds 3 widgets, the most it may hold",
  );
  // An update of one of them is not a new widget.
  const update = admissionRequest.update(WidgetKind, "main", widget("c", 1), widget("c", 2));
  assert.ok(world.validate(widgetsAdmission, update, widgets).allowed);
});

test("the conversion build's component converts the CRD the host reads at two versions", () => {
  const out = mkdtempSync(join(tmpdir(), "widgets-ts-"));
  try {
    const wasm = join(out, "widgets_ts_conversion.wasm");
    const built = spawnSync("npm", ["run", "build:conversion", "--", "-o", wasm], { encoding: "utf8" });
    assert.equal(built.status, 0, built.stderr);
    assert.match(built.stderr, /world admission-conversion-plugin/);
    const inspected = inspectComponent(wasm);
    assert.deepEqual(inspected.conversion, [{ group: "widgets.rekon.dev", kind: "Widget", plural: "widgets", versions: ["v1alpha1", "v1"] }]);
    assert.deepEqual(
      inspected.crds[0].spec.versions.map((v: any) => [v.name, v.storage]),
      [["v1", true], ["v1alpha1", false]],
    );
    assert.equal(inspected.admission.length, 2);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test("a widget converts to v1 and back without loss; a trap propagates", () => {
  const world = new World().primary("main");
  const old: OldWidget = {
    apiVersion: "widgets.rekon.dev/v1alpha1",
    kind: "Widget",
    metadata: { name: "w", namespace: "default", uid: "u-1", labels: { [TIER_LABEL]: "gold" } },
    spec: { amount: 4 },
    status: { observedSize: 4 },
  };
  const atV1 = world.convert(widgetsConversion, conversionRequest("widgets.rekon.dev/v1", old), versionedWidgets);
  assert.ok("ok" in atV1);
  assert.deepEqual(atV1.ok, { ...old, apiVersion: "widgets.rekon.dev/v1", spec: { size: 4 } });
  assert.deepEqual(world.roundTrip(widgetsConversion, old, "widgets.rekon.dev/v1", versionedWidgets), old);
  const w = widget("n", 9);
  assert.deepEqual(world.roundTrip(widgetsConversion, w, "widgets.rekon.dev/v1alpha1", versionedWidgets), w);
  assert.deepEqual(world.convert(widgetsConversion, conversionRequest("widgets.rekon.dev/v2", old)), {
    error: "widgets converts between v1alpha1 and v1, not from v1alpha1 to v2",
  });
  assert.throws(
    () => world.convert(widgetsConversion, conversionRequest("widgets.rekon.dev/v1alpha1", widget(CONVERT_TRAP_NAME, 1))),
    /asked to trap in convert/,
  );
});

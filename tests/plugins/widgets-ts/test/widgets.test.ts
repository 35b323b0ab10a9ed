// widgets (TypeScript) through @rekon/sdk's native test kit: the cases of
// the Rust plugin's tests (tests/plugins/widgets/tests/widgets.rs), and the
// host's own reading of the built component (`rekon plugin inspect`: the
// rules are checked once, by the host).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { admissionRequest, namespaced } from "@rekon/sdk";
import { World, inspectComponent } from "@rekon/sdk/testkit";
import { MAX_SIZE, TIER_LABEL, TRAP_NAME, type Widget, WidgetKind, widgets, widgetsAdmission } from "../src/plugin.js";

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

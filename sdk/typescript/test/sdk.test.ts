// The SDK natively: the test kit's world runs a small plugin as the host
// would (finalizer first, typed reads, permissions, cleanup), the wire
// format matches the host's case format, selectors parse like the host's.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  Action,
  ClusterSet,
  type Event,
  Outcome,
  type Plugin,
  ReconcileError,
  Registration,
  SETTINGS_REFUSAL_PREFIX,
  type SettingsType,
  settings,
  kinds,
  namespaced,
  refForRequest,
} from "../src/index.js";
import { World, actionValue, matches, outcomeValue, parseSelector } from "../src/testkit/index.js";
import type { ConfigMap } from "kubernetes-types/core/v1";

const LABEL = "example.com/seen";
const FINALIZER = "example.com/cleanup";

/** Stamps a label; on cleanup, deletes the ConfigMap's "-copy". */
const stamper: Plugin<ConfigMap> = {
  primary: kinds.ConfigMap,
  register: () =>
    new Registration("stamper", "0.1.0", kinds.ConfigMap)
      .withFinalizer(FINALIZER)
      .permission(kinds.ConfigMap, ["get", "list", "watch", "patch", "delete"], ClusterSet.primary),
  reconcile(ctx, req, event: Event<ConfigMap>) {
    if (event.type === "cleanup") {
      return Outcome.done().with(Action.delete(refForRequest(kinds.ConfigMap, { ...req, name: `${req.name}-copy` })));
    }
    if (event.primary.data?.mode === "broken") throw ReconcileError.terminal(`configmap ${req.name} is broken`);
    if (event.primary.metadata?.labels?.[LABEL] === "true") return Outcome.done();
    ctx.info("stamping", { name: req.name });
    return Outcome.done().with(Action.mergePatch(refForRequest(kinds.ConfigMap, req), { metadata: { labels: { [LABEL]: "true" } } }));
  },
};

test("converges: finalizer first, then the label, then quiet", () => {
  const world = new World().primary("main");
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app", namespace: "default" } });
  const req = namespaced("main", "default", "app");
  const rounds = world.converge(stamper, req);
  assert.equal(rounds.length, 2);
  const cm = world.get<ConfigMap>(kinds.ConfigMap, "main", "default", "app");
  assert.equal(cm?.metadata?.labels?.[LABEL], "true");
  assert.deepEqual(cm?.metadata?.finalizers, [FINALIZER]);
  world.assertNoWrites(stamper, req);
  assert.equal(world.logs[0].message, "stamping");
});

test("cleanup deletes, finalizes and lets the object go", () => {
  const world = new World().primary("main");
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app", namespace: "default" } });
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app-copy", namespace: "default" } });
  const req = namespaced("main", "default", "app");
  world.converge(stamper, req);
  world.delete(kinds.ConfigMap, "main", "default", "app");
  const outcome = world.reconcile(stamper, req);
  assert.equal(outcome.finalized, true);
  world.apply(stamper, req, outcome);
  assert.equal(world.get(kinds.ConfigMap, "main", "default", "app"), undefined);
  assert.equal(world.get(kinds.ConfigMap, "main", "default", "app-copy"), undefined);
});

test("a write without permission is refused before anything is written", () => {
  const world = new World().primary("main");
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app", namespace: "default", finalizers: [FINALIZER] } });
  const req = namespaced("main", "default", "app");
  const outcome = Outcome.done().with(Action.create("main", kinds.Job, { metadata: { name: "j", namespace: "default" } }));
  assert.throws(() => world.apply(stamper, req, outcome), /may not create batch\/v1 Job/);
  assert.equal(world.get(kinds.Job, "main", "default", "j"), undefined);
});

test("a create named by the server gets a name from its prefix", () => {
  const generator: Plugin<ConfigMap> = {
    primary: kinds.ConfigMap,
    register: () =>
      new Registration("generator", "0.1.0", kinds.ConfigMap).permission(
        kinds.ConfigMap,
        ["get", "list", "watch", "create"],
        ClusterSet.primary,
      ),
    reconcile: () => Outcome.done(),
  };
  const world = new World().primary("main");
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app", namespace: "default" } });
  const req = namespaced("main", "default", "app");
  for (let i = 0; i < 2; i++) {
    const outcome = Outcome.done().with(
      Action.create("main", kinds.ConfigMap, { metadata: { generateName: "app-", namespace: "default" } }),
    );
    world.apply(generator, req, outcome);
  }
  const names = world
    .list<ConfigMap>(kinds.ConfigMap, "main", "default")
    .map((o) => o.metadata?.name ?? "")
    .filter((n) => n.startsWith("app-"));
  assert.equal(names.length, 2, names.join(", "));
  assert.notEqual(names[0], names[1]);
  assert.ok(names.every((n) => n.length === "app-".length + 5), names.join(", "));
});

test("reads outside the registration fail as not watched", () => {
  const world = new World().primary("main");
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "app", namespace: "default", finalizers: [FINALIZER] } });
  const nosy: Plugin<ConfigMap> = {
    ...stamper,
    reconcile(ctx) {
      ctx.list(kinds.Node, "main");
      return Outcome.done();
    },
  };
  assert.throws(() => world.reconcile(nosy, namespaced("main", "default", "app")), /not watched by this plugin/);
});

test("a terminal error is recorded as the host records it", () => {
  const v = outcomeValue("stamper", () => {
    throw ReconcileError.terminal("configmap app is broken");
  });
  assert.deepEqual(v, {
    error: { kind: "plugin_error", message: "plugin stamper failed to reconcile: configmap app is broken", retryable: false },
  });
});

test("actions in the host's case format", () => {
  const ref = refForRequest(kinds.Job, namespaced("main", "e2e", "t1"));
  assert.deepEqual(actionValue(Action.propagation(Action.delete(ref), "background")), {
    delete: {
      target: {
        cluster: "main",
        resource: { group: "batch", version: "v1", kind: "Job", plural: "jobs", scope: "Namespaced" },
        namespace: "e2e",
        name: "t1",
      },
      uid: null,
      propagation: "Background",
    },
  });
  const v = outcomeValue("p", () => Outcome.done().requeueAfter(30_000));
  assert.deepEqual(v, { ok: { actions: [], requeueAfterMs: 30000 } });
});

test("label selectors", () => {
  const labels = { a: "b", c: "d" };
  for (const [sel, want] of [
    ["a=b", true],
    ["a==b,c", true],
    ["a!=b", false],
    ["c in (x, d)", true],
    ["c notin (d)", false],
    ["!e", true],
    ["!a", false],
    ["e", false],
  ] as const) {
    assert.equal(matches(parseSelector(sel), labels), want, sel);
  }
  assert.throws(() => parseSelector("a b"), /cannot parse/);
});

// --- settings ----------------------------------------------------------------

interface StampSettings {
  label: string;
}

const stampSettings: SettingsType<StampSettings> = {
  schema: {
    type: "object",
    properties: { label: { type: "string", description: "the label to stamp" } },
    additionalProperties: false,
  },
  parse(raw) {
    if (raw === undefined) return { label: LABEL };
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new Error("settings must be an object");
    const { label, ...rest } = raw as Record<string, unknown>;
    const unknown = Object.keys(rest);
    if (unknown.length > 0) throw new Error(`unknown field ${unknown[0]}`);
    if (typeof label !== "string" || !label.includes("/")) throw new Error(`label ${JSON.stringify(label)} has no prefix`);
    return { label };
  },
};

/** The stamper with its label from the settings (read in register and reconcile). */
const configurable: Plugin<ConfigMap> = {
  primary: kinds.ConfigMap,
  register: () =>
    new Registration("stamper", "0.1.0", kinds.ConfigMap)
      .withSettings(stampSettings)
      .selector(`!${settings(stampSettings).label}`)
      .permission(kinds.ConfigMap, ["get", "list", "watch", "patch"], ClusterSet.primary),
  reconcile(ctx, req, event) {
    const { label } = ctx.settings(stampSettings);
    if (event.type !== "apply") return Outcome.done();
    return Outcome.done().with(Action.mergePatch(refForRequest(kinds.ConfigMap, req), { metadata: { labels: { [label]: "yes" } } }));
  },
};

test("settings are validated at register and read in register and reconcile", () => {
  const world = new World().primary("main").withSettings({ label: "example.com/team" });
  const reg = world.register(configurable);
  assert.equal(reg.primarySelector, "!example.com/team");
  assert.deepEqual((world.settingsSchema() as { additionalProperties: boolean }).additionalProperties, false);
  world.insert("main", { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a", namespace: "default" } });
  const outcome = world.reconcile(configurable, namespaced("main", "default", "a"));
  assert.deepEqual((outcome.actions[0] as { patch: unknown }).patch, { metadata: { labels: { "example.com/team": "yes" } } });
  for (const [given, reason] of [
    [{ label: "plain" }, 'label "plain" has no prefix'],
    [{ lable: "a/b" }, "unknown field lable"],
  ] as const) {
    assert.throws(
      () => new World().primary("main").withSettings(given).register(configurable),
      (e: Error) => e.message === `${SETTINGS_REFUSAL_PREFIX}${reason}`,
    );
  }
  // Defaults without settings.
  assert.equal(new World().primary("main").register(configurable).primarySelector, `!${LABEL}`);
});

test("a plugin without a settings type refuses settings", () => {
  assert.doesNotThrow(() => new World().primary("main").register(stamper));
  assert.throws(
    () => new World().primary("main").withSettings({ x: 1 }).register(stamper),
    /^Error: invalid settings: this plugin takes no settings/,
  );
});

test("the refusal prefix is the one wit/host.wit documents", () => {
  const wit = readFileSync(new URL("../wit/host.wit", import.meta.url), "utf8");
  assert.ok(wit.includes(`\`${SETTINGS_REFUSAL_PREFIX}\``), "host.wit names the prefix");
});

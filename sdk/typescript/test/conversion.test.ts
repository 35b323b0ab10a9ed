// The conversion side of the TypeScript SDK, natively: a Convert run as the
// host runs it (a refusal for a ConversionError, a trap for a bug), a
// lossless round trip, and the declaration built from a kind.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type Context,
  type Convert,
  type ConversionRequest,
  ConversionError,
  type KubeObject,
  conversionOf,
  conversionRequest,
  customKind,
  versionOf,
} from "../src/index.js";
import { World } from "../src/testkit/index.js";

interface OldThing extends KubeObject {
  spec: { amount: number };
}
interface Thing extends KubeObject {
  spec: { size: number };
}
const Thing = customKind<Thing>("example.dev/v1", "Thing", "things", "namespaced");

const things: Convert = {
  conversions: () => [conversionOf(Thing, "v1alpha1", "v1")],
  convert(_ctx: Context, req: ConversionRequest): KubeObject {
    const { metadata } = req.object;
    switch (`${versionOf(req.object.apiVersion ?? "")}->${versionOf(req.desiredApiVersion)}`) {
      case "v1alpha1->v1":
        return { apiVersion: req.desiredApiVersion, kind: "Thing", metadata, spec: { size: (req.object as OldThing).spec.amount } } as Thing;
      case "v1->v1alpha1":
        if (metadata?.name === "bug") throw new TypeError("a bug");
        return { apiVersion: req.desiredApiVersion, kind: "Thing", metadata, spec: { amount: (req.object as Thing).spec.size } } as OldThing;
      default:
        throw new ConversionError(`things converts between v1alpha1 and v1, not to ${req.desiredApiVersion}`);
    }
  },
};

const old: OldThing = {
  apiVersion: "example.dev/v1alpha1",
  kind: "Thing",
  metadata: { name: "t", namespace: "default", uid: "u-1", labels: { a: "b" } },
  spec: { amount: 3 },
};

test("a conversion names the CRD of its kind and every version", () => {
  assert.deepEqual(things.conversions(), [{ group: "example.dev", kind: "Thing", plural: "things", versions: ["v1alpha1", "v1"] }]);
  assert.equal(versionOf("example.dev/v1alpha1"), "v1alpha1");
});

test("convert and a round trip lose nothing", () => {
  const world = new World().primary("main");
  const out = world.convert(things, conversionRequest("example.dev/v1", old));
  assert.ok("ok" in out);
  assert.deepEqual(out.ok, { apiVersion: "example.dev/v1", kind: "Thing", metadata: old.metadata, spec: { size: 3 } });
  assert.deepEqual(world.roundTrip(things, old, "example.dev/v1"), old);
});

test("a ConversionError refuses, a bug traps", () => {
  const world = new World().primary("main");
  const refused = world.convert(things, conversionRequest("example.dev/v2", old));
  assert.deepEqual(refused, { error: "things converts between v1alpha1 and v1, not to example.dev/v2" });
  assert.throws(() => world.roundTrip(things, old, "example.dev/v2"), ConversionError);
  const bug = { ...old, apiVersion: "example.dev/v1", metadata: { name: "bug" }, spec: { size: 1 } };
  assert.throws(() => world.convert(things, conversionRequest("example.dev/v1alpha1", bug)), TypeError);
});

#!/usr/bin/env node
// rekon-build ENTRY.ts -o OUT.wasm [--wit DIR] [--engine quickjs|starlingmonkey]
//
// Bundles a plugin's entry module (which does `export const guest =
// exportPlugin(plugin)`) with esbuild into one ES module, then builds the
// WebAssembly component against the rekon WIT on one of two JavaScript
// engines, the component importing only `rekon:plugin/host`:
//
// - `quickjs` (the default): componentize-qjs, QuickJS pre-initialised with
//   Wizer, its non-async runtime (`sync`: the host does not enable the
//   component model's async ABI) and every WASI import stubbed with a trap
//   (`stubWasi`: a plugin has no I/O, clock or randomness of its own). A
//   component of about 1.5 MiB, built in about a second; a reconcile costs
//   a fraction of StarlingMonkey's (docs/plugins/typescript.md has numbers).
// - `starlingmonkey`: componentize-js, SpiderMonkey (StarlingMonkey), every
//   WASI feature disabled. About 12 MiB; a faster JIT-less interpreter for
//   long computations, but a larger image to map and reset per call.
//
// The SDK's component glue (src/component.ts) speaks both bindings'
// conventions; `__REKON_ENGINE__` tells it which one it was built for.
//
// The world is `plugin`, `admission-plugin` when the entry module also
// exports `admission` (`exportAdmission(...)`), `conversion-plugin` when it
// exports `conversion` (`exportConversion(...)`), or
// `admission-conversion-plugin` with both; with `policies`
// (`exportPolicies(...)`) too, `policies-plugin`, `admission-policies-plugin`,
// `conversion-policies-plugin` or `api-plugin`: read from esbuild's metafile, so
// a plugin without them builds exactly as before.
import { build } from "esbuild";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ENGINES = ["quickjs", "starlingmonkey"];

/** The WIT world of an entry module exporting `exported`. */
function pickWorld(exported) {
  const admission = exported.includes("admission");
  const conversion = exported.includes("conversion");
  if (exported.includes("policies")) {
    if (admission && conversion) return "api-plugin";
    if (admission) return "admission-policies-plugin";
    if (conversion) return "conversion-policies-plugin";
    return "policies-plugin";
  }
  if (admission && conversion) return "admission-conversion-plugin";
  if (admission) return "admission-plugin";
  if (conversion) return "conversion-plugin";
  return "plugin";
}
const usage = "usage: rekon-build ENTRY.ts -o OUT.wasm [--wit DIR] [--engine quickjs|starlingmonkey]";
const args = process.argv.slice(2);
// A flag's value; given twice, the last one wins (`npm run build -- -o X`
// overrides the script's own `-o`).
const flag = (name) => {
  let v;
  for (let i = args.indexOf(name); i >= 0; i = args.indexOf(name)) {
    v = args[i + 1];
    args.splice(i, 2);
  }
  return v;
};
const out = flag("-o") ?? flag("--out");
let wit = flag("--wit");
const engine = flag("--engine") ?? process.env.REKON_JS_ENGINE ?? "quickjs";
const [entry, ...rest] = args;
if (!entry || !out || rest.length > 0) {
  console.error(usage);
  process.exit(2);
}
if (!ENGINES.includes(engine)) {
  console.error(`rekon-build: unknown engine ${JSON.stringify(engine)}; ${usage}`);
  process.exit(2);
}
const sdk = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// The WIT ships with the SDK in a checkout (`wit/`, a link to the
// repository's). An installed copy of the SDK (npm drops links when it
// packs a package) has none: the project passes `--wit` (`rekon plugin new`
// writes it into the build script).
wit ??= [join(sdk, "wit")].find((d) => existsSync(join(d, "world.wit")));
if (!wit) {
  console.error(`rekon-build: no WIT found next to the SDK at ${sdk}; pass --wit DIR (the rekon repository's wit/)`);
  process.exit(2);
}
const started = Date.now();
const work = await mkdtemp(join(tmpdir(), "rekon-build-"));
try {
  const bundle = join(work, "plugin.js");
  const built = await build({
    metafile: true,
    entryPoints: [entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    outfile: bundle,
    external: ["rekon:plugin/*"],
    define: { __REKON_ENGINE__: JSON.stringify(engine) },
    logLevel: "warning",
  });
  const exported = Object.values(built.metafile.outputs).flatMap((o) => (o.entryPoint ? o.exports : []));
  if (!exported.includes("guest")) {
    console.error(`rekon-build: ${entry} exports no \`guest\` (export const guest = exportPlugin(plugin))`);
    process.exit(2);
  }
  const world = pickWorld(exported);
  let component;
  if (engine === "quickjs") {
    const { componentize } = await import("componentize-qjs");
    ({ component } = await componentize({
      witPath: resolve(wit),
      jsSource: await readFile(bundle, "utf8"),
      jsPath: bundle,
      world,
      sync: true,
      stubWasi: true,
    }));
  } else {
    const { componentize } = await import("@bytecodealliance/componentize-js");
    ({ component } = await componentize({
      sourcePath: bundle,
      witPath: resolve(wit),
      worldName: world,
      disableFeatures: ["stdio", "random", "clocks", "http", "fetch-event"],
    }));
  }
  await mkdir(dirname(resolve(out)), { recursive: true });
  await writeFile(out, component);
  console.error(
    `rekon-build: ${out} (${engine}, world ${world}, ${(component.length / 1048576).toFixed(1)} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
} finally {
  await rm(work, { recursive: true, force: true });
}

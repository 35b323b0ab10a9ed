#!/usr/bin/env node
// rekon-build ENTRY.ts -o OUT.wasm [--wit DIR]
//
// Bundles a plugin's entry module (which does `export const guest =
// exportPlugin(plugin)`) with esbuild into one ES module, then builds the
// WebAssembly component with componentize-js against the rekon WIT, every
// WASI feature disabled: the component imports only `rekon:plugin/host`.
import { build } from "esbuild";
import { componentize } from "@bytecodealliance/componentize-js";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const out = flag("-o") ?? flag("--out");
let wit = flag("--wit");
const [entry] = args;
if (!entry || !out) {
  console.error("usage: rekon-build ENTRY.ts -o OUT.wasm [--wit DIR]");
  process.exit(2);
}
const sdk = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// The WIT ships with the SDK package (`wit/`, a link to the repository's).
wit ??= [join(sdk, "wit")].find((d) => existsSync(join(d, "world.wit")));
if (!wit) {
  console.error(`rekon-build: no WIT found next to the SDK at ${sdk}; pass --wit DIR (the rekon repository's wit/)`);
  process.exit(2);
}
const started = Date.now();
const work = await mkdtemp(join(tmpdir(), "rekon-build-"));
try {
  const bundle = join(work, "plugin.js");
  await build({
    entryPoints: [entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    outfile: bundle,
    external: ["rekon:plugin/*"],
    logLevel: "warning",
  });
  const { component } = await componentize({
    sourcePath: bundle,
    witPath: resolve(wit),
    worldName: "plugin",
    disableFeatures: ["stdio", "random", "clocks", "http", "fetch-event"],
  });
  await mkdir(dirname(resolve(out)), { recursive: true });
  await writeFile(out, component);
  console.error(`rekon-build: ${out} (${(component.length / 1048576).toFixed(1)} MiB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} finally {
  await rm(work, { recursive: true, force: true });
}

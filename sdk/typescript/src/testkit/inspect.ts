/**
 * The host's load check on a built component: `rekon plugin inspect -o
 * json FILE`. The registration rules live once, in the host (`rules/`);
 * rather than a TypeScript copy that could drift, a plugin's tests run the
 * host itself on the component. `rekon` is found through `$REKON` or
 * `PATH`; without it the call fails saying so.
 */
import { spawnSync } from "node:child_process";

/** The `rekon` binary to run. */
export function rekonBinary(): string {
  return process.env.REKON ?? "rekon";
}

/** The registration the host reads from `wasm` (throws with the host's message if it refuses it). */
export function inspectComponent(wasm: string): Record<string, any> {
  const bin = rekonBinary();
  const out = spawnSync(bin, ["plugin", "inspect", "-o", "json", wasm], { encoding: "utf8" });
  if (out.error) {
    throw new Error(`failed to run ${bin} (set REKON to the rekon binary, or put it on PATH): ${out.error.message}`);
  }
  if (out.status !== 0) {
    throw new Error(`rekon plugin inspect refused ${wasm}:\n${out.stderr}${out.stdout}`);
  }
  return JSON.parse(out.stdout);
}

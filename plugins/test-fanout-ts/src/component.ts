// The component's entry: `npm run build` bundles this into plugin.wasm.
import { exportPlugin } from "@rekon/sdk/component";
import { testFanout } from "./plugin.js";

export const guest = exportPlugin(testFanout);

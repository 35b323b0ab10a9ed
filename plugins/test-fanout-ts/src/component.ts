// The component's entry: `npm run build` bundles this into plugin.wasm.
// Exporting `admission` beside `guest` makes it a component of world
// `admission-plugin`, as the Rust seed's `export_plugin!(TestFanout, admission)`.
import { exportAdmission, exportPlugin } from "@rekon/sdk/component";
import { testFanoutAdmission } from "./admission.js";
import { testFanout } from "./plugin.js";

export const guest = exportPlugin(testFanout);
export const admission = exportAdmission(testFanoutAdmission);

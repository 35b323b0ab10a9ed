// The component's entry: `npm run build` bundles this into widgets_ts.wasm.
// Exporting `admission` beside `guest` makes it a component of world
// `admission-plugin` (rekon-build picks the world from the exports).
import { exportAdmission, exportPlugin } from "@rekon/sdk/component";
import { widgets, widgetsAdmission } from "./plugin.js";

export const guest = exportPlugin(widgets);
export const admission = exportAdmission(widgetsAdmission);

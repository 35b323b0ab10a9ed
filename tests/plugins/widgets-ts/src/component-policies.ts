// The entry of the build with CEL policies (`npm run build:policies`:
// widgets_ts_policies.wasm): the widgets plugin and its webhooks, plus a
// policy the API server evaluates itself (world
// `admission-policies-plugin`, picked by rekon-build from the exports).
import { exportAdmission, exportPlugin, exportPolicies } from "@rekon/sdk/component";
import { widgets, widgetsAdmission, widgetsPolicies } from "./plugin.js";

export const guest = exportPlugin(widgets);
export const admission = exportAdmission(widgetsAdmission);
export const policies = exportPolicies(widgetsPolicies);

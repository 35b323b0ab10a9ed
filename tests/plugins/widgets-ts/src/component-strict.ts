// The entry of the stricter build (`npm run build:strict`,
// widgets_ts_strict.wasm): the widgets with sizes up to STRICT_MAX_SIZE, as
// the Rust build's feature `strict` (widgets-strict.wasm). The e2e
// admission_objects.rs runs it as a Plugin object's shadow, then promotes it.
import { exportAdmission, exportPlugin } from "@rekon/sdk/component";
import { strictWidgetsAdmission, widgets } from "./plugin.js";

export const guest = exportPlugin(widgets);
export const admission = exportAdmission(strictWidgetsAdmission);

// The entry of the build that converts (`npm run build:conversion`,
// widgets_ts_conversion.wasm): exporting `admission` and `conversion`
// beside `guest` makes it a component of world
// `admission-conversion-plugin` (rekon-build picks the world from the
// exports).
import { exportAdmission, exportConversion, exportPlugin } from "@rekon/sdk/component";
import { versionedWidgets, widgetsAdmission, widgetsConversion } from "./plugin.js";

export const guest = exportPlugin(versionedWidgets);
export const admission = exportAdmission(widgetsAdmission);
export const conversion = exportConversion(widgetsConversion);

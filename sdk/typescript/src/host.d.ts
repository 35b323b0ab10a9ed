// The host imports of `rekon:plugin/host@0.3.1` as componentize-js and
// componentize-qjs bind them (jco's representation: records as objects,
// enums as strings, variants as {tag, val}, an imported result's error
// thrown with the value in `payload`; an absent option is undefined in
// componentize-js and null in componentize-qjs, s64/u64 a bigint in
// componentize-js and a number in componentize-qjs).
declare module "rekon:plugin/host@0.3.1" {
  export interface WitResource {
    group: string;
    version: string;
    kind: string;
    plural: string;
    scope: "namespaced" | "cluster";
  }
  export function get(cluster: string, resource: WitResource, namespace: string | undefined, name: string): string | undefined | null;
  export function list(cluster: string, resource: WitResource, namespace: string | undefined, labelSelector: string | undefined): string[];
  export function clusters(): { name: string; primary: boolean; health: "ready" | "syncing" | "unreachable" }[];
  export function log(level: "debug" | "info" | "warn" | "error", message: string, fields: [string, string][]): void;
  export function requestTime(): { seconds: bigint | number; nanoseconds: number };
  export function settings(): string | undefined | null;
  export function settingsSchema(schema: string): void;
}

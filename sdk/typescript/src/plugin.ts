/**
 * The {@link Plugin} interface and {@link dispatch}, the call the host
 * makes: read the primary once, skip a request whose object is gone, pass
 * it as an `apply` or `cleanup` {@link Event}, and finalize a cleanup
 * unless the outcome keeps the finalizer (no flag to forget).
 */
import { Outcome } from "./action.js";
import type { Context } from "./context.js";
import type { Kind, KubeObject } from "./resources.js";
import type { Registration } from "./registration.js";
import type { Request, ResourceType } from "./types.js";

/** Why `reconcile` runs, with the primary object. */
export type Event<T> = { type: "apply"; primary: T } | { type: "cleanup"; primary: T };

/** A rekon plugin. Stateless: every call runs in a fresh sandbox. */
export interface Plugin<T extends KubeObject = KubeObject> {
  /** The primary kind (the one `register` names). */
  readonly primary: Kind<T>;
  /** Describe the plugin; a thrown error refuses the load. */
  register(): Registration;
  /** Decide what should change for the primary `req` names. Throw `ReconcileError` to fail. */
  reconcile(ctx: Context, req: Request, event: Event<T>): Outcome;
  /** For watches with the custom mapping: the primaries an event on `object` concerns. */
  map?(ctx: Context, cluster: string, resource: ResourceType, object: KubeObject): Request[];
}

/** One reconcile as the host asks for it. Throws what `reconcile` throws. */
export function dispatch<T extends KubeObject>(plugin: Plugin<T>, ctx: Context, req: Request): Outcome {
  const primary = ctx.getRequested(plugin.primary, req);
  if (primary === undefined) return Outcome.done();
  if (ctx.phase === "live") {
    return plugin.reconcile(ctx, req, { type: "apply", primary });
  }
  const outcome = plugin.reconcile(ctx, req, { type: "cleanup", primary });
  outcome.finalized = !outcome.keepFinalizer;
  return outcome;
}

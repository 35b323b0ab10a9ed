/**
 * widgets, in TypeScript: a plugin that admits its own objects, written as
 * an author outside the project would with @rekon/sdk. It behaves as the
 * Rust test plugin `tests/plugins/widgets` (the e2e
 * `tests/e2e/tests/admission.rs` runs the same kubectl cases against all
 * three languages):
 *
 * - **validate** (`size`): `spec.size` is at most {@link MAX_SIZE}; a larger
 *   one is denied with 422 and a field error on `spec.size`, a negative one
 *   with a plain message (403). On a create, a namespace already holding
 *   {@link MAX_PER_NAMESPACE} widgets in the host's cache refuses another.
 *   A Widget named {@link TRAP_NAME} makes `validate` throw a plain `Error`
 *   (not an `AdmissionError`): the component traps, the host answers 500.
 * - **mutate** (`tier`, creates): a Widget without {@link TIER_LABEL} gets
 *   `standard`; a size above {@link MAX_SIZE} / 2 warns.
 * - **reconcile**: `status.observedSize` follows `spec.size`.
 */
import {
  Action,
  type Admission,
  type AdmissionRequest,
  AdmissionRule,
  ClusterSet,
  type Context,
  type Event,
  type KubeObject,
  Mutation,
  Outcome,
  type Plugin,
  Registration,
  type Request,
  Verdict,
  customKind,
} from "@rekon/sdk";
import crd from "../crd.json" with { type: "json" };

/** The largest size a Widget may have. */
export const MAX_SIZE = 10;
/** The label `mutate` defaults. */
export const TIER_LABEL = "widgets.rekon.dev/tier";
/** The most widgets one namespace may hold (counted in the host's cache). */
export const MAX_PER_NAMESPACE = 3;
/** A Widget with this name makes `validate` throw (a trap). */
export const TRAP_NAME = "trap";

export interface Widget extends KubeObject {
  spec: { size: number };
  status?: { observedSize: number };
}

export const WidgetKind = customKind<Widget>("widgets.rekon.dev/v1", "Widget", "widgets", "namespaced");

export const widgets: Plugin<Widget> = {
  primary: WidgetKind,

  register() {
    return new Registration("widgets", "0.1.0", WidgetKind)
      .crd(crd)
      .permission(WidgetKind, ["get", "list", "watch", "patch"], ClusterSet.primary)
      .statusPermission(WidgetKind, ["patch"], ClusterSet.primary);
  },

  reconcile(_ctx: Context, req: Request, event: Event<Widget>) {
    if (event.type !== "apply") return Outcome.done();
    const size = event.primary.spec.size;
    if (event.primary.status?.observedSize === size) return Outcome.done();
    const applied: Widget = {
      metadata: { name: req.name, namespace: req.namespace },
      spec: { size },
      status: { observedSize: size },
    };
    return Outcome.done().with(Action.status(Action.apply(req.cluster, WidgetKind, applied)));
  },
};

/**
 * At most {@link MAX_PER_NAMESPACE} widgets per namespace, counted in the
 * host's cache. A cache that cannot be read admits with a warning: the
 * quota is a convenience, not a security boundary.
 */
function quota(ctx: Context, req: AdmissionRequest): Verdict {
  try {
    const n = ctx.list(WidgetKind, req.cluster, req.namespace).length;
    if (n >= MAX_PER_NAMESPACE) {
      return Verdict.deny(`namespace ${req.namespace ?? ""} already holds ${n} widgets, the most it may hold`);
    }
    return Verdict.allow();
  } catch (e) {
    return Verdict.allow().withWarning(`the widget quota was not checked: ${(e as Error).message}`);
  }
}

export const widgetsAdmission: Admission = {
  rules() {
    return [
      AdmissionRule.validate("size", WidgetKind).withTimeoutSeconds(5),
      AdmissionRule.mutate("tier", WidgetKind).withOperations("create"),
    ];
  },

  validate(ctx, req) {
    const widget = req.object as Widget | undefined;
    if (widget === undefined) return Verdict.allow();
    const verdict = req.operation === "create" ? quota(ctx, req) : Verdict.allow();
    if (!verdict.allowed) return verdict;
    if (widget.metadata?.name === TRAP_NAME) throw new Error("widgets: asked to trap");
    const size = widget.spec.size;
    // No field and no code: a plain refusal (403).
    if (size < 0) return Verdict.deny("a widget's size cannot be negative");
    if (size > MAX_SIZE) {
      return Verdict.deny(`a widget's size is at most ${MAX_SIZE}, not ${size}`)
        .withCode(422)
        .withField("spec.size", `must be at most ${MAX_SIZE}`);
    }
    return verdict;
  },

  mutate(_ctx, req) {
    const widget = req.object as Widget | undefined;
    if (widget === undefined) return Mutation.unchanged();
    const warn = widget.spec.size > MAX_SIZE / 2;
    const labels = (widget.metadata ??= {}).labels ?? {};
    if (labels[TIER_LABEL] !== undefined && !warn) return Mutation.unchanged();
    widget.metadata.labels = { ...labels, [TIER_LABEL]: labels[TIER_LABEL] ?? "standard" };
    const mutation = Mutation.object(widget);
    return warn ? mutation.withWarning(`a widget above size ${MAX_SIZE / 2} is large`) : mutation;
  },
};

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
 * - **convert** ({@link versionedWidgets} with {@link widgetsConversion},
 *   the entry `src/component-conversion.ts`: `widgets_ts_conversion.wasm`):
 *   the CRD gains the older version `v1alpha1`, whose `spec.amount` is
 *   v1's `spec.size` (`crd-versions.json`, the Rust build's CRD); storage
 *   stays v1; both ways without loss. A Widget named
 *   {@link CONVERT_TRAP_NAME} makes `convert` throw a plain `Error` (a
 *   trap). The default entry keeps one version, as the Python widgets do.
 */
import {
  Action,
  type Admission,
  type AdmissionRequest,
  AdmissionRule,
  Policy,
  type Policies,
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
  type Convert,
  ConversionError,
  conversionOf,
  customKind,
  versionOf,
} from "@rekon/sdk";
import crd from "../crd.json" with { type: "json" };
import crdVersions from "../crd-versions.json" with { type: "json" };

/** The largest size a Widget may have. */
export const MAX_SIZE = 10;
/** The largest size in the stricter build (`widgets_ts_strict.wasm`), as the Rust build's feature `strict`. */
export const STRICT_MAX_SIZE = 5;
/** The label `mutate` defaults. */
export const TIER_LABEL = "widgets.rekon.dev/tier";
/** The most widgets one namespace may hold (counted in the host's cache). */
export const MAX_PER_NAMESPACE = 3;
/** A Widget with this name makes `validate` throw (a trap). */
export const TRAP_NAME = "trap";
/** A Widget with this name makes `convert` throw (a trap). */
export const CONVERT_TRAP_NAME = "convert-trap";

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

/**
 * The widgets' admission with sizes up to `maxSize`: {@link widgetsAdmission}
 * (up to {@link MAX_SIZE}) and {@link strictWidgetsAdmission} (up to
 * {@link STRICT_MAX_SIZE}, the build `src/component-strict.ts` a Plugin
 * object's shadow and promotion are tested with).
 */
export function widgetsAdmissionUpTo(maxSize: number): Admission {
  return {
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
      if (size > maxSize) {
        return Verdict.deny(`a widget's size is at most ${maxSize}, not ${size}`)
          .withCode(422)
          .withField("spec.size", `must be at most ${maxSize}`);
      }
      return verdict;
    },

    mutate(_ctx, req) {
      const widget = req.object as Widget | undefined;
      if (widget === undefined) return Mutation.unchanged();
      // Integer halves, as the Rust and Python builds compute them.
      const large = Math.floor(maxSize / 2);
      const warn = widget.spec.size > large;
      const labels = (widget.metadata ??= {}).labels ?? {};
      if (labels[TIER_LABEL] !== undefined && !warn) return Mutation.unchanged();
      widget.metadata.labels = { ...labels, [TIER_LABEL]: labels[TIER_LABEL] ?? "standard" };
      const mutation = Mutation.object(widget);
      return warn ? mutation.withWarning(`a widget above size ${large} is large`) : mutation;
    },
  };
}

export const widgetsAdmission: Admission = widgetsAdmissionUpTo(MAX_SIZE);
export const strictWidgetsAdmission: Admission = widgetsAdmissionUpTo(STRICT_MAX_SIZE);

/** The Widget at v1alpha1: its size was called `amount`. */
export interface OldWidget extends KubeObject {
  spec: { amount: number };
  status?: { observedSize: number };
}

/** {@link widgets} with the CRD at two versions, v1alpha1 and v1 (storage). */
export const versionedWidgets: Plugin<Widget> = {
  ...widgets,
  register() {
    const registration = widgets.register();
    registration.crds = [crdVersions];
    return registration;
  },
};

export const widgetsConversion: Convert = {
  conversions() {
    return [conversionOf(WidgetKind, "v1alpha1", "v1")];
  },

  convert(_ctx, req) {
    const { apiVersion, metadata, status } = req.object as Widget | OldWidget;
    if (metadata?.name === CONVERT_TRAP_NAME) throw new Error("widgets: asked to trap in convert");
    const [from, to] = [versionOf(apiVersion ?? ""), versionOf(req.desiredApiVersion)];
    const head = { apiVersion: req.desiredApiVersion, kind: "Widget", metadata };
    const tail = status === undefined ? {} : { status };
    if (from === "v1alpha1" && to === "v1") {
      return { ...head, spec: { size: (req.object as OldWidget).spec.amount }, ...tail } as Widget;
    }
    if (from === "v1" && to === "v1alpha1") {
      return { ...head, spec: { amount: (req.object as Widget).spec.size }, ...tail } as OldWidget;
    }
    throw new ConversionError(`widgets converts between v1alpha1 and v1, not from ${from} to ${to}`);
  },
};

/**
 * The CEL policy of the build with policies (`component-policies.ts`): a
 * Widget's name is not `forbidden`, checked by the API server itself
 * (`rekon policies`), no webhook called.
 */
export const widgetsPolicies: Policies = {
  policies: () => [
    Policy.of("name", WidgetKind).withValidation({
      expression: "object.metadata.name != 'forbidden'",
      messageExpression: "'the name ' + object.metadata.name + ' is not allowed'",
      reason: "invalid",
    }),
  ],
};

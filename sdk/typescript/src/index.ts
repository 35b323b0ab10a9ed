/**
 * # @rekon/sdk — write rekon plugins in TypeScript
 *
 * The same shape as the Rust `rekon-sdk`: a {@link Plugin} with a typed
 * primary kind, a {@link Registration} builder, a typed {@link Context}
 * over the host's caches, {@link Action} builders in an {@link Outcome},
 * `apply`/`cleanup` events with a structural finalizer, and retryable vs
 * terminal {@link ReconcileError}s.
 *
 * | module | what |
 * |---|---|
 * | `types` | requests, resource types, cluster sets, phases, timestamps |
 * | `resources` | built-in {@link kinds} typed with `kubernetes-types`, {@link customKind} |
 * | `registration` | {@link Registration}, {@link Mapping}, {@link OwnerLabels} |
 * | `context` | {@link Context}, {@link statusChanged} |
 * | `settings` | typed plugin settings: {@link SettingsType}, {@link settings} |
 * | `action` | {@link Action} builders, {@link Outcome} |
 * | `plugin` | {@link Plugin}, {@link dispatch} |
 * | `errors` | {@link ReconcileError}, {@link ReadError} |
 * | `admission` | {@link Admission}, {@link AdmissionRule}, {@link Verdict}, {@link Mutation}, {@link AdmissionError}, {@link admissionRequest} |
 * | `conversion` | {@link Convert}, {@link Conversion}, {@link conversionOf}, {@link ConversionError}, {@link conversionRequest} |
 * | `policies` | {@link Policies}, {@link Policy}, {@link PolicyValidation}: CEL admission policies the API server evaluates |
 * | `@rekon/sdk/component` | `exportPlugin`, `exportAdmission`, `exportConversion`, `exportPolicies`: the component's `guest`, `admission`, `conversion` and `policies` exports |
 * | `@rekon/sdk/testkit` | `World` (in-memory clusters) and recorded-case replay, under node |
 */
export * from "./types.js";
export * from "./errors.js";
export * from "./resources.js";
export * from "./registration.js";
export * from "./context.js";
export * from "./action.js";
export * from "./plugin.js";
export * from "./admission.js";
export * from "./conversion.js";
export * from "./policies.js";
export { SETTINGS_REFUSAL_PREFIX, type SettingsType, settings } from "./settings.js";

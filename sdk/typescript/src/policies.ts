/**
 * CEL admission policies a plugin declares (`wit/policies.wit`): checks the
 * API server evaluates itself, with no webhook in the request path.
 * `rekon policies DIR` writes each as a ValidatingAdmissionPolicy and its
 * binding; the host compiles every expression with kube-cel when it loads
 * the plugin and refuses one whose CEL does not compile.
 *
 * Export them beside the plugin: `export const policies =
 * exportPolicies(gadgetPolicies)` (`@rekon/sdk/component`); a component
 * without that export declares none. The rules and the compile check live
 * once, in the host: a test runs them on the built component with
 * `inspectComponent` (its `policies` are what the host read).
 */
import type { FailurePolicy, MatchCondition, Operation } from "./admission.js";
import type { ResourceType } from "./types.js";

/** Why a validation refuses (its HTTP code: 401, 403, 422, 413). */
export type PolicyReason = "unauthorized" | "forbidden" | "invalid" | "request-entity-too-large";

/** One check: the request is refused when `expression` is false. */
export interface PolicyValidation {
  /** CEL over `object`, `oldObject`, `request`, `namespaceObject`. */
  expression: string;
  /** The refusal's message (else the server's `failed expression: …`). */
  message?: string;
  /** A CEL expression giving the message. */
  messageExpression?: string;
  /** The refusal's reason (`forbidden` when none). */
  reason?: PolicyReason;
}

/**
 * One policy (`<name>.<plugin>.rekon.dev`): `Policy.of("color",
 * Gadget).withValidation({ expression: "…", message: "…" })`.
 */
export class Policy {
  /** The operations it applies to (create and update unless said otherwise). */
  operations: Operation[] = ["create", "update"];
  /** What the API server does when an expression errors (`fail` unless said otherwise). */
  failurePolicy: FailurePolicy = "fail";
  /** CEL conditions narrowing the requests. */
  matchConditions: MatchCondition[] = [];
  /** The checks (at least one). */
  validations: PolicyValidation[] = [];

  private constructor(
    /** A DNS label, unique among the plugin's policies. */
    readonly name: string,
    /** The resources it applies to. */
    readonly resources: ResourceType[],
  ) {}

  /** A policy on creates and updates of `kinds`, failure policy `fail`, no check yet. */
  static of(name: string, ...kinds: ResourceType[]): Policy {
    return new Policy(
      name,
      kinds.map((r) => ({ group: r.group, version: r.version, kind: r.kind, plural: r.plural, scope: r.scope })),
    );
  }

  /** Adds a check. */
  withValidation(validation: PolicyValidation): this {
    this.validations.push({ ...validation });
    return this;
  }

  /** Applies to these operations instead of create and update. */
  withOperations(...operations: Operation[]): this {
    this.operations = [...operations];
    return this;
  }

  /** What the API server does when an expression errors. */
  withFailurePolicy(policy: FailurePolicy): this {
    this.failurePolicy = policy;
    return this;
  }

  /** Applies only to requests for which the CEL `expression` is true. */
  withMatchCondition(name: string, expression: string): this {
    this.matchConditions.push({ name, expression });
    return this;
  }
}

/** A plugin's policies. */
export interface Policies {
  /** Called once per load, after `register`. */
  policies(): Policy[];
}

/**
 * The API side of a plugin: admission webhooks the host serves (`rekon run
 * --webhook-addr`) from the same component as the reconcile side.
 *
 * An {@link Admission} declares its webhooks in `rules()` and decides in
 * `validate` (allowed, or denied with a message, code and field errors;
 * warnings either way) and `mutate` (the object as it should be stored:
 * the host diffs it into the JSON Patch, so nobody writes patch paths).
 * Export it beside the plugin: `export const admission =
 * exportAdmission(widgetsAdmission)` (`@rekon/sdk/component`); a component
 * without that export has no webhook. Calls read the host's caches through
 * the {@link Context} and never write.
 *
 * What is thrown decides how a request fails: an {@link AdmissionError}
 * denies with its code and fields; a {@link ReadError} or
 * {@link ReconcileError} denies with 400 and its message (as `?` on an
 * `Err` does in the Rust SDK); anything else (a bug: a `TypeError`...)
 * traps, so the host answers 500 and the API server applies the rule's
 * failure policy.
 *
 * The rules are checked once, by the host at load (`rekon_rules::admission`):
 * a test sees the host's verdict on them with `inspectComponent`.
 */
import type { Context } from "./context.js";
import { ReadError, ReconcileError } from "./errors.js";
import type { Kind, KubeObject } from "./resources.js";
import type { ResourceType } from "./types.js";

/** The operation a request is admitted for. */
export type Operation = "create" | "update" | "delete" | "connect";

/** What the API server does when the call fails (trap, timeout, host unreachable). */
export type FailurePolicy = "fail" | "ignore";

/** Which webhook a rule configures. */
export type AdmissionKind = "validate" | "mutate";

/** A CEL condition the API server checks before calling the webhook. */
export interface MatchCondition {
  name: string;
  expression: string;
}

/**
 * One webhook of the plugin (`<name>.<plugin>.rekon.dev` in the
 * configuration `rekon webhooks` writes). `AdmissionRule.validate("size",
 * Widget).timeoutSeconds(5)`.
 */
export class AdmissionRule {
  /** The operations admitted (create and update unless said otherwise). */
  operations: Operation[] = ["create", "update"];
  /** What the API server does when the call fails (`fail` unless said otherwise). */
  failurePolicy: FailurePolicy = "fail";
  /** The API server's timeout for one call (1 to 30 s); undefined: the host's. */
  timeoutSeconds?: number;
  /** CEL conditions narrowing which requests are sent. */
  matchConditions: MatchCondition[] = [];

  private constructor(
    /** A DNS label, unique among the plugin's rules of its kind. */
    readonly name: string,
    /** Validating or mutating. */
    readonly kind: AdmissionKind,
    /** The resources admitted (their plurals are the webhook rule's resources). */
    readonly resources: ResourceType[],
  ) {}

  /** A validating webhook for creates and updates of `kinds`, failure policy `fail`. */
  static validate(name: string, ...kinds: ResourceType[]): AdmissionRule {
    return new AdmissionRule(name, "validate", kinds.map(copyType));
  }

  /** A mutating webhook for creates and updates of `kinds`, failure policy `fail`. */
  static mutate(name: string, ...kinds: ResourceType[]): AdmissionRule {
    return new AdmissionRule(name, "mutate", kinds.map(copyType));
  }

  /** Admits these operations instead of create and update. */
  withOperations(...operations: Operation[]): this {
    this.operations = [...operations];
    return this;
  }

  /** Also admits `kind`. */
  withResource(kind: ResourceType): this {
    this.resources.push(copyType(kind));
    return this;
  }

  /** What the API server does when the call fails. */
  withFailurePolicy(policy: FailurePolicy): this {
    this.failurePolicy = policy;
    return this;
  }

  /** The API server's timeout for one call, in seconds (1 to 30). */
  withTimeoutSeconds(seconds: number): this {
    this.timeoutSeconds = seconds;
    return this;
  }

  /** Sends only the requests for which the CEL `expression` is true. */
  withMatchCondition(name: string, expression: string): this {
    this.matchConditions.push({ name, expression });
    return this;
  }
}

function copyType(r: ResourceType): ResourceType {
  return { group: r.group, version: r.version, kind: r.kind, plural: r.plural, scope: r.scope };
}

/** Who made a request. */
export interface UserInfo {
  username: string;
  uid: string;
  groups: string[];
}

/** One admission request; its objects parsed from JSON, typed as `T`. */
export interface AdmissionRequest<T extends KubeObject = KubeObject> {
  /** The request's UID. */
  uid: string;
  /** The cluster the request comes from. */
  cluster: string;
  /** The resource requested (plural and scope filled in). */
  resource: ResourceType;
  /** The subresource requested (`status`, `scale`), if any. */
  subResource?: string;
  /** What is done. */
  operation: Operation;
  /** The object's namespace. */
  namespace?: string;
  /** The object's name (empty on a create with `generateName`). */
  name: string;
  /** The object as it would be stored; undefined for a delete. */
  object?: T;
  /** The object before the change, for update and delete. */
  oldObject?: T;
  /** Who asks. */
  user: UserInfo;
  /** Nothing will be stored. */
  dryRun: boolean;
}

const TEST_USER: UserInfo = {
  username: "kubernetes-admin",
  uid: "",
  groups: ["system:masters", "system:authenticated"],
};

function requestOf<T extends KubeObject>(kind: Kind<T>, cluster: string, operation: Operation, object?: T, oldObject?: T): AdmissionRequest<T> {
  const meta = (object ?? oldObject)?.metadata;
  const json = (o: T | undefined) => (o === undefined ? undefined : (JSON.parse(JSON.stringify(o)) as T));
  return {
    uid: "00000000-0000-0000-0000-000000000000",
    cluster,
    resource: copyType(kind),
    operation,
    namespace: meta?.namespace,
    name: meta?.name ?? "",
    object: json(object),
    oldObject: json(oldObject),
    user: { ...TEST_USER, groups: [...TEST_USER.groups] },
    dryRun: false,
  };
}

/** Requests as the API server sends them, for tests (by `kubernetes-admin`). */
export const admissionRequest = {
  /** A create of `obj` in `cluster`. */
  create<T extends KubeObject>(kind: Kind<T>, cluster: string, obj: T): AdmissionRequest<T> {
    return requestOf(kind, cluster, "create", obj);
  },
  /** An update of `old` to `obj` in `cluster`. */
  update<T extends KubeObject>(kind: Kind<T>, cluster: string, old: T, obj: T): AdmissionRequest<T> {
    return requestOf(kind, cluster, "update", obj, old);
  },
  /** A delete of `obj` in `cluster` (no object, `oldObject` is the one deleted). */
  delete<T extends KubeObject>(kind: Kind<T>, cluster: string, obj: T): AdmissionRequest<T> {
    return requestOf(kind, cluster, "delete", undefined, obj);
  },
};

/** One field a denial concerns (a status cause `FieldValueInvalid`). */
export interface FieldError {
  /** The field's path (`spec.size`, `spec.taints[2].effect`). */
  path: string;
  message: string;
}

/** Why a request is refused. */
export interface Denial {
  /** What the client sees. */
  message: string;
  /** The HTTP status code (403 unless set). */
  code: number;
  /** The fields it concerns. */
  fieldErrors: FieldError[];
}

/**
 * A validating webhook's answer: `Verdict.allow()`, or
 * `Verdict.deny("...").withCode(422).withField("spec.size", "...")`;
 * warnings either way (`.withWarning`).
 */
export class Verdict {
  private constructor(
    /** Why it is refused; undefined when allowed. */
    readonly denial: Denial | undefined,
    /** Warnings for the client (`kubectl` prints `Warning: ...`). */
    readonly warnings: string[],
  ) {}

  /** Allowed. */
  static allow(): Verdict {
    return new Verdict(undefined, []);
  }

  /** Denied with `message` (code 403; see {@link withCode}). */
  static deny(message: string): Verdict {
    return new Verdict({ message, code: 403, fieldErrors: [] }, []);
  }

  /** The HTTP code of a denial (400 to 599); ignored when allowed. */
  withCode(code: number): Verdict {
    return this.denial ? new Verdict({ ...this.denial, code }, this.warnings) : this;
  }

  /** A field the denial concerns; ignored when allowed. */
  withField(path: string, message: string): Verdict {
    return this.denial
      ? new Verdict({ ...this.denial, fieldErrors: [...this.denial.fieldErrors, { path, message }] }, this.warnings)
      : this;
  }

  /** A warning for the client. */
  withWarning(warning: string): Verdict {
    return new Verdict(this.denial, [...this.warnings, warning]);
  }

  /** Whether the request is allowed. */
  get allowed(): boolean {
    return this.denial === undefined;
  }
}

/**
 * A mutating webhook's answer: `Mutation.object(changed)` (the object in
 * full, as it should be stored), `Mutation.unchanged()`, or
 * `Mutation.deny(verdict)`; warnings with `.withWarning`.
 */
export class Mutation<T extends KubeObject = KubeObject> {
  private constructor(
    /** The object to store, when changed. */
    readonly object: T | undefined,
    /** Allowed unless built with {@link Mutation.deny}; carries the warnings. */
    readonly verdict: Verdict,
  ) {}

  /** No change. */
  static unchanged<T extends KubeObject = KubeObject>(): Mutation<T> {
    return new Mutation<T>(undefined, Verdict.allow());
  }

  /** Store `obj` (in full) instead of the request's object. */
  static object<T extends KubeObject>(obj: T): Mutation<T> {
    return new Mutation(JSON.parse(JSON.stringify(obj)) as T, Verdict.allow());
  }

  /** Refused (a mutating webhook may deny too). */
  static deny<T extends KubeObject = KubeObject>(verdict: Verdict): Mutation<T> {
    return new Mutation<T>(undefined, verdict);
  }

  /** A warning for the client. */
  withWarning(warning: string): Mutation<T> {
    return new Mutation(this.object, this.verdict.withWarning(warning));
  }

  /** Whether the request is allowed. */
  get allowed(): boolean {
    return this.verdict.allowed;
  }

  /** The warnings. */
  get warnings(): string[] {
    return this.verdict.warnings;
  }
}

/**
 * Thrown from `validate` or `mutate`: denies the request with `code` (400
 * unless given) and `fields`, as a returned denial would.
 */
export class AdmissionError extends Error {
  constructor(
    message: string,
    readonly code = 400,
    readonly fields: FieldError[] = [],
  ) {
    super(message);
    this.name = "AdmissionError";
  }

  /** The denial it stands for. */
  verdict(): Verdict {
    return this.fields.reduce((v, f) => v.withField(f.path, f.message), Verdict.deny(this.message).withCode(this.code));
  }
}

/**
 * The admission side of a plugin. `validate` defaults to allowing and
 * `mutate` to changing nothing; a rule of a kind whose method is missing
 * is served by the default.
 */
export interface Admission {
  /** The plugin's webhooks; called once per load. */
  rules(): AdmissionRule[];
  /** Whether `req` may be stored. */
  validate?(ctx: Context, req: AdmissionRequest): Verdict;
  /** The object of `req` as it should be stored. */
  mutate?(ctx: Context, req: AdmissionRequest): Mutation;
}

/** The denial a thrown value stands for, or undefined when it must trap. */
function thrownVerdict(e: unknown): Verdict | undefined {
  if (e instanceof AdmissionError) return e.verdict();
  if (e instanceof ReadError || e instanceof ReconcileError) return Verdict.deny(e.message).withCode(400);
  return undefined;
}

/** `validate` as the host calls it: what is thrown denies or traps (see the module). */
export function runValidate(admission: Admission, ctx: Context, req: AdmissionRequest): Verdict {
  if (!admission.validate) return Verdict.allow();
  try {
    return admission.validate(ctx, req);
  } catch (e) {
    const v = thrownVerdict(e);
    if (v === undefined) throw e;
    return v;
  }
}

/** `mutate` as the host calls it: what is thrown denies or traps (see the module). */
export function runMutate(admission: Admission, ctx: Context, req: AdmissionRequest): Mutation {
  if (!admission.mutate) return Mutation.unchanged();
  try {
    return admission.mutate(ctx, req);
  } catch (e) {
    const v = thrownVerdict(e);
    if (v === undefined) throw e;
    return Mutation.deny(v);
  }
}

/**
 * Errors: {@link ReconcileError} is what a failed reconcile returns
 * (retryable with backoff, or terminal: counted, not retried until the
 * object changes); {@link ReadError} is why a read from the host's caches
 * failed. A `ReadError` thrown out of `reconcile` becomes a retryable
 * `ReconcileError`, like `?` in the Rust SDK.
 */

/** A failed reconcile. */
export class ReconcileError extends Error {
  readonly retryable: boolean;

  constructor(message: string, retryable: boolean) {
    super(message);
    this.name = "ReconcileError";
    this.retryable = retryable;
  }

  /** Retry with exponential backoff. */
  static retry(message: string): ReconcileError {
    return new ReconcileError(message, true);
  }

  /** Do not retry until the object changes. */
  static terminal(message: string): ReconcileError {
    return new ReconcileError(message, false);
  }

  /** The same error with `context: ` before its message. */
  context(context: string): ReconcileError {
    return new ReconcileError(`${context}: ${this.message}`, this.retryable);
  }
}

/** Why a read failed (the WIT `read-error`). */
export type ReadErrorKind = "not-watched" | "unknown-cluster" | "invalid-selector";

/** A failed read from the host's caches. */
export class ReadError extends Error {
  readonly kind: ReadErrorKind;
  readonly detail: string;

  constructor(kind: ReadErrorKind, detail: string) {
    super(
      {
        "not-watched": "failed to read: resource not watched by this plugin: ",
        "unknown-cluster": "failed to read: unknown cluster: ",
        "invalid-selector": "failed to read: invalid label selector: ",
      }[kind] + detail,
    );
    this.name = "ReadError";
    this.kind = kind;
    this.detail = detail;
  }
}

/** Any thrown value as a `ReconcileError` (read errors and others retry). */
export function toReconcileError(e: unknown): ReconcileError {
  if (e instanceof ReconcileError) return e;
  if (e instanceof Error) return ReconcileError.retry(e.message);
  return ReconcileError.retry(String(e));
}

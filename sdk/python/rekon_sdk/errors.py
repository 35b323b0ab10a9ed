"""Errors: ``ReconcileError`` (retryable or terminal) and ``ReadError``."""
from __future__ import annotations

_READ_PREFIX = {
    "not-watched": "failed to read: resource not watched by this plugin: ",
    "unknown-cluster": "failed to read: unknown cluster: ",
    "invalid-selector": "failed to read: invalid label selector: ",
}


class ReconcileError(Exception):
    """A failed reconcile: retried with backoff, or terminal (not retried until the object changes)."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    @staticmethod
    def retry(message: str) -> "ReconcileError":
        return ReconcileError(message, True)

    @staticmethod
    def terminal(message: str) -> "ReconcileError":
        return ReconcileError(message, False)

    def context(self, context: str) -> "ReconcileError":
        return ReconcileError(f"{context}: {self.message}", self.retryable)


class ReadError(Exception):
    """A failed read from the host's caches (the WIT ``read-error``)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(_READ_PREFIX[kind] + detail)
        self.kind = kind
        self.detail = detail
        self.message = _READ_PREFIX[kind] + detail


def to_reconcile_error(e: BaseException) -> ReconcileError:
    """Any exception as a ``ReconcileError`` (read errors and others retry)."""
    if isinstance(e, ReconcileError):
        return e
    if isinstance(e, ReadError):
        return ReconcileError.retry(e.message)
    return ReconcileError.retry(str(e) or type(e).__name__)

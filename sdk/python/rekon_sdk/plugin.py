"""The ``Plugin`` protocol and ``dispatch``, the call the host makes.

``dispatch`` reads the primary once, skips a request whose object is gone,
passes it as ``Apply`` or ``Cleanup``, and finalizes a cleanup unless the
outcome keeps the finalizer: there is no flag to forget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from .action import Outcome
from .context import Context
from .types import Registration, Request, ResourceType


@dataclass
class Apply:
    """The object is a live primary: bring the world in line with it."""

    primary: dict


@dataclass
class Cleanup:
    """The object is being deleted or left the primary selector: undo what it caused."""

    primary: dict


Event = Apply | Cleanup


class Plugin(Protocol):
    """A rekon plugin. Stateless: every call runs in a fresh sandbox."""

    primary: ResourceType

    def register(self) -> Registration: ...

    def reconcile(self, ctx: Context, req: Request, event: Event) -> Outcome: ...

    def map(self, ctx: Context, cluster: str, resource: ResourceType, obj: dict) -> list[Request]:
        return []


def dispatch(plugin: Plugin, ctx: Context, req: Request) -> Outcome:
    """One reconcile as the host asks for it. Raises what ``reconcile`` raises."""
    primary: Optional[dict] = ctx.get(plugin.primary, req.cluster, req.namespace, req.name)
    if primary is None:
        return Outcome.done()
    if ctx.phase == "live":
        return plugin.reconcile(ctx, req, Apply(primary))
    outcome = plugin.reconcile(ctx, req, Cleanup(primary))
    outcome.finalized = not outcome.keep_finalizer
    return outcome

"""Overruns: requests charged past their reservation, and usage no model could produce, made visible.

The charge is the truth (docs/billing.md): a provider that bills more than the reservation bounded (one
ignoring its output cap, say) is charged in full, and the balance may fall below its floor by the excess.
Each such charge is counted (`modelgate_charge_over_reservation_total` and the micro-units over), audited
(`billing.over_reservation`) and logged — a warning at most once per organization and minute, so a faulty
upstream cannot flood the log. Usage beyond the physical bound (`billing.implausible_usage`) is charged at
that bound and reported the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from modelgate.domain.audit_log import Actor, NewAuditEntry
from modelgate.domain.audit_writer import AuditWriter

log = logging.getLogger("modelgate.billing")

OVER_RESERVATION = "billing.over_reservation"
IMPLAUSIBLE_USAGE = "billing.implausible_usage"
WARN_EVERY_SECONDS = 60.0
_MAX_WARNED = 10_000  # organizations remembered for the throttle before the stale ones are dropped


@dataclass(frozen=True, slots=True)
class Overrun:
    """One request charged past its reservation, or whose reported usage was implausible."""

    organization_id: str
    key_id: str | None
    system_id: str | None
    route: str
    model: str
    request_id: str
    reserved_micros: int
    cost_micros: int  # what was charged
    over_micros: int  # charged over the reservation (0: within it)
    implausible: bool = False
    reported_cost_micros: int = 0  # the reported usage priced, when implausible (the charge is the bound)


class OverrunReport:
    """Counts, audits and logs overruns (see the module); `count(model, over_micros, implausible)` moves
    the process's metrics."""

    def __init__(
        self,
        audit: AuditWriter | None,
        count: Callable[[str, int, bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._audit = audit
        self._count = count
        self._clock = clock
        self._warned: dict[str, float] = {}  # organization -> when it was last warned about

    def report(self, overrun: Overrun) -> None:
        if self._count is not None:
            self._count(overrun.model, overrun.over_micros, overrun.implausible)
        if self._audit is not None:
            self._audit.add(_audit_entry(overrun))
        if overrun.implausible:  # rare and alarming: always logged
            log.error(
                "request %s (organization %s, model %s) reported usage priced at %d µ, beyond what the model "
                "can produce; charged the physical bound of %d µ",
                overrun.request_id,
                overrun.organization_id,
                overrun.model,
                overrun.reported_cost_micros,
                overrun.cost_micros,
                extra={"request_id": overrun.request_id},
            )
        elif self._due(overrun.organization_id):
            log.warning(
                "request %s (organization %s, model %s) was charged %d µ, %d µ over its reservation of %d µ "
                "(further overruns of this organization are not logged for a minute; they are counted and "
                "audited)",
                overrun.request_id,
                overrun.organization_id,
                overrun.model,
                overrun.cost_micros,
                overrun.over_micros,
                overrun.reserved_micros,
                extra={"request_id": overrun.request_id},
            )

    def _due(self, organization_id: str) -> bool:
        """Whether this organization's overrun is to be logged: none was within the last minute."""
        now = self._clock()
        last = self._warned.get(organization_id)
        if last is not None and now - last < WARN_EVERY_SECONDS:
            return False
        if len(self._warned) >= _MAX_WARNED:
            self._warned = {org: at for org, at in self._warned.items() if now - at < WARN_EVERY_SECONDS}
        self._warned[organization_id] = now
        return True


def _audit_entry(overrun: Overrun) -> NewAuditEntry:
    details = {
        "requestId": overrun.request_id,
        "model": overrun.model,
        "reservedMicros": overrun.reserved_micros,
        "costMicros": overrun.cost_micros,
        "overMicros": overrun.over_micros,
    }
    if overrun.implausible:
        details["reportedCostMicros"] = overrun.reported_cost_micros
    return NewAuditEntry(
        organization_id=overrun.organization_id,
        event=IMPLAUSIBLE_USAGE if overrun.implausible else OVER_RESERVATION,
        actor=Actor("api_key", overrun.key_id, None),
        at=time.time(),
        target_id=overrun.request_id,
        details=details,
        key_id=overrun.key_id,
        system_id=overrun.system_id,
        route=overrun.route,
    )

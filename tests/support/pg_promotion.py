"""A PostgreSQL primary lost mid-mix and its replica promoted, for the conservation audit (issue #37,
tests/integration/billing/test_conservation.py, setup `postgres-promotion-redis`).

The gateways name both servers in one URL with `target_session_attrs=read-write` (docs/deploy.md
"PostgreSQL failover"). The primary is stopped as in a crash, the mix runs on without one for `hold` seconds
(rows wait in the spools), the replica is promoted, and the failover ends once every live gateway has
written to the promoted server since (its spool replayed there).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.support.conservation_traffic import OutageRecord
from tests.support.gateway_fleet import GatewayFleet
from tests.support.pg_pair import PostgresPair

# How long a gateway may take to write again once the replica is promoted: the ledger's retries back off
# (0.2 s doubling) while no primary answers, so the first try after the promotion may come seconds later.
REPLAY_WAIT = 30.0


async def promote_mid_mix(fleet: GatewayFleet, pair: PostgresPair, record: OutageRecord, hold: float) -> None:
    """Stop the primary (immediate: a crash), keep serving without one for `hold` seconds, promote the replica
    and wait (bounded) until every live gateway reads it as ready and has flushed its ledger since."""
    record.served_from_shares = False  # Redis is up: admission is as without an outage
    record.failed = "PostgreSQL primary"
    await asyncio.to_thread(pair.stop_primary)
    record.stopped_at = time.monotonic()
    record.begun.set()
    # The outage's length, not a synchronisation: the mix runs on meanwhile.
    await asyncio.sleep(hold)
    await asyncio.to_thread(pair.promote)
    record.started_at = time.monotonic()
    deadline = record.started_at + REPLAY_WAIT
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            since = time.monotonic() - record.started_at
            caught_up = [await _written_since(http, fleet, generation, since) for generation in fleet.live()]
            if all(caught_up):
                record.reconciled_at = time.monotonic()
                return
            await asyncio.sleep(0.1)  # the polling period of a bounded wait
    record.problems.append(f"a gateway did not write to the promoted replica within {REPLAY_WAIT} s")


async def _written_since(http: httpx.AsyncClient, fleet: GatewayFleet, generation, seconds: float) -> bool:
    """Whether this gateway finds storage ready and flushed its ledger less than `seconds` ago."""
    try:
        reply = await http.get(f"{generation.process.base_url}/readyz")
    except httpx.TransportError:
        return False
    if reply.json().get("checks", {}).get("storage") != "ok":
        return False
    lag = (await fleet.metrics(generation)).get("modelgate_ledger_flush_lag_seconds")
    return lag is not None and lag < seconds

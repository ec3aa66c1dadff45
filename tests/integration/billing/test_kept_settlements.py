"""Settlements Redis did not take survive the death of their process: the next start on its spool directory
sends them under the dead process's id and batch numbers, so each is applied once — also one Redis applied
while its answer was lost — and releases what the dead process held (issue #37).

Real parts: the Redis counters on the machine's Redis, reached through a loopback TCP proxy the test cuts
(tests/fakes/tcp_proxy.py), the ledger writer and its spool on each storage backend. A "death" is a process
whose spool files are closed without a stop (tests/integration/billing/test_crash_settlements.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from modelgate.domain.accounts import balance_key
from modelgate.domain.counters import MoneyState, Reserve
from modelgate.storage.database import Database
from tests.fakes.tcp_proxy import TcpProxy
from tests.integration.billing.test_crash_settlements import (
    OPENING,
    RESERVED,
    SETTLED,
    Process,
    _books,
    _organization,
    redis,  # noqa: F401  (the fixture: the machine's Redis under a prefix of the test's own)
)
from tests.support.ledger_rows import admit_row

REPLY_TIMEOUT = 0.5  # the counters' wait for a Redis answer, through the proxy


@pytest.fixture
def proxy(redis_url: str) -> Iterator[TcpProxy]:
    port = int(redis_url.rpartition(":")[2].partition("/")[0])
    relay = TcpProxy(port).start()
    yield relay
    relay.stop()


@pytest.fixture
async def proxied(proxy: TcpProxy, redis: tuple[Redis, str]) -> AsyncIterator[tuple[Redis, str]]:  # noqa: F811
    """The test's Redis (same prefix) through the proxy, answers awaited REPLY_TIMEOUT."""
    client = Redis(port=proxy.port, socket_timeout=REPLY_TIMEOUT, socket_connect_timeout=REPLY_TIMEOUT)
    yield client, redis[1]
    await client.aclose()


@dataclass(slots=True)
class Scene:
    """The storage, the test's Redis (directly, and through the proxy) and the spool directory."""

    db: Database
    redis: tuple[Redis, str]
    proxied: tuple[Redis, str]
    proxy: TcpProxy
    spool: Path
    storage_url: str

    def process(self, *, through_proxy: bool = False) -> Process:
        return Process(self.db, self.proxied if through_proxy else self.redis, self.spool, self.storage_url)

    async def serving(self, reservations: int) -> tuple[str, Process]:
        """A new organization, and a started process (through the proxy) holding `reservations` of it."""
        org_id = await _organization(self.db)
        process = self.process(through_proxy=True)
        await process.start()

        async def init() -> MoneyState:
            return MoneyState(OPENING, True)

        for _ in range(reservations):
            key = balance_key(org_id)
            assert await process.counters.reserve(key, RESERVED, False, 0, init) == Reserve.OK
        return org_id, process

    def kept_files(self) -> list[str]:
        return sorted(path.name for path in self.spool.glob("kept-*.spool"))


@pytest.fixture
def scene(
    db: Database,
    redis: tuple[Redis, str],  # noqa: F811
    proxied: tuple[Redis, str],
    proxy: TcpProxy,
    tmp_path: Path,
    storage_url: str,
) -> Scene:
    return Scene(db, redis, proxied, proxy, tmp_path / "spool", storage_url)


async def test_a_batch_kept_while_redis_was_cut_off_is_applied_once_by_the_next_start(scene: Scene) -> None:
    client, prefix = scene.redis
    org_id, dead = await scene.serving(2)  # the second request is in flight when the process dies
    scene.proxy.cut()
    await dead.accounts.settle(balance_key(org_id), RESERVED, SETTLED)  # kept: Redis does not answer
    await dead.die()
    in_redis = await client.hmget(prefix + balance_key(org_id), "b", "r")
    assert in_redis == [b"%d" % OPENING, b"%d" % (2 * RESERVED)]
    assert len(scene.kept_files()) == 1

    restarted = scene.process()
    await restarted.start()
    # Settled once, and the dead process's other reservation released.
    assert await restarted.counters.money(balance_key(org_id)) == (OPENING - SETTLED, 0)
    assert scene.kept_files() == []
    assert not await client.hexists(prefix + "applied", dead.counters.process)
    again = scene.process()
    assert await again.counters.adopt_stopped() == 0
    assert await again.counters.money(balance_key(org_id)) == (OPENING - SETTLED, 0)
    await restarted.ledger.stop(5.0)
    await again.ledger.stop(5.0)


async def test_a_kept_batch_redis_applied_with_its_answer_lost_is_not_applied_again(scene: Scene) -> None:
    org_id, dead = await scene.serving(1)
    scene.proxy.swallow_replies()  # Redis applies the batch; its answer never comes: kept, and on disk
    await dead.accounts.settle(balance_key(org_id), RESERVED, SETTLED)
    await dead.die()
    assert len(scene.kept_files()) == 1

    restarted = scene.process()
    await restarted.start()
    assert await restarted.counters.money(balance_key(org_id)) == (OPENING - SETTLED, 0)
    assert scene.kept_files() == []
    await restarted.ledger.stop(5.0)


async def test_a_crashed_request_settled_in_a_kept_batch_is_charged_what_it_settled(scene: Scene) -> None:
    # Killed between keeping its settlement and spooling its row, while Redis is down at the next start
    # too: the kept batch, not Redis, says what the request was settled, and Redis gets it once it answers.
    org_id, dead = await scene.serving(1)
    row_id = admit_row(dead.ledger, org_id, "req_kept", 300, key_id="key_crash")
    scene.proxy.cut()
    await dead.accounts.settle_all([(balance_key(org_id), RESERVED)], SETTLED, row_id)
    await dead.die()

    restarted = scene.process(through_proxy=True)
    assert await restarted.start() == 1  # Redis still cut off
    scene.proxy.restore()
    await restarted.counters.retry_settlements()
    rows, stored, live = await _books(scene.db, restarted, org_id)
    assert rows == [("crashed", SETTLED)]
    assert stored == live == OPENING - SETTLED
    assert await restarted.counters.money(balance_key(org_id)) == (OPENING - SETTLED, 0)
    await restarted.ledger.stop(5.0)


async def test_a_dead_process_keeps_its_batch_numbers_while_another_start_holds_its_kept_batches(
    scene: Scene,
) -> None:
    # Two gateways start on the spool directory at once: one adopts the kept batches (Redis unreachable
    # from it), the other replays the ledger and releases the dead writer; the numbers must stay, or the
    # batch Redis applied unanswered would be applied again.
    client, prefix = scene.redis
    org_id, dead = await scene.serving(1)
    scene.proxy.swallow_replies()
    await dead.accounts.settle(balance_key(org_id), RESERVED, SETTLED)
    await dead.die()
    scene.proxy.cut()
    holder = scene.process(through_proxy=True)
    assert await holder.counters.adopt_stopped() == 1
    other = scene.process()
    await other.counters.reclaim(dead.counters.process)  # as its ledger's replay does
    assert await client.hexists(prefix + "applied", dead.counters.process)

    scene.proxy.restore()
    await holder.counters.retry_settlements()
    assert await holder.counters.money(balance_key(org_id)) == (OPENING - SETTLED, 0)
    assert not await client.hexists(prefix + "applied", dead.counters.process)
    assert scene.kept_files() == []

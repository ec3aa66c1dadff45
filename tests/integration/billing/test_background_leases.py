"""Who follows a background response, and who charges it: on SQLite and PostgreSQL, processes racing for
the same follow (each with its own connection, as separate processes have) adopt it and claim its charge
exactly once between them (modelgate/domain/background_responses.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from modelgate.domain.background_responses import BackgroundFollow, BackgroundResponses
from modelgate.storage import apply_migrations, open_database


def follow(response_id: str = "resp_race") -> BackgroundFollow:
    return BackgroundFollow(
        response_id,
        "led_0",
        "org_1",
        "key_1",
        None,
        "gpt",
        "p@h/gpt",
        "req_1",
        (("rule", 1.0),),
        250,
        100,
        1.0,
        2_000,
        1_000,
    )


async def test_an_expired_follow_is_adopted_by_exactly_one_of_racing_processes(storage_url: str) -> None:
    databases = [await open_database(storage_url) for _ in range(4)]
    try:
        await apply_migrations(databases[0])
        dead = BackgroundResponses(databases[0], "dead-process")
        assert await dead.add(follow(), lease_until=time.time() - 1)  # its lease ran out
        # One follow per response: another request given the same response id is not recorded.
        assert not await dead.add(replace(follow(), row_id="led_1"), lease_until=time.time())
        racers = [BackgroundResponses(db, f"racer-{n}") for n, db in enumerate(databases[1:])]
        now = time.time()
        # Every racer sees the expired follow before any takes it: the worst interleaving, made certain.
        seen = await asyncio.gather(*(racer.expired(now) for racer in racers))
        assert [len(found) for found in seen] == [1, 1, 1]
        taken = await asyncio.gather(
            *(racer.take(*found[0], now + 30) for racer, found in zip(racers, seen, strict=True))
        )
        assert sorted(taken) == [False, False, True]
        winner = racers[taken.index(True)]
        adopted = seen[taken.index(True)][0][0]
        assert (adopted.response_id, adopted.budgets, adopted.crash_cost, adopted.adopted) == (
            "resp_race",
            (("rule", 1.0),),
            250,
            True,
        )
        # What the charge's rule needs travels with it (migration 0019): the reservation and the bound.
        assert (adopted.reserved_micros, adopted.most_output_tokens) == (2_000, 1_000)
        # A live lease is not adopted again; renewing keeps it.
        await winner.renew(time.time() + 30)
        later = await asyncio.gather(*(racer.adopt(time.time(), time.time() + 30) for racer in racers))
        assert later == [[], [], []]
    finally:
        for db in databases:
            await db.close()


async def test_the_charge_is_claimed_once_and_a_handed_over_follow_is_adoptable_at_once(
    storage_url: str,
) -> None:
    databases = [await open_database(storage_url) for _ in range(3)]
    try:
        await apply_migrations(databases[0])
        owner = BackgroundResponses(databases[0], "owner")
        assert await owner.add(follow("resp_a"), lease_until=time.time() + 3600)
        assert await owner.add(follow("resp_b"), lease_until=time.time() + 3600)
        claims = [BackgroundResponses(db, f"p{n}") for n, db in enumerate(databases)]
        won = await asyncio.gather(*(repository.claim_charge("resp_a", time.time()) for repository in claims))
        assert sorted(won) == [False, False, True]
        assert await claims[1].adopt(time.time(), time.time() + 30) == []  # leases still run
        await owner.hand_over("resp_b")
        (adopted,) = await claims[2].adopt(time.time(), time.time() + 30)
        assert adopted.response_id == "resp_b"  # resp_a is charged: never adopted
    finally:
        for db in databases:
            await db.close()


async def test_a_follow_recorded_again_after_its_answer_was_lost_finds_its_own_record(
    storage_url: str,
) -> None:
    """A database failing over may lose the answer to a committed INSERT: the follower's retry is this same
    follow (its request's row id, its process) and is recorded, so its charge can be claimed."""
    db = await open_database(storage_url)
    try:
        await apply_migrations(db)
        process = BackgroundResponses(db, "process")
        assert await process.add(follow("resp_lost"), lease_until=time.time() + 30)
        assert await process.add(follow("resp_lost"), lease_until=time.time() + 30)
        assert not await BackgroundResponses(db, "other").add(follow("resp_lost"), time.time() + 30)
        assert await process.claim_charge("resp_lost", time.time())
    finally:
        await db.close()

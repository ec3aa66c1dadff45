"""Acknowledged notifications on PostgreSQL (modelgate/storage/postgres.py): a sender waits until every live
listener acted on its notification; one that is connected but silent is waited for only so long, and one
that went away is not waited for at all. What exact revocation without Redis rests on (issue 33)."""

from __future__ import annotations

import asyncio

import pytest

from modelgate.storage import open_database, postgres


async def test_the_sender_waits_for_every_listener_to_act(fresh_pg_url: str) -> None:
    sender, other = await open_database(fresh_pg_url), await open_database(fresh_pg_url)
    acted: list[str] = []
    release = asyncio.Event()

    async def slow_act(payload: str) -> None:  # a busy process: it acts (and acknowledges) when it can
        await release.wait()
        acted.append(payload)
        await other.acknowledge(payload)

    try:
        await sender.listen("test_channel", lambda payload: sender.acknowledge(payload))
        await other.listen("test_channel", slow_act)
        sender.expect_acknowledgements("tok1")
        await sender.notify("test_channel", "tok1")
        waiting = asyncio.ensure_future(sender.acknowledged_by_every_listener("tok1"))
        done, _ = await asyncio.wait((waiting,), timeout=0.3)
        assert not done  # the other listener has not acted yet

        release.set()
        assert await waiting is True
        assert acted == ["tok1"]
    finally:
        await sender.close()
        await other.close()


async def test_a_silent_listener_is_waited_for_only_so_long(
    fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "ACK_TIMEOUT_SECONDS", 0.5)
    sender, silent = await open_database(fresh_pg_url), await open_database(fresh_pg_url)
    try:
        await sender.listen("test_channel", lambda payload: sender.acknowledge(payload))
        await silent.listen("test_channel", lambda payload: None)
        sender.expect_acknowledgements("tok2")
        await sender.notify("test_channel", "tok2")

        assert await sender.acknowledged_by_every_listener("tok2") is False
    finally:
        await sender.close()
        await silent.close()


async def test_a_listener_that_went_away_is_not_waited_for(fresh_pg_url: str) -> None:
    sender, gone = await open_database(fresh_pg_url), await open_database(fresh_pg_url)
    try:
        await sender.listen("test_channel", lambda payload: sender.acknowledge(payload))
        await gone.listen("test_channel", lambda payload: None)
        await gone.close()
        sender.expect_acknowledgements("tok3")
        await sender.notify("test_channel", "tok3")

        assert await asyncio.wait_for(sender.acknowledged_by_every_listener("tok3"), 3) is True
    finally:
        await sender.close()

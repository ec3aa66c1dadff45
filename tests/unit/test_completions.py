"""Completions.run_eagerly: a completion phase runs in its handler until it really waits, and only then in a
task of its own that a handler's cancellation cannot cut short."""

from __future__ import annotations

import asyncio

import pytest

from modelgate.proxy.pipeline.model_api import Completions


async def test_a_phase_that_never_waits_ends_in_the_caller_without_a_task() -> None:
    completions = Completions()
    steps: list[str] = []

    async def settle() -> None:  # awaited, but it never suspends (it only queues work)
        steps.append("settled")

    async def phase() -> None:
        await settle()
        steps.append("row written")

    before = len(asyncio.all_tasks())
    assert completions.run_eagerly(phase()) is None
    assert steps == ["settled", "row written"]
    assert len(asyncio.all_tasks()) == before


async def test_a_phase_that_waits_goes_on_in_a_task_with_what_it_waited_for() -> None:
    completions = Completions()
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    seen: list[object] = []

    async def phase() -> None:
        seen.append("before")
        seen.append(await first)
        try:
            await second
        except ValueError as error:
            seen.append(f"raised {error}")
        await asyncio.sleep(0)  # a bare yield
        seen.append("end")

    task = completions.run_eagerly(phase())
    assert task is not None
    assert seen == ["before"]  # ran in the caller up to its first wait
    first.set_result("first result")
    second.set_exception(ValueError("boom"))
    await asyncio.wait_for(task, 5)
    assert seen == ["before", "first result", "raised boom", "end"]


async def test_cancelling_the_handler_does_not_cut_the_phase_short() -> None:
    completions = Completions()
    loop = asyncio.get_running_loop()
    redis_answer = loop.create_future()
    done: list[str] = []

    async def phase() -> None:
        await redis_answer
        done.append("settlement recorded")

    async def handler() -> None:
        rest = completions.run_eagerly(phase())
        assert rest is not None
        await asyncio.shield(rest)

    handling = loop.create_task(handler())
    await asyncio.sleep(0)
    handling.cancel()  # the client left while the phase waited
    with pytest.raises(asyncio.CancelledError):
        await handling
    redis_answer.set_result(None)
    await asyncio.wait_for(completions.drain(5), 5)
    assert done == ["settlement recorded"]


async def test_cancelling_the_carrying_task_reaches_the_phase_where_it_waits() -> None:
    completions = Completions()
    loop = asyncio.get_running_loop()
    never = loop.create_future()
    cleaned: list[str] = []

    async def phase() -> None:
        try:
            await never
        finally:
            cleaned.append("finally ran")

    task = completions.run_eagerly(phase())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally ran"]
    assert never.cancelled()

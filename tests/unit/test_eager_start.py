"""A request's task takes its first step at once, in the callback that read the request, as that task (its
context, `asyncio.current_task`), and carries on from there as any task would: results, errors, timeouts and
a cancellation before its first pass all behave as with a task created the usual way."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from modelgate.proxy.http.eager_start import start_eagerly

_SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


def _kept(into: list[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    return into.append


def _from_a_callback(
    coroutine: Coroutine[Any, Any, None], adopted: list[asyncio.Task[None]]
) -> asyncio.Future[asyncio.Task[None]]:
    """Start `coroutine` eagerly from a plain loop callback (outside any task), as the front does."""
    loop = asyncio.get_running_loop()
    started: asyncio.Future[asyncio.Task[None]] = loop.create_future()
    loop.call_soon(lambda: started.set_result(start_eagerly(loop, coroutine, _kept(adopted))))
    return started


async def test_the_first_step_runs_at_once_as_the_task_and_the_task_carries_it_on() -> None:
    steps: list[str] = []
    adopted: list[asyncio.Task[None]] = []
    gate = asyncio.get_running_loop().create_future()

    async def request() -> None:
        steps.append("first step")
        assert asyncio.current_task() is adopted[0]  # adopted before the step, and current during it
        _SEEN.set("set in the first step")
        await gate
        steps.append(f"after the wait: {_SEEN.get()}")

    task = await _from_a_callback(request(), adopted)
    assert steps == ["first step"]  # taken before start_eagerly returned
    assert adopted == [task]
    assert _SEEN.get() == "unset"  # the task's own context, not the caller's
    gate.set_result(None)
    await task
    assert steps == ["first step", "after the wait: set in the first step"]


async def test_a_request_that_ends_in_its_first_step_ends_its_task_with_its_result_or_error() -> None:
    async def answers_at_once() -> None:
        return None

    async def fails_at_once() -> None:
        raise ValueError("refused")

    done = await _from_a_callback(answers_at_once(), [])
    assert await done is None
    failed = await _from_a_callback(fails_at_once(), [])
    with pytest.raises(ValueError, match="refused"):
        await failed


async def test_a_cancellation_before_the_first_pass_meets_the_request_where_it_waits() -> None:
    cleaned: list[str] = []

    async def request() -> None:
        try:
            await asyncio.get_running_loop().create_future()  # never done
        finally:
            cleaned.append("released what it held")

    task = await _from_a_callback(request(), [])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["released what it held"]


async def test_a_timeout_begun_in_the_first_step_cancels_the_task_in_time() -> None:
    async def request() -> None:
        async with asyncio.timeout(0.01):  # needs a current task
            await asyncio.get_running_loop().create_future()

    task = await _from_a_callback(request(), [])
    with pytest.raises(TimeoutError):
        await task


async def test_inside_a_running_task_the_request_gets_an_ordinary_task() -> None:
    steps: list[str] = []

    async def request() -> None:
        steps.append("ran")

    task = start_eagerly(asyncio.get_running_loop(), request(), _kept([]))
    assert steps == []  # not stepped inside the caller's task
    await task
    assert steps == ["ran"]

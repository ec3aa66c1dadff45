"""The runtime a config reload replaces: its upstream clients close only after its last request."""

from __future__ import annotations

import asyncio

from modelgate.config import Config
from modelgate.plugins import PluginChain
from modelgate.proxy.upstream.model_rows import ModelCatalog
from modelgate.runtime import ModelRuntime


class RecordingUpstream:
    """An upstream client that only remembers being closed."""

    name = kind = host = "recording"
    native_messages = False
    native_responses = True

    def __init__(self) -> None:
        self.closed = False

    async def send(self, *args: object) -> None:
        raise AssertionError("not called in this test")

    async def close(self) -> None:
        self.closed = True


def _runtime(upstream: RecordingUpstream) -> ModelRuntime:
    config = Config()
    return ModelRuntime(config, {upstream.name: upstream}, ModelCatalog(config, {}), PluginChain([]))


async def _yield_to_the_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_retired_runtime_closes_its_clients_only_after_its_last_request() -> None:
    upstream = RecordingUpstream()
    runtime = _runtime(upstream)
    runtime.enter()
    runtime.enter()

    retiring = asyncio.create_task(runtime.retire())
    await _yield_to_the_loop()
    runtime.leave()
    await _yield_to_the_loop()
    assert not upstream.closed and not retiring.done()

    runtime.leave()
    await asyncio.wait_for(retiring, timeout=5)
    assert upstream.closed


async def test_an_idle_retired_runtime_closes_its_clients_at_once() -> None:
    upstream = RecordingUpstream()
    await asyncio.wait_for(_runtime(upstream).retire(), timeout=5)
    assert upstream.closed


async def test_a_retiring_runtime_cancelled_at_shutdown_still_closes_its_clients() -> None:
    upstream = RecordingUpstream()
    runtime = _runtime(upstream)
    runtime.enter()
    retiring = asyncio.create_task(runtime.retire())
    await _yield_to_the_loop()

    retiring.cancel()
    await asyncio.gather(retiring, return_exceptions=True)
    assert upstream.closed

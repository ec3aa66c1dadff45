"""Redis as the shared state of several gateway processes: the counters' client and a pub/sub bus that
carries key revocations, credits and policy changes to every process.

On a Redis Cluster a message published on any node reaches every node, so the bus subscribes on one node;
when that node is lost it subscribes again on the next one the client knows (a replica will do).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster

from modelgate.config.schema import RedisConfig
from modelgate.infra.redis_client import redis_client, redis_error

log = logging.getLogger("modelgate.redis")

Handler = Callable[[str], Awaitable[None] | None]


class RedisBus:
    """Publish to and listen on Redis channels; one subscriber connection per process."""

    def __init__(self, config: RedisConfig) -> None:
        self.client = redis_client(config)
        self._handlers: dict[str, list[Handler]] = {}
        self._pubsub = None
        self._task: asyncio.Task | None = None

    async def ping(self) -> None:
        await self.client.ping()

    def on(self, channel: str, handler: Handler) -> None:
        self._handlers.setdefault(channel, []).append(handler)

    async def start(self) -> None:
        """Subscribe to every channel a handler was registered for."""
        if not self._handlers:
            return
        self._pubsub = self._subscriber(0)
        self._task = asyncio.get_running_loop().create_task(self._listen(), name="redis-bus")

    def _subscriber(self, attempt: int) -> PubSub:
        """A pub/sub connection: on a cluster, to its nodes in turn, one more with each `attempt`."""
        client = self.client
        if isinstance(client, RedisCluster) and (nodes := client.get_nodes()):
            return client.pubsub(node=nodes[attempt % len(nodes)], ignore_subscribe_messages=True)
        return client.pubsub(ignore_subscribe_messages=True)

    async def _lost(self, attempt: int) -> PubSub:
        """A new pub/sub connection to a cluster's node (after its node was lost: the next one)."""
        pubsub = self._pubsub
        assert pubsub is not None
        if not isinstance(self.client, RedisCluster):
            return pubsub
        await pubsub.aclose()
        self._pubsub = self._subscriber(attempt)
        return self._pubsub

    async def _listen(self) -> None:
        pubsub = self._pubsub
        if pubsub is None:  # never: start() made it before this task
            return
        subscribed = False
        attempt = 0
        while True:
            if not subscribed:
                try:
                    if isinstance(self.client, RedisCluster):  # its map, then a node of it to listen on
                        await self.client.initialize()
                        pubsub = await self._lost(attempt)
                    await pubsub.subscribe(*self._handlers)
                    subscribed = True
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # Redis down: retry, loudly
                    log.error("redis bus: cannot subscribe (%s); retrying in 1 s", redis_error(exc))
                    await asyncio.sleep(1)
                    attempt += 1
                    continue
            try:
                message = await pubsub.get_message(timeout=5.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the connection was lost (Redis down, a failover): expected, no trace
                log.error("redis bus: receive failed (%s); retrying in 1 s", redis_error(exc))
                await asyncio.sleep(1)
                if isinstance(self.client, RedisCluster):
                    attempt += 1
                    subscribed = False
                continue
            if message is None:
                continue
            channel = (
                message["channel"].decode() if isinstance(message["channel"], bytes) else message["channel"]
            )
            data = message["data"].decode() if isinstance(message["data"], bytes) else str(message["data"])
            for handler in self._handlers.get(channel, ()):
                try:
                    result = handler(data)
                    if result is not None:
                        await result
                except Exception:
                    log.exception("redis bus: handler for %s failed", channel)

    async def publish(self, channel: str, payload: str) -> None:
        await self.client.publish(channel, payload)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._pubsub is not None:
            await self._pubsub.aclose()
        await self.client.aclose()

"""The Redis client of a `[redis]` section: one server by its URL, a Redis Sentinel service's master, or a
Redis Cluster (redis-py's RedisCluster: commands routed by slot, MOVED/ASK and failovers followed)."""

from __future__ import annotations

import re

import redis.asyncio as redis_asyncio
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from modelgate.config.loader import sentinel_address
from modelgate.config.schema import RedisConfig

_CONNECT_SECONDS = 2.0
_REPLY_SECONDS = 5.0


def redis_client(
    config: RedisConfig, *, health_check_interval: int = 30
) -> redis_asyncio.Redis | RedisCluster:
    """A client of the Redis `config` names: its URL, or the master its sentinels name (each connection
    made after a failover asks them again; a demoted master's READONLY answer drops the connection)."""
    if config.cluster_nodes:
        return cluster_client(config, health_check_interval=health_check_interval)
    if not config.sentinels:
        assert config.url is not None  # RedisConfig.enabled
        return redis_asyncio.Redis.from_url(
            config.url,
            health_check_interval=health_check_interval,
            socket_connect_timeout=_CONNECT_SECONDS,
            socket_timeout=_REPLY_SECONDS,
        )
    options = parse_url(config.url) if config.url else {}
    sentinels = Sentinel(
        [sentinel_address(address) for address in config.sentinels],
        # The connections to the sentinels themselves: their own password, if they ask for one.
        sentinel_kwargs={
            "socket_connect_timeout": _CONNECT_SECONDS,
            "socket_timeout": _REPLY_SECONDS,
            "password": config.sentinel_password,
        },
        socket_connect_timeout=_CONNECT_SECONDS,
        socket_timeout=_REPLY_SECONDS,
    )
    assert config.sentinel_master is not None  # the loader asks for both
    return sentinels.master_for(
        config.sentinel_master,
        health_check_interval=health_check_interval,
        socket_connect_timeout=_CONNECT_SECONDS,
        socket_timeout=_REPLY_SECONDS,
        username=options.get("username"),
        password=options.get("password"),
        db=options.get("db", 0),
    )


class _Cluster(RedisCluster):
    """redis-py's cluster client, failing as a single Redis does when no node answers. Its map cannot be read
    then (every node down or unreachable), and it raises RedisClusterException, which is no RedisError: every
    caller that handles an unreachable Redis (503, degraded mode, kept settlements, the counters' keeper)
    would miss it. Here it is a ConnectionError."""

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> RedisCluster:
        try:
            return await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        except RedisClusterException as exc:
            raise RedisConnectionError(f"the Redis Cluster cannot be read: {exc}") from exc


def cluster_client(config: RedisConfig, *, health_check_interval: int = 30) -> RedisCluster:
    """A client of the Redis Cluster whose nodes `config.cluster_nodes` names (it learns the others)."""
    options = parse_url(config.url) if config.url else {}
    return _Cluster(
        startup_nodes=[ClusterNode(*sentinel_address(address)) for address in config.cluster_nodes],
        health_check_interval=health_check_interval,
        socket_connect_timeout=_CONNECT_SECONDS,
        socket_timeout=_REPLY_SECONDS,
        username=options.get("username"),
        password=options.get("password"),
    )


# A client's repr inside redis-py's words (a sentinel that failed): 300 characters of settings around its
# host and port, which are all a reader needs.
_CLIENT = re.compile(r"<redis\.[\w.]+\(<.*?host=([^,]+),port=(\d+),.*?\)>\)>\)>")


def redis_error(exc: BaseException | None) -> str:
    """An exception of the Redis client for a log line: its kind and its words. (redis-py's own repr gives the
    kind alone, "network:MasterNotFoundError", hiding why: a refused connection, a sentinel asking for a
    password.) Its words name hosts and ports, never a password (a client's settings show it redacted)."""
    if exc is None:  # not asked again: it failed a moment ago
        return "unreachable a moment ago"
    text = _CLIENT.sub(r"\1:\2", str(exc).strip().replace("\n", " "))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

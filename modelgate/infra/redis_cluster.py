"""The counters' lean connection (`redis_wire`) to a Redis Cluster: one pipelined `RedisWire` per master,
a call routed by the CRC16 slot of its first key (every key of one counters' script carries the same hash
tag, so one slot; `redis_scripts`).

The slot map comes from CLUSTER SLOTS, asked of any node known. A MOVED answer (slots moved to another
node, a replica promoted) sends the call there and refreshes the map; an ASK answer (a slot being moved)
sends it once to the node named, after ASKING on the same connection. A NOSCRIPT answer loads the script
on that node (`RedisWire.script`). A node that cannot be reached refreshes the map: once the cluster has
promoted a replica of it, the map names that one and the call is sent there; until then the call fails
with `ConnectionError`, as a single Redis that is down would.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from modelgate.infra.redis_wire import Memo, RedisWire, Script

SLOTS = 16384
_REDIRECTS = 5  # MOVED/ASK/failover hops of one call (a bound: a stable cluster needs at most 2)
_REFRESH_SECONDS = 0.2  # at most one slot map refresh in this long after a lost node (no storm under load)
_SLOTS_KEPT = 8192  # the slots of key names kept (`_slot_of`)

Address = tuple[str, int]


def _slot(name: str | bytes) -> int:
    return key_slot(name.encode() if isinstance(name, str) else name)


def _redirect(text: str) -> Address:
    """The node of a MOVED or ASK answer: `MOVED 3999 127.0.0.1:6381`."""
    host, _, port = text.split(" ")[2].rpartition(":")
    return host, int(port)


class ClusterWire:
    """Pipelined script calls to the masters of a Redis Cluster, routed by slot (module docstring)."""

    def __init__(
        self,
        nodes: list[Address],
        *,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._known: list[Address] = list(dict.fromkeys(nodes))
        self._username = username
        self._password = password
        self._timeout = timeout
        self._wires: dict[Address, RedisWire] = {}
        self._slots: list[Address | None] = [None] * SLOTS
        self._refreshing: asyncio.Task | None = None
        self._refreshed_at = 0.0
        self._slot_of = Memo(_slot, _SLOTS_KEPT)
        self.refreshes = 0  # slot map refreshes made (observability, tests)

    def _node(self, address: Address) -> RedisWire:
        wire = self._wires.get(address)
        if wire is None:
            wire = self._wires[address] = RedisWire(
                *address, username=self._username, password=self._password, timeout=self._timeout
            )
        return wire

    def node_of(self, key: str) -> Address | None:
        """The master the slot map names for `key` (None before the first call: the map is not read yet)."""
        return self._slots[self._slot_of[key]]

    async def script(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """Run `script` on the master of its keys' slot (EVALSHA; the source once where it is unknown)."""
        slot = self._slot_of[keys[0]]
        address = self._slots[slot]
        if address is None:
            await self.refresh()
            address = self._master_of(slot)
        asking = False
        for _ in range(_REDIRECTS):
            wire = self._node(address)
            try:
                if asking:
                    return await wire.script_asking(script, keys, args)
                return await wire.script(script, keys, args)
            except ResponseError as exc:
                text = str(exc)
                if text.startswith("MOVED "):
                    address, asking = _redirect(text), False
                    self._slots[slot] = address  # at once for this slot; the rest with the refresh
                    self._refresh_soon()
                elif text.startswith("ASK "):
                    address, asking = _redirect(text), True
                elif text.startswith(("TRYAGAIN", "CLUSTERDOWN")):
                    raise RedisConnectionError(
                        f"the Redis Cluster cannot serve slot {slot} now: {text}"
                    ) from exc
                else:
                    raise
            except RedisConnectionError:
                if not await self._refresh_after_loss():
                    raise
                moved = self._master_of(slot)
                if moved == address:
                    raise  # not failed over (yet): Redis is unreachable for this call
                address, asking = moved, False
        raise RedisConnectionError(f"slot {slot} of the Redis Cluster moved more than {_REDIRECTS} times")

    def _master_of(self, slot: int) -> Address:
        address = self._slots[slot]
        if address is None:
            raise RedisConnectionError(f"no master of the Redis Cluster serves slot {slot}")
        return address

    def _refresh_soon(self) -> None:
        if self._refreshing is None:
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh(), name="cluster-slots")
            self._refreshing.add_done_callback(lambda task: task.cancelled() or task.exception())

    async def _refresh_after_loss(self) -> bool:
        """Read the slot map again after a node was lost (at most once per `_REFRESH_SECONDS`, shared by
        the calls that lost it together); False when no node could answer."""
        if self._refreshing is None and time.monotonic() - self._refreshed_at < _REFRESH_SECONDS:
            return True
        try:
            await self.refresh()
        except RedisConnectionError:
            return False
        return True

    async def refresh(self) -> None:
        """Read the slot map from the first node known that answers (one read for concurrent callers)."""
        self._refresh_soon()
        refreshing = self._refreshing
        assert refreshing is not None
        await asyncio.shield(refreshing)

    async def _refresh(self) -> None:
        try:
            failures: list[str] = []
            for address in list(self._known):
                try:
                    reply = await self._node(address).call(b"CLUSTER", b"SLOTS")
                except (RedisConnectionError, ResponseError) as exc:
                    failures.append(f"{address[0]}:{address[1]}: {exc}")
                    continue
                self._read_map(reply, address)
                return
            raise RedisConnectionError("no node of the Redis Cluster answers: " + "; ".join(failures))
        finally:
            self._refreshing = None
            self._refreshed_at = time.monotonic()

    def _read_map(self, reply: list, asked: Address) -> None:
        slots: list[Address | None] = [None] * SLOTS
        nodes: list[Address] = []
        for start, end, master, *replicas in reply:
            for node in (master, *replicas):
                host = node[0].decode() if node[0] else asked[0]  # an empty host: the one asked
                address = (host, int(node[1]))
                if address not in nodes:
                    nodes.append(address)
                if node is master:
                    slots[start : end + 1] = [address] * (end + 1 - start)
        self._slots = slots
        self.refreshes += 1
        # Ask the nodes the cluster names first, then the configured ones (a node may have been replaced).
        self._known = list(dict.fromkeys([*nodes, *self._known]))
        for address in [a for a in self._wires if a not in nodes]:
            self._wires.pop(address).close()

    def close(self) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
        for wire in self._wires.values():
            wire.close()
        self._wires.clear()

"""The host channel file: what one mapping publishes, every other mapping of the same file hears once, in
order; what it cannot hand over (a ring overrun, a message too long for a slot) makes readers drop every
cache instead of missing it silently."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgate.proxy.state.host_channel import HostChannel, channel_path


@pytest.fixture
def url(tmp_path: Path) -> str:
    (tmp_path / "gateway.db").write_bytes(b"")
    return f"sqlite:///{tmp_path / 'gateway.db'}"


@pytest.fixture
def pair(url: str) -> Iterator[tuple[HostChannel, HostChannel]]:
    """Two mappings of one file, as two processes would hold them."""
    first, second = HostChannel.open(url), HostChannel.open(url)
    assert first is not None and second is not None
    yield first, second
    first.close()
    second.close()


class Heard:
    def __init__(self, channel: HostChannel) -> None:
        self.messages: list[tuple[str, str]] = []
        self.missed = 0
        for name in ("revoked", "plan"):
            channel.on(name, lambda payload, name=name: self.messages.append((name, payload)))
        channel.on_missed(self.count_missed)

    def count_missed(self) -> None:
        self.missed += 1


def test_the_channel_file_sits_beside_a_sqlite_database_only(tmp_path: Path) -> None:
    assert channel_path(f"sqlite:///{tmp_path / 'x.db'}") == tmp_path / "x.db-channel"
    assert channel_path("sqlite:///:memory:") is None
    assert channel_path("postgresql://u@127.0.0.1/db") is None


async def test_another_mapping_hears_each_message_once_in_order_and_the_publisher_does_not(
    pair: tuple[HostChannel, HostChannel],
) -> None:
    publisher, listener = pair
    heard, own = Heard(listener), Heard(publisher)
    await publisher.publish("revoked", "a" * 64)
    await publisher.publish("plan", "org_1")
    await publisher.publish("unheard", "x")
    listener.poll()
    listener.poll()
    publisher.poll()
    assert heard.messages == [("revoked", "a" * 64), ("plan", "org_1")]
    assert (heard.missed, own.messages, own.missed) == (0, [], 0)


async def test_a_mapping_opened_later_hears_only_what_is_published_after(url: str) -> None:
    early = HostChannel.open(url)
    assert early is not None
    await early.publish("revoked", "before")
    late = HostChannel.open(url)
    assert late is not None
    heard = Heard(late)
    await early.publish("revoked", "after")
    late.poll()
    early.close()
    late.close()
    assert heard.messages == [("revoked", "after")]


async def test_a_listener_a_whole_ring_behind_drops_everything_once(
    pair: tuple[HostChannel, HostChannel],
) -> None:
    publisher, listener = pair
    heard = Heard(listener)
    for number in range(1025):  # one more than the ring holds
        await publisher.publish("revoked", str(number))
    listener.poll()
    await publisher.publish("revoked", "next")
    listener.poll()
    assert (heard.missed, heard.messages) == (1, [("revoked", "next")])


async def test_a_message_too_long_for_a_slot_makes_listeners_drop_everything(
    pair: tuple[HostChannel, HostChannel],
) -> None:
    publisher, listener = pair
    heard = Heard(listener)
    await publisher.publish("plan", "x" * 1000)
    listener.poll()
    assert (heard.missed, heard.messages) == (1, [])


async def test_an_async_handler_runs_on_the_loop(pair: tuple[HostChannel, HostChannel]) -> None:
    publisher, listener = pair
    applied: asyncio.Queue[str] = asyncio.Queue()
    listener.on("billing", applied.put)
    await publisher.publish("billing", "org|5|bev_1|1|0")
    listener.poll()
    assert await asyncio.wait_for(applied.get(), 5) == "org|5|bev_1|1|0"


async def test_a_file_of_another_layout_is_started_afresh(url: str, tmp_path: Path) -> None:
    (tmp_path / "gateway.db-channel").write_bytes(b"something else entirely")
    publisher, listener = HostChannel.open(url), HostChannel.open(url)
    assert publisher is not None and listener is not None
    heard = Heard(listener)
    await publisher.publish("revoked", "h")
    listener.poll()
    publisher.close()
    listener.close()
    assert heard.messages == [("revoked", "h")]
    assert (tmp_path / "gateway.db-channel").stat().st_size == 64 + 1024 * 256


async def test_a_listener_whose_file_is_started_afresh_drops_everything(url: str, tmp_path: Path) -> None:
    listener = HostChannel.open(url)
    assert listener is not None
    heard = Heard(listener)
    first = HostChannel.open(url)
    assert first is not None
    await first.publish("revoked", "h")
    listener.poll()
    first.close()
    with (tmp_path / "gateway.db-channel").open("r+b") as file:
        file.write(b"XX")  # no longer this layout's magic: the next opener starts it afresh
    restarted = HostChannel.open(url)
    assert restarted is not None
    listener.poll()
    restarted.close()
    listener.close()
    assert (heard.messages, heard.missed) == ([("revoked", "h")], 1)

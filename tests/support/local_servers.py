"""Servers a test starts of its own (a Redis Cluster, a Sentinel trio, a PostgreSQL pair): the lifecycle
they share, and the fixture body that skips (locally) or fails (CI) when they cannot be started."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Self, TypeVar

from tests.support.services import service_unavailable


class LocalServers:
    """Started by `start`, every server stopped by `close` (also when `start` fails half-way)."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


T = TypeVar("T", bound=LocalServers)


def own_servers(make: Callable[[], T], what: str) -> Iterator[T]:
    """A fixture's body: `make()` started for one test and closed after it."""
    try:
        started = make().__enter__()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        service_unavailable(what, exc)
        raise
    yield started
    started.close()

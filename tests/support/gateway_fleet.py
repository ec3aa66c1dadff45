"""A fleet of `modelgate serve` processes on fixed loopback ports that a test restarts (SIGTERM) and kills
(SIGKILL) mid-traffic, knowing at every moment which process generation served which request."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.gateway import GatewayProcess, free_port

# A bound, not a wait: a start after a SIGKILL replays the spool and journal, and on a machine as loaded as a
# full suite with helpers (load 10 on 2 cores) took over 30 s once.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
PICK_TIMEOUT = 60.0


@dataclass(slots=True)
class Generation:
    """One life of one gateway slot: from its start to its stop or kill (monotonic seconds)."""

    slot: int
    number: int
    process: GatewayProcess
    started_at: float
    ended_at: float | None = None
    signalled_at: float | None = None  # when the test sent it SIGTERM or SIGKILL
    killed: bool = False
    stop_problem: str = ""  # a graceful stop that did not end in time (then killed)
    in_flight: int = 0  # requests this test has under way on it

    @property
    def name(self) -> str:
        return f"gateway{self.slot}.gen{self.number}"


@dataclass(slots=True)
class _Slot:
    index: int
    port: int
    workdir: Path
    generations: list[Generation] = field(default_factory=list)
    up: bool = False

    @property
    def current(self) -> Generation:
        return self.generations[-1]


class GatewayFleet:
    """`size` gateway processes sharing one config; each slot keeps its port and working directory across
    restarts (a write-ahead spool kept beside the process must be found again by its successor)."""

    def __init__(self, config_path: Path, workdir: Path, size: int) -> None:
        self._config_path = config_path
        self._slots = [_Slot(i, free_port(), workdir / f"gateway{i}") for i in range(size)]
        for slot in self._slots:
            slot.workdir.mkdir(parents=True, exist_ok=True)
        self._changed = asyncio.Condition()
        self._busier = asyncio.Event()  # set when a request starts on any generation

    def __len__(self) -> int:
        return len(self._slots)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start_all(self) -> None:
        for slot in self._slots:
            self._start(slot)

    def _start(self, slot: _Slot) -> None:
        process = GatewayProcess(self._config_path, port=slot.port, cwd=slot.workdir)
        generation = Generation(slot.index, len(slot.generations) + 1, process, time.monotonic())
        slot.generations.append(generation)
        process.start(timeout=START_TIMEOUT)
        slot.up = True

    async def restart(
        self, index: int, *, hard: bool, between: Callable[[], object] | None = None
    ) -> Generation:
        """SIGTERM (graceful) or SIGKILL slot `index`, then (after `between`, run while it is down, in a
        thread) start it again; returns the generation that ended. New requests go to the other slots
        meanwhile."""
        slot = self._slots[index]
        ended = slot.current
        async with self._changed:
            slot.up = False
        process = ended.process
        ended.signalled_at = time.monotonic()
        if hard:
            ended.killed = True
            await asyncio.to_thread(process.kill)
        else:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                ended.stop_problem = f"did not stop within {STOP_TIMEOUT:g} s of SIGTERM; killed"
            finally:
                await asyncio.to_thread(process.kill)  # no-op when it stopped in time
        ended.ended_at = time.monotonic()
        self._keep_log(slot, ended)
        if between is not None:
            await asyncio.to_thread(between)
        await asyncio.to_thread(self._start, slot)
        async with self._changed:
            self._changed.notify_all()
        return ended

    def _keep_log(self, slot: _Slot, generation: Generation) -> None:
        # GatewayProcess writes <cwd>/modelgate-<port>.log afresh at every start: keep each life's log.
        log = slot.workdir / f"modelgate-{slot.port}.log"
        if log.exists():
            log.rename(slot.workdir / f"{generation.name}.log")

    def stop_all(self) -> list[str]:
        """Stop every process (SIGTERM, then SIGKILL after the timeout); returns the problems seen."""
        problems = []
        for slot in self._slots:
            if not slot.generations:
                continue
            generation = slot.current
            process = generation.process
            slot.up = False
            try:
                process.terminate()
                code = process.wait(STOP_TIMEOUT)
                if code not in (0, None):
                    problems.append(f"{generation.name} exited with {code}")
            except Exception as exc:  # a hung stop must not keep the other processes running
                problems.append(f"{generation.name} did not stop: {exc!r}")
            finally:
                with contextlib.suppress(Exception):
                    process.kill()
            if generation.ended_at is None:
                generation.ended_at = time.monotonic()
            self._keep_log(slot, generation)
        return problems

    # -- routing ------------------------------------------------------------------------------------

    async def pick(self, preferred: int) -> Generation:
        """The live generation of slot `preferred`, or of the next live slot; waits while none is up."""
        deadline = time.monotonic() + PICK_TIMEOUT
        async with self._changed:
            while True:
                for offset in range(len(self._slots)):
                    slot = self._slots[(preferred + offset) % len(self._slots)]
                    if slot.up:
                        return slot.current
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no gateway came up within the pick timeout")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=remaining)

    @contextlib.contextmanager
    def serving(self, generation: Generation) -> Iterator[Generation]:
        """Count a request as under way on `generation` while the block runs."""
        generation.in_flight += 1
        self._busier.set()
        try:
            yield generation
        finally:
            generation.in_flight -= 1

    async def wait_busy(self, index: int, at_least: int, within: float) -> int:
        """Wait (at most `within` seconds) until slot `index` has `at_least` requests under way; returns how
        many it has."""
        slot = self._slots[index]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while slot.current.in_flight < at_least:
                    self._busier.clear()
                    await self._busier.wait()
        return slot.current.in_flight

    # -- observation --------------------------------------------------------------------------------

    @property
    def generations(self) -> list[Generation]:
        return [g for slot in self._slots for g in slot.generations]

    def live(self) -> list[Generation]:
        return [slot.current for slot in self._slots if slot.up]

    def base_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self._slots[index].port}"

    def logs(self) -> dict[str, str]:
        """Every kept log of every slot, by file name."""
        found = {}
        for slot in self._slots:
            for path in sorted(slot.workdir.glob("*.log")):
                found[path.name] = path.read_text(encoding="utf-8", errors="replace")
        return found

    async def metrics(self, generation: Generation) -> dict[str, float]:
        """The un-labelled samples of a live generation's /metrics (empty when it does not answer)."""
        url = f"{generation.process.base_url}/metrics"
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                reply = await client.get(url)
        except httpx.TransportError:
            return {}
        samples = {}
        for line in reply.text.splitlines():
            name, _, value = line.partition(" ")
            if line.startswith("#") or "{" in name or not value:
                continue
            with contextlib.suppress(ValueError):
                samples[name] = float(value)
        return samples

    async def redis_ready(self, within: float) -> bool:
        """Wait (bounded) until every live generation's /readyz finds Redis ready (False: not in time)."""
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(timeout=5) as http:
            while time.monotonic() < deadline:
                if all([await _redis_ready(http, g.process.base_url) for g in self.live()]):
                    return True
                await asyncio.sleep(0.1)  # the polling period of a bounded wait
        return False


async def _redis_ready(http: httpx.AsyncClient, base_url: str) -> bool:
    try:
        reply = await http.get(f"{base_url}/readyz")
    except httpx.TransportError:
        return False
    return reply.status_code == 200 and reply.json().get("checks", {}).get("redis") == "ok"

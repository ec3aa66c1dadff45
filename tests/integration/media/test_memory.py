"""Memory, measured on a real `modelgate serve` process: streaming a 90 MiB multipart video upload (and a
90 MiB video download) through the gateway grows its resident memory by far less than the body's size.

The gateway's RSS is read from /proc/PID/status before the transfer, sampled every few milliseconds during
it (the peak), and read after it (VmRSS, and VmHWM, the kernel's own high-water mark).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.media.conftest import MULTIPART, MiB, media_toml, multipart
from tests.support.gateway import GatewayProcess, register_tenant

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status"),
    pytest.mark.filterwarnings("ignore:unread_data:DeprecationWarning"),
]

BOUND = 20 * MiB
BODY = 90 * MiB


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Resident memory of the gateway process around one transfer, in bytes."""

    rss_before: int
    peak_during: int
    rss_after: int
    hwm_before: int
    hwm_after: int

    @property
    def growth(self) -> int:
        """How far resident memory rose above where it stood before the transfer (sampled peak or after)."""
        return max(self.peak_during, self.rss_after) - self.rss_before

    @property
    def hwm_growth(self) -> int:
        """How far the kernel's high-water mark moved (0 while the transfer stays under the start-up peak)."""
        return self.hwm_after - self.hwm_before

    def __str__(self) -> str:
        mib = lambda n: f"{n / MiB:.1f} MiB"  # noqa: E731
        return (
            f"RSS before {mib(self.rss_before)}, peak during {mib(self.peak_during)}, after "
            f"{mib(self.rss_after)}; VmHWM before {mib(self.hwm_before)}, after {mib(self.hwm_after)}; "
            f"growth {mib(self.growth)} (VmHWM +{mib(self.hwm_growth)})"
        )


class RssSampler:
    """Samples a process's VmRSS in a thread while a transfer runs."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _status_kib(self._pid, "VmRSS") * 1024)

    def measure(self, transfer) -> MemoryReport:
        pid = self._pid
        rss_before, hwm_before = _status_kib(pid, "VmRSS") * 1024, _status_kib(pid, "VmHWM") * 1024
        self.peak = rss_before
        self._thread.start()
        try:
            transfer()
        finally:
            self._stop.set()
            self._thread.join(timeout=5)
        return MemoryReport(
            rss_before,
            self.peak,
            _status_kib(pid, "VmRSS") * 1024,
            hwm_before,
            _status_kib(pid, "VmHWM") * 1024,
        )


@pytest.fixture(scope="module")
def process_gateway(tmp_path_factory, media_stack) -> Iterator[tuple[GatewayProcess, httpx.Client]]:
    directory = tmp_path_factory.mktemp("memory")
    config = directory / "memory.toml"
    config.write_text(media_toml(f"sqlite:///{directory / 'memory.db'}", media_stack.alpha, media_stack.beta))
    with GatewayProcess(config, cwd=directory) as gateway:
        key = register_tenant(gateway.base_url).api_key
        with httpx.Client(
            base_url=gateway.base_url, timeout=120, headers={"authorization": f"Bearer {key}"}
        ) as http:
            # Warm up every code path once, so the measurement sees the transfer and not first-use costs.
            _total, chunks = multipart(
                [("model", "video-test"), ("prompt", "warm")], [("input_reference", 4 * MiB)]
            )
            warm = http.post("/v1/videos", content=chunks, headers=MULTIPART)
            assert warm.status_code == 200, warm.text
            with http.stream("GET", f"/v1/videos/{warm.json()['id']}/content") as response:
                response.read()
            yield gateway, http


def test_a_90_mib_multipart_upload_grows_the_gateway_by_less_than_20_mib(process_gateway, alpha) -> None:
    gateway, http = process_gateway
    results: list[httpx.Response] = []

    def upload() -> None:
        _total, chunks = multipart([("model", "video-test"), ("prompt", "big")], [("input_reference", BODY)])
        results.append(http.post("/v1/videos", content=chunks, headers=MULTIPART))

    report = RssSampler(gateway.process.pid).measure(upload)
    print(f"\n90 MiB multipart upload through the gateway: {report}")
    assert results[0].status_code == 200, results[0].text
    assert alpha.media.uploads[-1].part("input_reference").size == BODY
    assert report.growth < BOUND and report.hwm_growth < BOUND, str(report)


def test_a_90_mib_video_download_grows_the_gateway_by_less_than_20_mib(process_gateway, alpha) -> None:
    gateway, http = process_gateway
    video_id = http.post("/v1/videos", json={"model": "video-test", "prompt": "big"}).json()["id"]
    alpha.media.video_content_size = BODY
    received: list[int] = []

    def download() -> None:
        with http.stream("GET", f"/v1/videos/{video_id}/content") as response:
            assert response.status_code == 200
            received.append(sum(len(chunk) for chunk in response.iter_bytes()))

    report = RssSampler(gateway.process.pid).measure(download)
    print(f"\n90 MiB video content through the gateway: {report}")
    assert received == [BODY]
    assert report.growth < BOUND and report.hwm_growth < BOUND, str(report)

"""What an open stream holds while it waits for its next chunk: Python heap per stream, by allocation site.

    python bench/stream_memory.py [--streams 1000] [--top 15]

Starts the bench upstream with streams that send their first event and then wait 60 s, runs the gateway
(default config, SQLite) in this process, opens `--streams` streams after a warm-up, and compares two
tracemalloc snapshots: before the streams and with every stream open and waiting. Prints bytes per stream and
the allocation sites that hold them. Kernel socket buffers are not in the Python heap (nor in RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import socket
import sys
import tempfile
import threading
import tracemalloc
from pathlib import Path

from children import free_port, start, wait_for_port
from gateway_setup import register_tenant, write_config
from services import BENCH
from workload import chat_body, raw_request

from modelgate.config import load_config
from modelgate.plugins import chain_plugins
from modelgate.server import serve


def _open_streams(port: int, request: bytes, n: int, batch: int = 100) -> list[socket.socket]:
    """`n` streams, each read up to its first event (then left waiting for the next), opened `batch` at a
    time: a thousand new upstream connections at once can outlast the 5 s connect timeout on a busy host."""
    socks: list[socket.socket] = []
    while len(socks) < n:
        opened = []
        for _ in range(min(batch, n - len(socks))):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(request)
            opened.append(sock)
        for sock in opened:
            sock.settimeout(30)
            seen = b""
            while b"data: " not in seen:
                chunk = sock.recv(65536)
                if not chunk:
                    raise RuntimeError(f"a stream ended early: {seen[:200]!r}")
                seen += chunk
        socks += opened
    return socks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelgate-memory-") as temp, contextlib.ExitStack() as stack:
        root = Path(temp)
        upstream_port = free_port()
        pacing = ["--ttfb-ms", "50", "--chunk-delay-ms", "60000", "--chunks", "2"]
        upstream = start(
            "upstream",
            [sys.executable, str(BENCH / "upstream.py"), "--port", str(upstream_port), *pacing],
            cpus=os.sched_getaffinity(0),
            log_dir=root,
        )
        stack.callback(upstream.stop)
        wait_for_port(upstream, upstream_port)
        port = free_port()
        path = write_config(root, port=port, upstream_port=upstream_port, workers=1)
        config = load_config(path, chain=chain_plugins())
        loop = asyncio.new_event_loop()
        ready, stop = asyncio.Event(), asyncio.Event()
        thread = threading.Thread(
            target=loop.run_until_complete,
            args=(serve(config, host="127.0.0.1", port=port, ready=ready, stop=stop),),
            daemon=True,
        )
        thread.start()
        stack.callback(thread.join, 30)
        stack.callback(loop.call_soon_threadsafe, stop.set)
        asyncio.run_coroutine_threadsafe(ready.wait(), loop).result(60)
        key = register_tenant(f"http://127.0.0.1:{port}")
        request = raw_request("127.0.0.1", port, chat_body(stream=True), key)
        for sock in _open_streams(port, request, 50):  # warm-up: caches, first-use allocations
            sock.close()
        tracemalloc.start(1)
        gc.collect()
        before = tracemalloc.take_snapshot()
        socks = _open_streams(port, request, args.streams)
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = after.compare_to(before, "lineno")
        grown = sum(s.size_diff for s in stats)
        n = args.streams
        print(f"\n{n} open streams waiting for their next chunk: {grown / n:,.0f} bytes each")
        print("(Python heap, tracemalloc; allocation sites by bytes per stream)\n")
        for stat in stats[: args.top]:
            frame = stat.traceback[0]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            print(f"{stat.size_diff / n:8,.0f} B  {stat.count_diff / n:6.2f} blocks  {where}")
        for sock in socks:
            sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

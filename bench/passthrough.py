"""The bare aiohttp passthrough: a Bearer check and a byte relay, no JSON and no governance.

This is the Python floor the gateway is measured against. Run:
`PASSTHROUGH_KEY=sk-… python bench/passthrough.py --port P --upstream http://127.0.0.1:U [--cpu 0]`
(the key comes from the environment so it never shows in `ps`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import aiohttp
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)


def build_app(upstream: str, key: str, upstream_connections: int = 256) -> web.Application:
    """One catch-all route relaying to `upstream` over one pooled client session."""
    expected = f"Bearer {key}"

    async def relay(request: web.Request) -> web.StreamResponse:
        if request.headers.get("authorization") != expected:
            return web.Response(status=401)
        body = await request.read()
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        session = request.app[SESSION]
        async with session.request(
            request.method, upstream + request.path_qs, data=body, headers=headers
        ) as up:
            response = web.StreamResponse(status=up.status)
            response.content_type = up.content_type
            if up.content_length is not None:
                response.content_length = up.content_length
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def open_session(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=upstream_connections, keepalive_timeout=30)
        app[SESSION] = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def close_session(app: web.Application) -> None:
        await app[SESSION].close()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay)
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    return app


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM/SIGINT or until `--max-seconds` have passed."""
    app = build_app(args.upstream.rstrip("/"), args.key, args.upstream_connections)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port, reuse_port=args.reuse_port, backlog=4096).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.call_later(args.max_seconds, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="bare aiohttp passthrough (the benchmark's floor)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="upstream origin, e.g. http://127.0.0.1:9000")
    parser.add_argument("--cpu", type=int, help="pin the process to this core")
    parser.add_argument(
        "--upstream-connections", type=int, default=256, help="most connections to the upstream (0: no cap)"
    )
    parser.add_argument("--reuse-port", action="store_true", help="share the port with sibling processes")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="exit by itself after this long")
    args = parser.parse_args()
    args.key = os.environ.get("PASSTHROUGH_KEY") or parser.error(
        "set PASSTHROUGH_KEY to the accepted API key"
    )
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args))
    else:
        uvloop.run(serve(args))


if __name__ == "__main__":
    main()

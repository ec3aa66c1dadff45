"""GeminiFake: Google's Gemini API, Vertex AI and a token endpoint on 127.0.0.1 (gemini_routes.py), served
by aiohttp on its own loop in a daemon thread; and `service_account_file`, a service account with a fresh
RSA key whose `token_uri` is the fake's, for the gateway's Vertex credentials."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .gemini_routes import build_app
from .gemini_state import GeminiState
from .records import RecordedRequest

START_TIMEOUT = 5.0
PROJECT = "acme-llm"
REGION = "us-east5"
CLIENT_EMAIL = "gateway@acme-llm.iam.gserviceaccount.com"
MODELS = ("gemini-2.5-flash", "gemini-3-pro-preview", "text-embedding-004", "claude-sonnet-4-6")


class GeminiFake:
    """The fake, started as a context manager; `state` is what it knows and saw."""

    def __init__(self, api_keys: tuple[str, ...] = (), models: tuple[str, ...] = MODELS) -> None:
        self.state = GeminiState(api_keys, models, PROJECT, REGION)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.state.log.snapshot()

    def add_fault(self, status: int, body: Any, times: int = 1) -> None:
        """Answer the next `times` model requests with `status` and `body` (a JSON value)."""
        self.state.add_fault(status, body, times)

    def __enter__(self) -> GeminiFake:
        loop = asyncio.new_event_loop()
        listening: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop, listening), name="fake-gemini", daemon=True
        )
        self._thread.start()
        listening.result(timeout=START_TIMEOUT)
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, listening: concurrent.futures.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:
            listening.set_exception(exc)
            return
        listening.set_result(None)
        loop.run_forever()
        loop.close()

    async def _listen(self) -> None:
        self._runner = web.AppRunner(
            build_app(self.state), handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._runner is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=START_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=START_TIMEOUT)

    def service_account_file(self, directory: Path) -> Path:
        """A service-account JSON with a freshly generated key, known to this fake, tokens from its /token."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.state.public_keys.append(key.public_key())
        self.state.client_email = CLIENT_EMAIL
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        info = {
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": "fake-key-1",
            "private_key": pem,
            "client_email": CLIENT_EMAIL,
            "client_id": "1234567890",
            "token_uri": f"{self.base_url}/token",
        }
        path = directory / f"service-account-{len(self.state.public_keys)}.json"
        path.write_bytes(orjson.dumps(info))
        return path

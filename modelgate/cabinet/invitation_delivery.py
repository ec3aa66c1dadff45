"""Optional delivery of new invitations, with their token, to the operator's webhook (beside the mail).

Delivery runs in the background after the invitation is committed; a failure is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import orjson

log = logging.getLogger("modelgate.cabinet.invitations")

DELIVERY_TIMEOUT_SECONDS = 10.0


class InvitationDelivery:
    """POSTs invitations (with their token) to `invitation_webhook_url` when one is configured."""

    def __init__(self, webhook_url: str | None) -> None:
        self._url = webhook_url
        self._pending: set[asyncio.Task[None]] = set()

    def deliver(self, payload: dict[str, Any]) -> None:
        """Start delivering one invitation; returns at once."""
        if not self._url:
            return
        task = asyncio.get_running_loop().create_task(self._post(self._url, payload))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _post(self, url: str, payload: dict[str, Any]) -> None:
        timeout = aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT_SECONDS)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(
                    url, data=orjson.dumps(payload), headers={"Content-Type": "application/json"}
                ) as resp,
            ):
                if resp.status >= 300:
                    log.warning("invitation webhook answered HTTP %s", resp.status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # Neither the URL (it may carry a token) nor the payload (it carries one) is logged.
            log.warning("invitation webhook delivery failed: %s", type(exc).__name__)

    async def close(self) -> None:
        """Let deliveries under way finish (each is bounded by its timeout)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

"""AWS credentials and SigV4 signatures for a Bedrock host, through botocore.

Credentials come from the host's options (`aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`),
else its `aws_profile`, else botocore's standard chain (environment, ~/.aws files, container and instance
roles). They are looked up once, at the first request (in a thread: the chain may ask the network), and
never at start, so a gateway without them starts and says why at the first request. Temporary credentials
are botocore's refreshable ones: a refresh near their expiry runs in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from importlib.util import find_spec
from typing import Any

from modelgate.config import ProviderConfig
from modelgate.proxy.upstream.providers import UpstreamFailure

# botocore is the `bedrock` extra: imported where it is used, once a Bedrock host is configured.
HAS_BOTOCORE = find_spec("botocore") is not None

SERVICE = "bedrock"
# After a lookup that found nothing, the next one waits this long: the chain's instance-role probe takes
# seconds, and every request would pay it.
RETRY_LOOKUP_AFTER = 30.0
_SIGNED_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token")


def require_botocore() -> None:
    """A clear error when the `bedrock` extra is missing."""
    if not HAS_BOTOCORE:
        raise RuntimeError("the bedrock dialect needs botocore: pip install modelgate[bedrock]")


class AwsSigner:
    """Signs one host's requests with SigV4 (service `bedrock`, the host's region)."""

    def __init__(self, config: ProviderConfig, region: str) -> None:
        require_botocore()
        self.provider = config.name
        self.region = region
        self._key_id = config.option("aws_access_key_id")
        self._secret = config.option("aws_secret_access_key")
        self._token = config.option("aws_session_token")
        self._profile = config.option("aws_profile")
        self._credentials: Any = None
        self._missing_until = 0.0
        self._lookup = asyncio.Lock()

    async def signed_headers(
        self, method: str, url: str, host: str, body: bytes | None
    ) -> list[tuple[str, str]]:
        """The headers that sign `method url` with `body` (`host` exactly as sent: it is signed)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        credentials = await self._frozen()
        request = AWSRequest(
            method=method,
            url=url,
            data=body or b"",
            headers={"host": host, "content-type": "application/json"},
        )
        SigV4Auth(credentials, SERVICE, self.region).add_auth(request)
        return [
            (name.lower(), value)
            for name, value in request.headers.items()
            if name.lower() in _SIGNED_HEADERS
        ]

    async def _frozen(self) -> Any:
        from botocore.credentials import RefreshableCredentials

        credentials = self._credentials or await self._resolve()
        if isinstance(credentials, RefreshableCredentials) and credentials.refresh_needed():
            return await asyncio.to_thread(credentials.get_frozen_credentials)  # may ask STS or the instance
        return credentials.get_frozen_credentials()

    async def _resolve(self) -> Any:
        from botocore.exceptions import BotoCoreError

        async with self._lookup:
            if self._credentials is not None:
                return self._credentials
            if time.monotonic() < self._missing_until:
                raise self._missing("none were found a moment ago")
            try:
                credentials = await asyncio.to_thread(self._lookup_credentials)
            except BotoCoreError as exc:  # e.g. an unknown profile, a broken ~/.aws/config
                self._missing_until = time.monotonic() + RETRY_LOOKUP_AFTER
                raise self._missing(str(exc)) from None
            if credentials is None:
                self._missing_until = time.monotonic() + RETRY_LOOKUP_AFTER
                raise self._missing("none in the options, the environment, ~/.aws or an instance role")
            self._credentials = credentials
            return credentials

    def _lookup_credentials(self) -> Any:
        import botocore.session
        from botocore.credentials import Credentials

        if self._key_id and self._secret:
            return Credentials(self._key_id, self._secret, self._token)
        session = (
            botocore.session.Session(profile=self._profile) if self._profile else botocore.session.Session()
        )
        return session.get_credentials()

    def _missing(self, why: str) -> UpstreamFailure:
        source = f"profile {self._profile!r}" if self._profile else "the standard chain"
        return UpstreamFailure(f"{self.provider}: no AWS credentials for Bedrock from {source}: {why}")

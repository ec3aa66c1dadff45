"""A scripted browser for single sign-on: a cookie jar, redirects followed by hand (so a test sees every hop),
and the login and consent forms of oidc-provider's devInteractions filled in."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from modelgate.cabinet.oidc.urls import CALLBACK_PATH

_FORM_ACTION = re.compile(r'<form[^>]*\baction="([^"]+)"', re.IGNORECASE)
_PROMPT = re.compile(r'name="prompt" value="([a-z]+)"')
MAX_HOPS = 20


def query_of(url: str) -> dict[str, str]:
    """The query parameters of a URL (first value of each)."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@dataclass
class Journey:
    """Where a sign-in ended: the cabinet URL it landed on, or the last answer when it landed nowhere."""

    response: httpx.Response
    landed_at: str | None = None
    callback_url: str | None = None
    visited: list[str] = field(default_factory=list)

    @property
    def params(self) -> dict[str, str]:
        """The query the cabinet received (`code` or `error`)."""
        assert self.landed_at is not None, f"no redirect to the cabinet: {self.response.status_code}"
        return query_of(self.landed_at)


class Browser:
    """One user agent: its own cookies for the gateway and the identity provider."""

    def __init__(self, cabinet_url: str) -> None:
        self.http = httpx.AsyncClient(follow_redirects=False, timeout=15)
        self.cabinet_url = cabinet_url

    async def close(self) -> None:
        await self.http.aclose()

    async def open(self, url: str) -> httpx.Response:
        """GET a URL (no redirect followed)."""
        return await self.http.get(url)

    async def follow(self, response: httpx.Response) -> httpx.Response:
        """Follow redirects to the next page (e.g. the provider's login page) without filling anything in."""
        for _ in range(MAX_HOPS):
            if not response.is_redirect:
                return response
            response = await self.http.get(urljoin(str(response.url), response.headers["location"]))
        raise AssertionError(f"more than {MAX_HOPS} redirects")

    async def sign_in(self, login_url: str, login: str, *, stop_at_callback: bool = False) -> Journey:
        """Start at the gateway's login URL, sign in at the provider as `login`, consent, and follow the
        redirects back through the gateway's callback to the cabinet URL."""
        return await self.resume(await self.open(login_url), login, stop_at_callback=stop_at_callback)

    async def resume(
        self, response: httpx.Response, login: str, *, stop_at_callback: bool = False
    ) -> Journey:
        """Continue a sign-in from any answer along the way (e.g. the gateway's first redirect)."""
        journey = Journey(response)
        for _ in range(MAX_HOPS):
            journey.visited.append(str(response.url))
            if response.is_redirect:
                location = urljoin(str(response.url), response.headers["location"])
                if location.startswith(self.cabinet_url):
                    journey.landed_at = location
                    return journey
                if urlsplit(location).path == CALLBACK_PATH:
                    journey.callback_url = location
                    if stop_at_callback:
                        return journey
                response = journey.response = await self.http.get(location)
                continue
            form = _FORM_ACTION.search(response.text) if response.status_code == 200 else None
            prompt = _PROMPT.search(response.text) if form else None
            if form is None or prompt is None:
                return journey
            fields = {"prompt": prompt.group(1)}
            if prompt.group(1) == "login":
                fields |= {"login": login, "password": "any password"}
            action = urljoin(str(response.url), html.unescape(form.group(1)))
            response = journey.response = await self.http.post(action, data=fields)
        raise AssertionError(f"sign-in did not finish within {MAX_HOPS} hops: {journey.visited}")

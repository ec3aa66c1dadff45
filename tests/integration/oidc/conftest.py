"""Fixtures of the SSO suite: the cabinet on a loopback port fixed per module (the redirect URI registered
at the identity provider), the real OpenID provider (Node, per module), a fake one, and browsers."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace

import pytest
from aiohttp import web

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.oidc.urls import CALLBACK_PATH
from modelgate.cabinet.services import CabinetServices
from modelgate.config import Config, load_config
from modelgate.storage import Database
from tests.integration.cabinet.cabinet_client import Cabinet, RecordingSink
from tests.integration.oidc.browser import Browser
from tests.integration.oidc.dns_server import DnsServer
from tests.integration.oidc.fake_idp import FakeIdp
from tests.integration.oidc.node_idp import NodeIdp, require_node_harness, start_node_idp
from tests.integration.oidc.sso_client import SsoGateway

CABINET_URL = "http://cabinet.test/sso"
GatewayFactory = Callable[..., Awaitable[SsoGateway]]


@pytest.fixture(scope="module")
def gateway_socket() -> Iterator[socket.socket]:
    """A listening loopback socket kept for the whole module: each test serves its cabinet on a duplicate,
    so the port (and with it the redirect URI registered at the provider) never changes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    yield sock
    sock.close()


def base_url_of(sock: socket.socket) -> str:
    """The gateway's public URL on this socket."""
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def node_idp(gateway_socket: socket.socket) -> Iterator[NodeIdp]:
    """The real OpenID provider, with the module's redirect URI registered for its clients."""
    node = require_node_harness()
    idp = start_node_idp(node, base_url_of(gateway_socket) + CALLBACK_PATH)
    yield idp
    idp.stop()


OPERATOR_TOKEN = "operator-token-of-the-sso-tests"


def sso_config(
    public_url: str, cabinet_url: str | None = CABINET_URL, dns_resolvers: tuple[str, ...] = ()
) -> Config:
    """The embedded default config with SSO switched on, and the operator API (which approves domains)."""
    config = load_config(None)
    return replace(
        config,
        server=replace(config.server, public_url=public_url, operator_token=OPERATOR_TOKEN),
        cabinet=replace(config.cabinet, cabinet_url=cabinet_url),
        sso=replace(config.sso, dns_resolvers=dns_resolvers, dns_timeout_seconds=2.0),
    )


@pytest.fixture
def start_gateway(aiohttp_client, db: Database, gateway_socket: socket.socket) -> GatewayFactory:
    """Start the cabinet (mounted under /api as the gateway does) on the module's port."""

    async def start(
        *,
        cabinet_url: str | None = CABINET_URL,
        public_url: str | None = None,
        dns_resolvers: tuple[str, ...] = (),
    ) -> SsoGateway:
        base_url = base_url_of(gateway_socket)
        config = sso_config(base_url if public_url is None else public_url, cabinet_url, dns_resolvers)
        root = web.Application()
        root.add_subapp("/api", build_cabinet_app(CabinetServices(config, db, RecordingSink())))
        client = await aiohttp_client(
            root, server_kwargs={"socket_factory": lambda host, port, family: gateway_socket.dup()}
        )
        return SsoGateway(Cabinet(client, db, RecordingSink()), base_url, OPERATOR_TOKEN)

    return start


@pytest.fixture
async def gateway(start_gateway: GatewayFactory) -> SsoGateway:
    """The cabinet with SSO configured (public URL and cabinet URL)."""
    return await start_gateway()


@pytest.fixture
async def dns_server() -> AsyncIterator[DnsServer]:
    """A DNS server on a loopback UDP port, publishing what the test puts in its zone."""
    server = DnsServer()
    await server.start()
    yield server
    server.close()


@pytest.fixture
async def fake_idp(aiohttp_server) -> FakeIdp:
    """A misbehaving OpenID provider on its own loopback port."""
    idp = FakeIdp()
    server = await aiohttp_server(idp.app())
    idp.issuer = str(server.make_url("")).rstrip("/")
    return idp


@pytest.fixture
async def open_browser() -> AsyncIterator[Callable[[], Browser]]:
    """A factory of browsers (each with its own cookies), closed after the test."""
    browsers: list[Browser] = []

    def open_one() -> Browser:
        browsers.append(Browser(CABINET_URL))
        return browsers[-1]

    yield open_one
    for browser in browsers:
        await browser.close()


@pytest.fixture
def browser(open_browser: Callable[[], Browser]) -> Browser:
    """One browser."""
    return open_browser()

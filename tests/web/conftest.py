"""Fixtures of the browser tests: one Chromium and one gateway for the folder (each test registers its own
organization, so tests stay independent), and per-test browser contexts that fail the test on a script error
or a Content-Security-Policy refusal in any of its pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.web.browser import CHROMIUM, Contexts, require_browser
from tests.web.web_gateway import WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """The system Chromium, headless (no sandbox: the tests may run as root)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="package")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebGateway]:
    """`modelgate serve` on embedded SQLite, with a priced model on a fake upstream."""
    workdir: Path = tmp_path_factory.mktemp("web-gateway")
    running = WebGateway(workdir).start()
    yield running
    running.stop()


@pytest.fixture
def contexts(browser: Browser, gateway: WebGateway) -> Iterator[Contexts]:
    """This test's browser contexts; after the test, no page may have thrown or broken the CSP."""
    opened = Contexts(browser, gateway.base_url)
    yield opened
    opened.close()
    assert not opened.problems.errors, "errors in the pages:\n" + "\n".join(opened.problems.errors)

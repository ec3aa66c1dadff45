"""The browser side of the web tests: the system Chromium (skipped locally, required under CI=true), contexts
that record script errors and CSP violations, signing a context in through the cabinet API, opening a page by
its hash route, screenshots (docs/screenshots/ when asked, see SCREENSHOTS), and the axe-core accessibility
check."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.services import IN_CI
from tests.web.web_gateway import REPOSITORY, Account

try:
    from playwright.sync_api import expect
except ImportError:  # require_browser() skips the tests (fails them under CI) with the reason
    expect = None

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

CHROMIUM = Path(os.environ.get("MODELGATE_TEST_CHROMIUM", "/usr/bin/chromium"))
AXE = REPOSITORY / "tests" / "oidc_provider" / "node_modules" / "axe-core" / "axe.min.js"
# Where every page's screenshot goes: a scratch folder, so a test run leaves the checkout as it was;
# `MODELGATE_SCREENSHOTS=docs/screenshots pytest tests/web` renews the ones the README shows.
SCREENSHOTS = Path(
    os.environ.get("MODELGATE_SCREENSHOTS") or Path(tempfile.gettempdir()) / "modelgate-screenshots"
)
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# How long a page may take to show its content (the gateway is local; this bounds a broken page).
PAGE_TIMEOUT_MS = 10_000
BLOCKING_IMPACTS = ("serious", "critical")


def require_browser() -> None:
    """Skip (locally) or fail (CI=true) when Playwright, the system Chromium or axe-core is missing."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "the playwright package is not installed: pip install -e '.[test]'"
    if problem is None and not CHROMIUM.is_file():
        problem = f"{CHROMIUM} is missing: apt-get install chromium chromium-driver"
    if problem is None and not AXE.is_file():
        problem = f"{AXE} is missing: npm ci --prefix tests/oidc_provider"
    if problem is not None:
        message = f"the web cabinet's browser tests cannot run: {problem}"
        if IN_CI:
            pytest.fail(f"{message} (CI=true: browser tests must run)")
        pytest.skip(message)


@dataclass
class Problems:
    """What went wrong inside the pages of one context: uncaught script errors and CSP refusals."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: uncaught {exc}"))
        page.on("console", lambda msg: self._console(page, msg.type, msg.text))

    def _console(self, page: Page, kind: str, text: str) -> None:
        if kind == "error" and "Content Security Policy" in text:
            self.errors.append(f"{page.url}: {text}")


class Contexts:
    """Browser contexts of one test (each its own cookie jar), closed after it."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url
        self.problems = Problems()
        self._open: list[BrowserContext] = []

    def new(self, *, viewport: dict[str, int] | None = None, **options: Any) -> BrowserContext:
        """A fresh context on the gateway (1280 by 800 unless told), its pages watched for errors."""
        context = self.browser.new_context(base_url=self.base_url, viewport=viewport or DESKTOP, **options)
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        context.on("page", self.problems.watch)
        self._open.append(context)
        return context

    def page(self, **options: Any) -> Page:
        """A page in a fresh context."""
        return self.new(**options).new_page()

    def signed_in(self, account: Account, **options: Any) -> BrowserContext:
        """A context holding the account's session cookie, from POST /api/auth/login sent by a page of the
        cabinet (the gateway gives the cookie to its own pages' requests)."""
        context = self.new(**options)
        page = context.new_page()
        page.goto("/assets/styles.css")  # a document of the gateway's origin, without starting the app
        credentials = {"email": account.email, "password": account.password}
        reply = fetch_from_page(page, "POST", "/api/auth/login", credentials)
        assert reply["status"] == 200, f"login of {account.email}: {reply}"
        page.close()
        return context

    def close(self) -> None:
        for context in self._open:
            context.close()


def labelled(label: str) -> re.Pattern[str]:
    """A form field's label as the page writes it: the text, then " *" when the field is required."""
    return re.compile(rf"^{re.escape(label)}( \*)?$")


def open_route(page: Page, route: str, title: str | re.Pattern[str] | None = None) -> Page:
    """Open `/#/<route>` and wait until the page shows its title and has finished loading."""
    page.goto(f"/#/{route}")
    return settle(page, title)


def settle(page: Page, title: str | re.Pattern[str] | None = None) -> Page:
    """Wait until the page heading reads `title` (any page's, when None) and nothing in the page is loading
    (no `.loading` state, no form or region marked `aria-busy`)."""
    heading = page.locator("#page-title")
    if title is None:
        expect(heading).not_to_have_text("modelgate")
    else:
        expect(heading).to_have_text(title)
    expect(page.locator("#page .loading, #page [aria-busy='true']")).to_have_count(0)
    return page


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page to <SCREENSHOTS>/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's violations of serious or critical impact on the page as it is now."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [v for v in found if v.get("impact") in BLOCKING_IMPACTS]


def describe_violations(violations: list[dict[str, Any]]) -> str:
    """The violations as a reader wants them: rule, impact, what to do, and the elements."""
    lines = []
    for violation in violations:
        rule = f"{violation['id']}: {violation['help']} ({violation['helpUrl']})"
        lines.append(f"[{violation['impact']}] {rule}")
        for node in violation["nodes"][:5]:
            summary = re.sub(r"\s+", " ", node.get("failureSummary", ""))
            lines.append(f"    at {' '.join(node['target'])}: {node['html'][:160]}")
            lines.append(f"       {summary[:300]}")
        if len(violation["nodes"]) > 5:
            lines.append(f"    … and {len(violation['nodes']) - 5} more elements")
    return "\n".join(lines)


def sign_in_on_page(page: Page, account: Account) -> Page:
    """Sign in with e-mail and password on the sign-in page; waits for the overview."""
    open_route(page, "login")
    page.get_by_label(labelled("E-mail")).fill(account.email)
    page.get_by_label(labelled("Password")).fill(account.password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    return settle(page, "Overview")


def fetch_from_page(
    page: Page, method: str, path: str, body: Any = None, headers: Any = None
) -> dict[str, Any]:
    """A `fetch()` made by the page's own script: {status, body} (the browser adds the cookie by itself)."""
    return page.evaluate(
        """async ([method, path, body, headers]) => {
            const init = {method, headers: {...(headers || {})}, credentials: "same-origin"};
            if (body !== null) {
                init.headers["content-type"] = "application/json";
                init.body = JSON.stringify(body);
            }
            const reply = await fetch(path, init);
            const text = await reply.text();
            return {status: reply.status, body: text ? JSON.parse(text) : null};
        }""",
        [method, path, body, headers or {}],
    )

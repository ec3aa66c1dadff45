"""The overview's meters tell the truth (issue 38): a key budget smaller than one request's reservation says
"refusing requests" while its spend stays at $0.00, with the tiny amount shown as it is; the plan's limits
come with this minute's use. And the app itself: a full reload asks for every module at once (each one the app
imports is preloaded), and a failed read is retried, or offered again with a Retry button."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import openai
import pytest

from tests.web.browser import Contexts, expect, open_route, screenshot, settle
from tests.web.web_gateway import MODEL, WebGateway

if TYPE_CHECKING:
    from playwright.sync_api import Route


def refused_status(gateway: WebGateway, secret: str) -> int:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
    return refused.value.status_code


def test_a_key_budget_below_one_reservation_shows_refusing_requests_with_nothing_spent(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("meters")
    key = gateway.create_key(owner, "tiny-budget")
    budget = {"amountMicros": 50, "period": "day"}  # $0.00005; a request reserves $0.25
    rule = {
        "subjectType": "key",
        "subjectId": key["id"],
        "effect": "allow",
        "models": ["*"],
        "budget": budget,
    }
    gateway.api("POST", "/policy-rules", owner, rule)
    assert refused_status(gateway, key["secret"]) == 402

    page = open_route(contexts.signed_in(owner).new_page(), "overview", "Overview")
    bar = page.get_by_role("progressbar", name=re.compile("Key tiny-budget"))
    meter = page.locator(".meter").filter(has=bar)

    expect(meter).to_contain_text("$0.00 of $0.00005 this day (UTC)")
    expect(meter).to_contain_text("$0.00 held by requests in flight")
    expect(meter).to_contain_text("0% used · refusing requests")
    expect(meter.locator(".meter-warning")).to_contain_text(
        "Refusing requests: $0.00005 is left, less than the $0.25 the last request reserved"
    )
    expect(bar).to_have_attribute("aria-valuetext", "0% used, refusing requests")
    screenshot(page, "overview-refusing-budget")


def test_the_overview_shows_the_plans_limits_and_this_minutes_use(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("limits")
    gateway.operator(
        f"/organizations/{owner.organization_id}/plan", {"planCode": "tight"}
    )  # 1 request a minute
    key = gateway.create_key(owner, "limited")
    gateway.chat(key["secret"])

    page = open_route(contexts.signed_in(owner).new_page(), "overview", "Overview")
    limits = page.get_by_role("region", name="Plan limits")
    requests = limits.locator(".stat").filter(has_text="Requests this minute")
    tokens = limits.locator(".stat").filter(has_text="Tokens this minute")

    expect(requests.locator(".stat-value")).to_have_text("1 of 1")
    expect(requests).to_contain_text("Plan tight: 1 requests per minute")
    expect(tokens.locator(".stat-value")).to_have_text("No limit")
    expect(limits.locator(".stat").filter(has_text="Credit limit").locator(".stat-value")).to_have_text(
        "None"
    )


def test_a_full_reload_preloads_every_module_the_app_imports(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("preload")
    page = contexts.signed_in(owner).new_page()
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url) if request.url.endswith(".js") else None)

    open_route(page, "overview", "Overview")
    fetched.clear()
    page.reload()
    settle(page, "Overview")
    preloaded = page.eval_on_selector_all(
        "link[rel=modulepreload]", "(links) => links.map((link) => new URL(link.href).pathname)"
    )
    modules = {re.sub(r"^https?://[^/]+", "", url) for url in fetched}

    assert "/assets/app.js" in modules
    assert len(modules) > 15  # the pages and their helpers, not just the entry
    assert modules - {"/assets/app.js"} == set(preloaded), "modules the app imports without a preload link"


def test_a_read_that_fails_on_the_way_is_retried(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("retry")
    page = contexts.signed_in(owner).new_page()
    attempts: list[str] = []

    def flaky(route: Route) -> None:
        attempts.append(route.request.method)
        if len(attempts) <= 2:
            route.fulfill(
                status=503, content_type="application/json", body='{"error": "briefly unavailable"}'
            )
        else:
            route.continue_()

    page.route("**/api/overview", flaky)
    open_route(page, "overview", "Overview")

    expect(page.get_by_role("region", name="Plan limits")).to_be_visible()
    assert attempts == ["GET", "GET", "GET"]


def test_a_page_that_cannot_load_says_why_and_offers_a_retry(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("retry-button")
    page = contexts.signed_in(owner).new_page()
    page.route("**/api/overview", lambda route: route.abort("connectionrefused"))

    page.goto("/#/overview")
    error = page.get_by_role("alert").filter(has_text="This page could not be loaded")
    expect(error).to_contain_text("The server cannot be reached")
    retry = error.get_by_role("button", name="Retry")
    page.unroute("**/api/overview")
    retry.click()

    expect(page.get_by_role("region", name="Plan limits")).to_be_visible()
    expect(page.get_by_role("alert").filter(has_text="This page could not be loaded")).to_have_count(0)

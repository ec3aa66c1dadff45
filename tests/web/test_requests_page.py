"""The requests page: real model API requests, served and refused, listed one by one; the filters narrow them
(and stay in the address), the CSV link downloads exactly the filtered rows, a row opens in detail. The usage
page splits refused requests from served ones, has quick ranges, and keeps its form on a bad date."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import openai
import pytest

from tests.web.browser import Contexts, expect, labelled, open_route, settle
from tests.web.web_gateway import WebGateway, eventually


def test_requests_filters_csv_and_detail(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.funded("requests")
    alpha = gateway.create_key(owner, "alpha")
    beta = gateway.create_key(owner, "beta")
    # One request a minute for beta: its second request is refused with 429.
    rule = {"subjectType": "key", "subjectId": beta["id"], "effect": "allow", "models": ["*"], "rpm": 1}
    gateway.api("POST", "/policy-rules", owner, rule)
    gateway.chat_when_ready(alpha["secret"])
    gateway.chat(alpha["secret"])
    gateway.chat_when_ready(beta["secret"])
    with pytest.raises(openai.RateLimitError):
        gateway.chat(beta["secret"])
    eventually(lambda: len(gateway.api("GET", "/requests", owner)["requests"]) == 4, within=10)

    page = contexts.signed_in(owner).new_page()
    open_route(page, "requests", "Requests")
    rows = page.locator("#page tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.filter(has_text="429")).to_have_count(1)

    page.get_by_label(labelled("API key")).select_option(label="beta")
    page.get_by_label(labelled("Status")).fill("429")
    page.get_by_role("button", name="Apply filters").click()
    settle(page, "Requests")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("beta")
    expect(rows.first).to_contain_text("refused")
    assert f"keyId={beta['id']}" in page.url and "status=429" in page.url

    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    text = Path(download.value.path()).read_text(encoding="utf-8")
    exported = list(csv.DictReader(io.StringIO(text)))
    assert [(r["key_alias"], r["status"], r["outcome"]) for r in exported] == [("beta", "429", "refused")]

    # A bad status is refused in the form, before any request.
    page.get_by_label(labelled("Status")).fill("abc")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_text("Enter an HTTP status from 100 to 599.")).to_be_visible()

    rows.first.get_by_role("link").click()
    settle(page, "Request")
    expect(page.locator("#page")).to_contain_text("429")
    expect(page.locator("#page")).to_contain_text(exported[0]["request_id"])


def test_usage_quick_ranges_the_refused_split_and_a_bad_date(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.funded("quick")
    key = gateway.create_key(owner, "only-one")
    rule = {"subjectType": "key", "subjectId": key["id"], "effect": "allow", "models": ["*"], "rpm": 1}
    gateway.api("POST", "/policy-rules", owner, rule)
    gateway.chat_when_ready(key["secret"])
    with pytest.raises(openai.RateLimitError):
        gateway.chat(key["secret"])
    eventually(lambda: len(gateway.api("GET", "/requests", owner)["requests"]) == 2, within=10)
    today = datetime.now(UTC).date()

    page = contexts.signed_in(owner).new_page()
    open_route(page, "usage", "Usage")
    expect(page.locator("#usage-split")).to_contain_text("1 served · 1 refused (50%)")
    for label, first in (
        ("7 days", today - timedelta(days=6)),
        ("Today", today),
        ("This month", today.replace(day=1)),
        ("30 days", today - timedelta(days=29)),
    ):
        page.get_by_role("navigation", name="Quick ranges").get_by_role("link", name=label).click()
        settle(page, "Usage")
        assert f"from={first.isoformat()}" in page.url and f"to={today.isoformat()}" in page.url, page.url
        expect(page.get_by_label(labelled("From"))).to_have_value(first.isoformat())

    page.get_by_label(labelled("API key")).select_option(label="only-one")
    page.get_by_role("button", name="Show").click()
    settle(page, "Usage")
    assert f"keyId={key['id']}" in page.url
    expect(page.locator("#usage-split")).to_contain_text("1 refused")

    # A date that does not exist: the form stays, with a warning, and the default range is shown.
    open_route(page, "usage?from=2025-02-30", "Usage")
    expect(page.get_by_text(re.compile("is not a date"))).to_be_visible()
    expect(page.get_by_role("button", name="Show")).to_be_visible()
    expect(page.get_by_label(labelled("From"))).to_have_value((today - timedelta(days=29)).isoformat())

"""The rules page shows each rule's id and marks the rule an address names (`#/rules?rule=pol_…`); the audit
log shows names beside ids, an edit as the fields it changed, links every rule id to its rule, filters by the
route as a client calls it, by actor and by days, and downloads what the filters keep as CSV."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.web.browser import Contexts, expect, labelled, open_route, settle
from tests.web.web_gateway import Account, WebGateway, eventually

if TYPE_CHECKING:
    from playwright.sync_api import Page


def _rule(gateway: WebGateway, owner: Account, **fields: Any) -> dict[str, Any]:
    body = {"subjectType": "organization", "effect": "allow", "models": ["chat"], **fields}
    return gateway.api("POST", "/policy-rules", owner, body)


def _apply(page: Page, **values: str) -> None:
    """Fill the audit filters (labels as the page writes them) and apply them."""
    for label, value in values.items():
        page.get_by_label(labelled(label), exact=True).fill(value)
    page.get_by_role("button", name="Apply filters").click()
    settle(page, "Audit log")


def _rows(page: Page) -> Any:
    return page.get_by_role("region", name="Audit entries (table)").locator("tbody tr")


def test_a_rule_edited_on_the_page_is_one_change_in_the_audit_log_whose_link_marks_the_rule(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("rule-links")
    rule = _rule(gateway, owner, description="Chat for everyone", rpm=10)
    page = open_route(contexts.signed_in(owner).new_page(), "rules", "Policy rules")

    row = page.get_by_role("row").filter(has_text="Chat for everyone")
    expect(row.get_by_role("cell").first).to_have_text(f"allow{rule['id']}")
    row.get_by_role("button", name=re.compile(r"^Edit ")).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label(labelled("Requests per minute (RPM)")).fill("25")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_have_count(0)

    open_route(page, "audit?event=policy_rule.updated", "Audit log")
    [entry] = _rows(page).all()
    expect(entry.locator(".audit-details")).to_have_text("rpm10 → 25")
    expect(entry.get_by_role("cell").nth(3)).to_have_text(f"target Chat for everyone {rule['id']}")
    entry.get_by_role("link", name=rule["id"]).click()

    settle(page, "Policy rules")
    assert page.url.endswith(f"#/rules?rule={rule['id']}")
    marked = page.locator(f"#rule-{rule['id']}")
    expect(marked).to_have_class(re.compile(r"\brule-marked\b"))
    expect(marked).to_be_focused()
    expect(marked).to_be_in_viewport()
    expect(page.locator("tr.rule-marked")).to_have_count(1)


def test_a_deleted_rules_address_says_so_and_links_its_id(contexts: Contexts, gateway: WebGateway) -> None:
    owner = gateway.register("rule-gone")
    rule = _rule(gateway, owner)
    gateway.api("DELETE", f"/policy-rules/{rule['id']}", owner)

    page = open_route(contexts.signed_in(owner).new_page(), f"rules?rule={rule['id']}", "Policy rules")

    warning = page.locator("#page .notice-warning")
    expect(warning).to_contain_text(f"No rule {rule['id']} exists in your organization")
    expect(warning.get_by_role("link", name=rule["id"])).to_have_attribute(
        "href", f"#/rules?rule={rule['id']}"
    )
    expect(page.locator("tr.rule-marked")).to_have_count(0)


def test_the_audit_page_filters_by_route_as_called_actor_and_days_and_downloads_them_as_csv(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("audit-filters")
    admin = gateway.add_member(owner, "admin")
    flag = _rule(
        gateway,
        owner,
        effect="flag",
        description="Greetings",
        content={"where": "prompt", "phrases": ["hello"]},
    )
    key = gateway.create_key(owner, "greeter-key")
    gateway.api("POST", "/systems", admin, {"name": "made-by-admin"})
    gateway.chat_when_ready(key["secret"])
    eventually(lambda: gateway.api("GET", "/audit-log?event=content_policy.flagged", owner)["entries"], 10)
    today = datetime.now(UTC).date()
    page = open_route(contexts.signed_in(owner).new_page(), "audit", "Audit log")

    _apply(page, Route="/v1/chat/completions")
    [flagged] = _rows(page).all()
    expect(flagged).to_contain_text("content_policy.flagged")
    expect(flagged.get_by_role("cell").nth(2)).to_have_text(f"API key greeter-key {key['id']}")
    expect(flagged.get_by_role("link", name=flag["id"])).to_have_attribute(
        "href", f"#/rules?rule={flag['id']}"
    )

    with page.expect_download() as download:
        page.get_by_role("link", name="Download CSV").click()
    text = Path(download.value.path()).read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["event"], r["keyName"], r["targetName"], r["route"]) for r in rows] == [
        ("content_policy.flagged", "greeter-key", "Greetings", "chat_completions")
    ]

    _apply(page, Route="", Actor=admin.email.upper())
    expect(_rows(page).filter(has_text="system.created")).to_have_count(1)
    expect(_rows(page).filter(has_text="api_key.created")).to_have_count(0)

    tomorrow = (today + timedelta(days=1)).isoformat()
    _apply(page, Actor="", From=tomorrow, To=tomorrow)
    expect(page.get_by_text("No audit entries match.")).to_be_visible()

    _apply(page, From=today.isoformat(), To=today.isoformat())
    expect(_rows(page).filter(has_text="api_key.created")).to_have_count(1)
    assert f"from={today.isoformat()}" in page.url

    _apply(page, From=today.isoformat(), To=(today - timedelta(days=1)).isoformat())
    expect(page.get_by_text("The last day comes before the first.")).to_be_visible()

"""The owner's first day in the browser: register on the free plan (its 0.00 invoice paid at once), see the
empty balance, get topped up by the operator's CLI, create a key and copy its secret, call the model with
the official `openai` SDK, find the request in the usage chart and table, revoke the key, and see the next
request refused."""

from __future__ import annotations

import re

import openai
import pytest

from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import MODEL, PASSWORD, WebGateway, eventually, unique_email

SECRET = re.compile(r"sk-[A-Za-z0-9_-]{20,}")


def test_register_pay_create_a_key_call_the_model_see_the_usage_and_revoke(
    contexts: Contexts, gateway: WebGateway
) -> None:
    context = contexts.new(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    email = unique_email("flow")

    # Register.
    open_route(page, "register", "Register")
    page.get_by_label("Organization legal name").fill("Flow Ltd")
    page.get_by_label("Your e-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create organization").click()
    settle(page, "Overview")

    # The free plan's 0.00 invoice was paid as it was opened: nothing is unpaid. The empty balance is
    # announced, with the organization id the operator needs (`modelgate billing top-up ORG_ID 5`), which
    # its button copies.
    session = page.request.get("/api/auth/session").json()
    organization_id = session["organization"]["id"]
    expect(page.locator("#page")).not_to_contain_text(re.compile("unpaid|Pay it", re.IGNORECASE))
    empty = page.locator(".notice").filter(has_text="Your balance is empty")
    expect(empty).to_be_visible()
    expect(empty.locator("code", has_text=organization_id)).to_be_visible()
    screenshot(page, "overview-empty-balance")
    empty.get_by_role("button", name="Copy organization id").click()
    assert page.evaluate("navigator.clipboard.readText()") == organization_id
    [invoice] = page.request.get("/api/invoices").json()["invoices"]
    assert (invoice["amountMicros"], invoice["status"]) == (0, "paid")

    # The operator tops the balance up with the CLI.
    assert "credited 20.00 USD" in gateway.top_up(organization_id, 20)
    page.reload()
    settle(page, "Overview")
    notices = page.locator(".notice")
    expect(notices.filter(has_text=re.compile("unpaid|empty", re.IGNORECASE))).to_have_count(0)
    expect(page.locator("#page")).to_contain_text("$20.00")

    # Create a key; its secret is shown once, with a copy button and a warning.
    open_route(page, "keys", "API keys")
    page.get_by_label(labelled("Alias")).fill("flow-app")
    page.get_by_role("button", name="Create key", exact=True).click()
    panel = page.locator(".secret-panel, .key-secret, [data-secret]").first
    expect(panel).to_contain_text(SECRET)
    expect(panel).to_contain_text(re.compile("not be shown again|shown only (once|now)", re.IGNORECASE))
    found = SECRET.search(panel.inner_text())
    assert found is not None
    secret = found.group(0)
    screenshot(page, "keys-created")
    panel.get_by_role("button", name=re.compile("copy", re.IGNORECASE)).click()
    assert page.evaluate("navigator.clipboard.readText()") == secret

    # The key works with the official SDK (once the gateway heard of the payment).
    forwarded_before = len(gateway.upstream.requests_to("/v1/chat/completions"))
    answer = gateway.chat_when_ready(secret)
    assert answer.startswith("echo: ")
    assert len(gateway.upstream.requests_to("/v1/chat/completions")) == forwarded_before + 1

    # The request shows in the usage table and chart (after the ledger flush).
    usage = eventually(lambda: page.request.get("/api/usage").json()["totals"]["requests"], within=10)
    assert usage == 1
    open_route(page, "usage", "Usage")
    page.reload()
    settle(page, "Usage")
    table = page.locator("#page table")
    expect(table.first).to_contain_text("$0.25")
    bars = page.locator("#page svg[role=img] rect.chart-bar title")
    expect(bars.filter(has_text="$0.25")).to_have_count(1)  # today's bar: one request at $0.25
    page.get_by_label(labelled("Group by")).select_option("model")
    page.get_by_role("button", name="Show", exact=True).click()
    settle(page, "Usage")
    expect(page.locator("#page table").first).to_contain_text(MODEL)
    expect(bars).to_have_text([f"{MODEL}: $0.25"])
    screenshot(page, "usage-by-model")

    # Revoke it, confirming in the dialog; the next request is refused.
    open_route(page, "keys", "API keys")
    row = page.locator("tr").filter(has_text="flow-app")
    revoke = row.get_by_role("button", name=re.compile("revoke", re.IGNORECASE))
    revoke.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("flow-app")
    page.keyboard.press("Escape")  # changing one's mind: nothing is revoked
    expect(dialog).to_have_count(0)
    expect(row).to_contain_text("active")
    assert gateway.chat(secret).startswith("echo: ")
    revoke.click()
    dialog.get_by_role("button", name=re.compile("revoke", re.IGNORECASE)).click()
    expect(page.locator("tr").filter(has_text="flow-app")).to_contain_text(
        re.compile("revoked", re.IGNORECASE)
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        gateway.chat(secret)
    assert refused.value.status_code == 401

"""Issue #38 in the browser: the model catalogue and the rule form's model picker, the keys page of an
organization with 500 keys (paged and sorted by the server, long aliases wrapping), and a key created with
its budget, rate limits and models in one form."""

from __future__ import annotations

import re

import httpx

from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import MODEL, Account, WebGateway, eventually

LONG_ALIAS = "zz-very-long-alias-without-any-space-" + "x" * 90


def _create_keys(gateway: WebGateway, owner: Account, count: int) -> None:
    """`count` keys through the API, over one connection (as a provisioning script would)."""
    with httpx.Client(base_url=f"{gateway.base_url}/api", headers=owner.bearer, timeout=30) as client:
        for n in range(count):
            reply = client.post("/organization/api-keys", json={"alias": f"bulk-{n:03d}"})
            assert reply.status_code == 201, reply.text


def test_the_models_page_lists_the_catalogue_with_prices_and_the_plans_limits(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("models")

    page = open_route(contexts.signed_in(owner).new_page(), "models", "Models")

    table = page.get_by_role("table", name="Model catalogue")
    expect(table.locator("td.model-id").get_by_text(MODEL, exact=True)).to_have_count(1)
    expect(table).to_contain_text("tokens")  # the context window
    expect(page.locator("#page")).to_contain_text("Requests per minute, per key")
    screenshot(page, "models")


def test_the_rule_form_picks_models_from_the_catalogue_and_refuses_one_that_matches_none(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("picker")
    page = open_route(contexts.signed_in(owner).new_page(), "rules", "Policy rules")
    create = page.locator("details.create-rule")

    create.get_by_label("Other model patterns").fill("chta")
    create.get_by_role("button", name="Create rule").click()

    expect(create.get_by_text('"chta" matches no model of the catalogue.')).to_be_visible()
    assert gateway.api("GET", "/policy-rules", owner)["policyRules"] == []

    create.get_by_label("Other model patterns").fill("")
    create.get_by_label(labelled("Models")).select_option([MODEL])
    create.get_by_role("button", name="Create rule").click()

    expect(page.locator("#notices")).to_contain_text("The rule was created")
    [rule] = gateway.api("GET", "/policy-rules", owner)["policyRules"]
    assert rule["models"] == [MODEL]


def test_the_rules_api_refuses_an_unknown_model_in_the_pages_error_envelope(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("picker-api")
    body = {"subjectType": "organization", "effect": "allow", "models": ["mock-chta"]}

    reply = httpx.post(f"{gateway.base_url}/api/policy-rules", json=body, headers=owner.bearer, timeout=30)

    assert reply.status_code == 400
    assert reply.json() == {
        "error": 'models[0]: the pattern "mock-chta" matches no model (see GET /api/models)'
    }


def test_the_keys_page_of_500_keys_is_paged_and_sorted_and_a_long_alias_keeps_revoke_on_screen(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("many-keys")
    _create_keys(gateway, owner, 500)
    gateway.create_key(owner, LONG_ALIAS)
    page = open_route(contexts.signed_in(owner, viewport={"width": 1280, "height": 900}).new_page(), "keys")
    settle(page, "API keys")

    position = page.locator("#key-page-position")
    expect(position).to_have_text("Keys 1\u201350 of 501")
    table = page.get_by_role("table", name=re.compile("^API keys"))
    expect(table.locator("tbody tr")).to_have_count(50)
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 12000, f"the page is {height} px high"
    screenshot(page, "keys-paged")

    page.get_by_role("button", name="Next →").click()
    expect(position).to_have_text("Keys 51\u2013100 of 501")
    page.get_by_label("Sort by").select_option(label="Alias A\u2013Z")
    expect(position).to_have_text("Keys 1\u201350 of 501")
    expect(table.locator("tbody tr").first).to_contain_text("bulk-000")
    assert "sort=alias" in page.url

    page.get_by_label("Filter keys").fill("very-long-alias")
    expect(position).to_have_text("Keys 1\u20131 of 1")
    expect(page.get_by_role("navigation", name="Key pages")).to_be_hidden()
    expect(table.locator("tbody tr")).to_have_count(1)
    revoke = page.get_by_role("button", name=f"Revoke {LONG_ALIAS}")
    # Scrolled to vertically, Revoke is on screen: the alias wraps instead of widening the table.
    page.evaluate(
        "(y) => window.scrollTo(0, y)",
        revoke.evaluate("(b) => b.getBoundingClientRect().top + scrollY - 200"),
    )
    expect(revoke).to_be_in_viewport(ratio=1)
    wide = page.evaluate(
        "() => [...document.querySelectorAll('#page .table-wrap')]"
        ".some((w) => w.scrollWidth > w.clientWidth + 1)"
    )
    assert not wide


def test_a_key_created_with_a_budget_rate_limits_and_a_model_shows_them_on_the_keys_page(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("key-budget")
    page = open_route(contexts.signed_in(owner).new_page(), "keys", "API keys")

    page.get_by_label(labelled("Alias")).fill("budgeted-app")
    page.get_by_label("Budget (USD)").fill("2.5")
    page.get_by_label("Budget period").select_option("day")
    page.get_by_label("Requests per minute (RPM)").fill("30")
    page.get_by_label(labelled("Models")).select_option([MODEL])
    page.get_by_role("button", name="Create key", exact=True).click()

    expect(page.locator(".secret-panel")).to_contain_text("sk-")
    row = page.get_by_role("row").filter(has_text="budgeted-app")
    expect(row).to_contain_text("Budget $2.50 per day")
    expect(row).to_contain_text("30 RPM (key rule)")
    expect(row).to_contain_text(f"Models: {MODEL}")
    expect(row).to_contain_text("Never used")
    [rule] = gateway.api("GET", "/policy-rules", owner)["policyRules"]
    assert (rule["subjectType"], rule["models"], rule["rpm"]) == ("key", [MODEL], 30)
    assert rule["budget"] == {"amountMicros": 2_500_000, "period": "day"}

    secret = page.locator("#new-key-secret").inner_text()
    gateway.chat_when_ready(secret)
    # Last use is read from the ledger, which the gateway writes in batches.
    used = eventually(lambda: gateway.api("GET", "/key-report", owner)["keys"][0]["lastUsedAt"], within=10)
    assert used is not None
    page.reload()
    settle(page, "API keys")
    row = page.get_by_role("row").filter(has_text="budgeted-app")
    expect(row).to_contain_text(re.compile(r"Used \d"))
    screenshot(page, "keys-with-limits")


def test_a_member_creates_a_key_once_the_owner_allows_it_on_the_keys_page(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("member-keys")
    member = gateway.add_member(owner, "member")
    member_page = open_route(contexts.signed_in(member).new_page(), "keys", "API keys")
    expect(member_page.get_by_role("button", name="Create key", exact=True)).to_have_count(0)

    owner_page = open_route(contexts.signed_in(owner).new_page(), "keys", "API keys")
    owner_page.get_by_label("Members may create their own API keys").check()
    expect(owner_page.locator("#notices")).to_contain_text("Members may now create their own keys")

    member_page.reload()
    settle(member_page, "API keys")
    member_page.get_by_label(labelled("Alias")).fill("my-notebook")
    member_page.get_by_role("button", name="Create key", exact=True).click()
    expect(member_page.locator(".secret-panel")).to_contain_text("sk-")
    expect(member_page.get_by_role("row").filter(has_text="my-notebook")).to_contain_text(member.email)

"""Spend alerts in the browser: an owner creates a daily alert with a webhook on 127.0.0.1, copies the
signing secret shown once, a real request crosses the threshold, the test's HTTP server receives the
webhook with a valid signature, and the page's delivery log shows it delivered."""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.web.browser import Contexts, expect, labelled, open_route, screenshot, settle
from tests.web.web_gateway import WebGateway, eventually


class Webhooks:
    """A webhook receiver on 127.0.0.1 in a thread: records (signature header, body), answers 200."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.arrived = threading.Event()
        webhooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                webhooks.received.append((self.headers.get("modelgate-signature", ""), body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
                webhooks.arrived.set()

            def log_message(self, *_args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def webhooks() -> Iterator[Webhooks]:
    receiver = Webhooks()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def valid(secret: str, header: str, body: bytes) -> bool:
    parts = dict(item.split("=", 1) for item in header.split(","))
    digest = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(digest, parts["v1"])


def test_an_owner_creates_an_alert_and_its_webhook_arrives_signed(
    contexts: Contexts, gateway: WebGateway, webhooks: Webhooks
) -> None:
    owner = gateway.funded("alerts")
    page = contexts.signed_in(owner).new_page()

    open_route(page, "alerts", "Alerts")
    page.get_by_label(labelled("Webhook URL")).fill(webhooks.url)
    page.get_by_label(labelled("Amount a day (USD)")).fill("0.10")
    page.get_by_role("button", name="Create alert").click()
    secret = page.locator("#alert-signing-secret").inner_text()
    assert secret.startswith("whsec_")
    expect(page.locator("#page")).to_contain_text("$0.10 a day for the organization")
    page.get_by_role("button", name="I have stored the secret").click()
    expect(page.locator("#alert-signing-secret")).to_have_count(0)

    # One request ($0.25) crosses the threshold; the watcher calls the webhook once for the day.
    key = gateway.create_key(owner, "alerted")
    gateway.chat(key["secret"])
    assert webhooks.arrived.wait(30), "no webhook arrived"
    [(header, body)] = webhooks.received
    assert valid(secret, header, body)
    assert not valid("whsec_wrong", header, body)

    def delivered() -> bool:
        return gateway.api("GET", "/alerts/deliveries", owner)["deliveries"][0]["status"] == "delivered"

    assert eventually(delivered, 10)
    page.reload()
    settle(page, "Alerts")
    expect(page.locator("#page")).to_contain_text("delivered")
    screenshot(page, "alerts-delivered")

    # A bad URL is refused with the API's message, and a member has no alerts page.
    page.get_by_label(labelled("Webhook URL")).fill("ftp://127.0.0.1/hook")
    page.get_by_label(labelled("Amount a day (USD)")).fill("1")
    page.get_by_role("button", name="Create alert").click()
    expect(page.locator("#page")).to_contain_text(re.compile("http:// or https://|valid URL", re.IGNORECASE))


def test_the_form_shows_only_the_fields_of_the_kind_chosen_and_an_owner_rotates_the_secret(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.funded("alerts-form")
    page = contexts.signed_in(owner).new_page()
    open_route(page, "alerts", "Alerts")
    form = page.get_by_role("form", name="Create an alert")

    def shown() -> list[str]:
        names = ["Applies to", "System or key id", "Amount a day (USD)", "Policy rule", "Share of the budget"]
        return [name for name in names if form.get_by_label(labelled(name)).is_visible()]

    assert shown() == ["Applies to", "Amount a day (USD)"]  # an amount a day for the organization
    form.get_by_label(labelled("Applies to")).select_option("key")
    assert shown() == ["Applies to", "System or key id", "Amount a day (USD)"]
    form.get_by_label(labelled("Alert when")).select_option("budget")
    assert shown() == ["Policy rule", "Share of the budget"]
    # A budget alert without a rule is stopped in the form at that field; the hidden amount is not checked.
    form.get_by_label(labelled("Webhook URL")).fill("http://127.0.0.1:9/hook")
    form.get_by_role("button", name="Create alert").click()
    expect(form.get_by_label(labelled("Policy rule"))).to_be_focused()
    assert gateway.api("GET", "/alerts", owner)["alerts"] == []

    # Rotation: the old secret (from the first alert) is replaced by a new one, shown once.
    form.get_by_label(labelled("Alert when")).select_option("daily")
    assert shown() == ["Applies to", "System or key id", "Amount a day (USD)"]
    form.get_by_label(labelled("Applies to")).select_option("organization")
    form.get_by_label(labelled("Amount a day (USD)")).fill("5")
    form.get_by_role("button", name="Create alert").click()
    first = page.locator("#alert-signing-secret").inner_text()
    page.get_by_role("button", name="I have stored the secret").click()
    page.get_by_role("button", name="Rotate signing secret").click()
    page.get_by_role("dialog").get_by_role("button", name="Rotate").click()
    expect(page.get_by_role("heading", name="New webhook signing secret")).to_be_visible()
    rotated = page.locator("#alert-signing-secret").inner_text()
    assert rotated.startswith("whsec_") and rotated != first
    entries = gateway.api("GET", "/audit-log?event=alert.signing_secret_rotated", owner)["entries"]
    assert len(entries) == 1

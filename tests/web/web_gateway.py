"""The gateway the browser tests drive: `modelgate serve` on embedded SQLite with a priced chat model on a
fake upstream, the operator's `modelgate billing` CLI on the same storage, and organizations set up through
the cabinet API (the same endpoints the pages use)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.fakes import FakeUpstream
from tests.integration.ops.conftest import UPSTREAM_KEY, ops_toml
from tests.support.gateway import GatewayProcess, free_port
from tests.support.mail_links import link_token_from_operator_api

REPOSITORY = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery"
MODEL = "chat"
# What one chat request costs on top of its tokens, so a single request shows in the spend and usage pages.
PER_REQUEST_USD = 0.25
LINK_PAGES = {"invitation": "accept-invitation", "verify": "verify-email", "reset": "reset-password"}
OPERATOR_TOKEN = "web-tests-operator-token-0123456789"
# A plan with a fee, and how its invoices are paid: the operator's payment link and instructions.
TEAM_PLAN = "team"
TEAM_FEE_USD = 12.5
PAYMENT_LINK = "https://pay.example/checkout/{invoice_id}?amount={amount}&currency={currency}"
PAYMENT_INSTRUCTIONS = "Or transfer {amount} {currency} to IBAN DE00 1234 with the reference {invoice_id}."
_numbers = count(1)


def unique_email(prefix: str) -> str:
    """A fresh address for this test run (the gateway's storage is shared by the whole folder)."""
    return f"{prefix}-{next(_numbers)}-{time.time_ns() % 10**9}@example.com"


def gateway_toml(base_url: str, storage_url: str, upstream: FakeUpstream) -> str:
    """The ops suite's gateway (model `chat` on the fake upstream, priced per request; the free plan, and the
    team plan with a fee paid by the payment link) with SSO switched on (the public URL, and the cabinet URL
    the sign-in returns to) and the operator API."""
    server = f'public_url = "{base_url}"\noperator_token = "{OPERATOR_TOKEN}"\n'
    server += f'\n[cabinet]\ncabinet_url = "{base_url}/"\n'
    billing = f"payment_link = {PAYMENT_LINK!r}\npayment_instructions = {PAYMENT_INSTRUCTIONS!r}\n"
    billing += "alert_check_seconds = 0.2\nalert_retry_first_delay_seconds = 0.2\n"  # alerts come quickly
    plans = f'[[plans]]\ncode = "{TEAM_PLAN}"\nname = "Team"\nmonthly_fee = {TEAM_FEE_USD}\n'
    return ops_toml(
        storage_url, upstream, server=server, per_request_usd=PER_REQUEST_USD, billing=billing, plans=plans
    )


@dataclass(frozen=True, slots=True)
class Account:
    """A signed-up user: e-mail, password, the session token the API returned, and the organization."""

    email: str
    token: str
    organization_id: str
    password: str = PASSWORD

    @property
    def bearer(self) -> dict[str, str]:
        """The Authorization header an API client (not the browser) sends."""
        return {"authorization": f"Bearer {self.token}"}


class WebGateway:
    """`modelgate serve` on a free port fixed up front (its public URL is the SSO redirect base), with a fake
    upstream."""

    def __init__(self, workdir: Path) -> None:
        self.upstream = FakeUpstream("web", api_key=UPSTREAM_KEY).start()
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.config_path = workdir / "modelgate.toml"
        storage_url = f"sqlite:///{workdir / 'modelgate.db'}"
        self.config_path.write_text(gateway_toml(self.base_url, storage_url, self.upstream), encoding="utf-8")
        self.process = GatewayProcess(self.config_path, port=port, cwd=workdir)

    def start(self) -> WebGateway:
        try:
            self.process.start()
        except BaseException:
            self.upstream.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.process.terminate()
            self.process.wait(timeout=30)
        finally:
            self.process.kill()
            self.upstream.stop()

    # -- the operator ------------------------------------------------------------------------------

    def billing(self, *args: str) -> str:
        """Run `modelgate billing …` on this gateway's storage as an operator does; returns its output."""
        result = subprocess.run(
            [sys.executable, "-m", "modelgate", "billing", *args, "--config", str(self.config_path)],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"modelgate billing {' '.join(args)}: {result.stderr}"
        return result.stdout

    def top_up(self, organization_id: str, usd: float) -> str:
        """`modelgate billing top-up ORG USD`: credits the balance and activates the organization."""
        return self.billing("top-up", organization_id, f"{usd:.2f}")

    def pay_open_invoices(self, account: Account) -> list[str]:
        """`modelgate billing mark-paid` for each open invoice of the account's organization."""
        invoices = self.api("GET", "/invoices", account)["invoices"]
        paid = [row["id"] for row in invoices if row["status"] == "open"]
        for invoice_id in paid:
            self.billing("mark-paid", invoice_id)
        return paid

    # -- the cabinet API, as a script would use it ----------------------------------------------------

    def api(self, method: str, path: str, account: Account | None = None, body: Any = None) -> Any:
        """One cabinet API call with the account's Bearer token; asserts success, returns the JSON."""
        reply = httpx.request(
            method,
            f"{self.base_url}/api{path}",
            json=body,
            headers=account.bearer if account else {},
            timeout=30,
        )
        assert reply.status_code < 300, f"{method} /api{path}: {reply.status_code} {reply.text}"
        return reply.json() if reply.content else None

    def api_status(self, method: str, path: str, account: Account | None = None) -> int:
        """The HTTP status of one cabinet API call with the account's Bearer token."""
        headers = account.bearer if account else {}
        return httpx.request(method, f"{self.base_url}/api{path}", headers=headers, timeout=30).status_code

    def register(
        self, prefix: str = "owner", legal_name: str = "Acme Web Ltd", plan: str = "free"
    ) -> Account:
        """Register an organization and its owner through the API (on the free plan unless told)."""
        email = unique_email(prefix)
        body = {"legalName": legal_name, "email": email, "password": PASSWORD, "planCode": plan}
        token = self.api("POST", "/auth/register", body=body)["token"]
        session = self.api("GET", "/auth/session", Account(email, token, ""))
        return Account(email, token, session["organization"]["id"])

    def invite(self, owner: Account, role: str, email: str | None = None) -> tuple[str, str]:
        """Invite someone with a role; returns (e-mail, invitation token)."""
        email = email or unique_email(role)
        self.api("POST", "/invitations", owner, {"email": email, "role": role})
        return email, self.link_token(email, "invitation")

    def link(self, email: str, kind: str) -> str:
        """The newest `kind` link sent to `email` as the operator reads it: the page and its token."""
        return f"{self.base_url}/#/{LINK_PAGES[kind]}?token={self.link_token(email, kind)}"

    def link_token(self, email: str, kind: str) -> str:
        """The token of the newest `kind` link sent to `email`, as the operator reads it (no `[email]`)."""
        return link_token_from_operator_api(self.base_url, OPERATOR_TOKEN, email, kind)

    def add_member(self, owner: Account, role: str = "member") -> Account:
        """A user who accepted an invitation with a password (and so has a session)."""
        email, token = self.invite(owner, role)
        accepted = self.api("POST", "/invitations/accept", body={"token": token, "password": PASSWORD})
        return Account(email, accepted["token"], owner.organization_id)

    def funded(self, prefix: str = "owner") -> Account:
        """A registered organization with its invoice paid and 20 USD on account, through the operator's
        HTTP API (quicker than the CLI, which the main flow uses)."""
        owner = self.register(prefix)
        for invoice in self.api("GET", "/invoices", owner)["invoices"]:
            if invoice["status"] == "open":
                self.operator(f"/invoices/{invoice['id']}/mark-paid")
        self.operator(f"/organizations/{owner.organization_id}/top-up", {"amountMicros": 20_000_000})
        return owner

    def operator(self, path: str, body: Any = None) -> Any:
        """One call of the operator API (`/api/operator…`, the operator token)."""
        reply = httpx.post(
            f"{self.base_url}/api/operator{path}",
            json=body,
            headers={"authorization": f"Bearer {OPERATOR_TOKEN}"},
            timeout=30,
        )
        assert reply.status_code < 300, f"/api/operator{path}: {reply.status_code} {reply.text}"
        return reply.json()

    def create_key(self, owner: Account, alias: str) -> dict[str, Any]:
        """An API key issued through the API (id, secret, …)."""
        return self.api("POST", "/organization/api-keys", owner, {"alias": alias})

    # -- the model API, through the official SDK ----------------------------------------------------

    def chat(self, secret: str, text: str = "hello from the browser test") -> str:
        """One chat completion with the official `openai` SDK; returns the answer's text."""
        client = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=secret, max_retries=0)
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=20
        )
        return answer.choices[0].message.content or ""

    def chat_when_ready(self, secret: str, within: float = 10.0) -> str:
        """A chat once the gateway has heard of the operator's payment (the CLI tells it asynchronously)."""
        return eventually(lambda: self.chat(secret), within, retry_on=(openai.APIStatusError,))


def eventually(
    probe: Callable[[], Any], within: float, retry_on: tuple[type[BaseException], ...] = ()
) -> Any:
    """`probe()` until it returns something truthy without raising one of `retry_on`; bounded by `within`."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = probe()
        except retry_on:
            if time.monotonic() >= deadline:
                raise
        else:
            if result or time.monotonic() >= deadline:
                return result
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline

"""Names and e-mails the cabinet shows to people refuse characters that disguise what a reader sees
(bidirectional overrides, zero-width and other invisible characters), and are stored in NFC form.

The check is made on the request, before storage, so the character matrix runs on SQLite only; the NFC
uniqueness test runs on both backends (in test_api_keys.py)."""

from __future__ import annotations

import pytest

from tests.integration.cabinet.cabinet_client import PASSWORD, Cabinet, unique_email

DISGUISING = {
    "LRE": "\u202a",
    "RLE": "\u202b",
    "PDF": "\u202c",
    "LRO": "\u202d",
    "RLO": "\u202e",
    "LRI": "\u2066",
    "RLI": "\u2067",
    "FSI": "\u2068",
    "PDI": "\u2069",
    "LRM": "\u200e",
    "RLM": "\u200f",
    "ALM": "\u061c",
    "ZWSP": "\u200b",
    "ZWNJ": "\u200c",
    "ZWJ": "\u200d",
    "WJ": "\u2060",
    "BOM": "\ufeff",
    "soft hyphen": "\u00ad",
    "tag A": "\U000e0041",
    "line separator": "\u2028",
    "Hangul filler": "\u3164",
    "private use": "\ue000",
}
CHARACTERS = pytest.mark.parametrize("char", DISGUISING.values(), ids=DISGUISING.keys())


@pytest.fixture
def storage_url(tmp_path) -> str:
    """SQLite only: the refusal happens before anything reaches storage."""
    return f"sqlite:///{tmp_path / 'modelgate.db'}"


def _refused(field: str, char: str) -> dict[str, str]:
    return {"error": f"{field} must not contain invisible or text-direction characters (U+{ord(char):04X})"}


@CHARACTERS
async def test_registration_refuses_them_in_the_legal_name_and_the_email(cabinet: Cabinet, char: str) -> None:
    def body(legal_name: str, email: str) -> dict[str, str]:
        return {"legalName": legal_name, "email": email, "password": PASSWORD, "planCode": "pro"}

    in_name = await cabinet.call("POST", "/auth/register", json=body(f"Acme{char} Ltd", unique_email()))
    in_email = await cabinet.call("POST", "/auth/register", json=body("Acme Ltd", f"ad{char}min@example.com"))

    assert (in_name.status, in_name.body) == (400, _refused("legalName", char))
    assert (in_email.status, in_email.body) == (400, _refused("email", char))
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM organizations") == 0


@CHARACTERS
async def test_names_aliases_and_invited_emails_refuse_them(cabinet: Cabinet, char: str) -> None:
    owner = await cabinet.register()
    spoof = f"prod{char}-key"

    alias = await cabinet.create_key(owner, spoof)
    system = await cabinet.create_system(owner, spoof)
    description = await cabinet.create_system(owner, "fine", description=spoof)
    management_key = await cabinet.create_management_key(owner, spoof)
    invitation = await cabinet.invite(owner, "member", f"bob{char}@example.com")
    owner_email = await cabinet.create_key(owner, "ok", ownerEmail=f"{char}{owner.email}")
    provider = await cabinet.call(
        "POST",
        "/auth/oidc/providers",
        token=owner.token,
        json={
            "name": spoof,
            "issuer": "https://idp.example.com",
            "clientId": "modelgate",
            "clientSecret": "secret",
            "allowedDomains": ["example.com"],
        },
    )

    assert (alias.status, alias.body) == (400, _refused("alias", char))
    assert (system.status, system.body) == (400, _refused("name", char))
    assert (description.status, description.body) == (400, _refused("description", char))
    assert (management_key.status, management_key.body) == (400, _refused("name", char))
    assert (invitation.status, invitation.body) == (400, _refused("email", char))
    assert (owner_email.status, owner_email.body) == (400, _refused("ownerEmail", char))
    assert (provider.status, provider.body) == (400, _refused("name", char))


async def test_a_renamed_system_refuses_them_too(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    system = (await cabinet.create_system(owner, "billing-bot")).body

    reply = await cabinet.call(
        "PATCH", f"/systems/{system['id']}", token=owner.token, json={"name": "billing\u202etob"}
    )

    assert (reply.status, reply.body) == (400, _refused("name", "\u202e"))


async def test_ordinary_non_latin_text_and_emoji_are_still_accepted(cabinet: Cabinet) -> None:
    owner = await cabinet.register(legal_name="שלום עולם — مرحبا")

    key = await cabinet.create_key(owner, "ключ-🔑-鍵")
    system = await cabinet.create_system(owner, "Ассистент 助手 🤖")

    assert (key.status, system.status) == (201, 201)

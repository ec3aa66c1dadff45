"""Auth: the model API takes `Authorization: Bearer sk-…` or `x-api-key: sk-…` of an active key; else 401."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import AuthenticationFailed, AuthenticationFailedEnvelopeA
from modelgate.domain.tokens import hash_token, new_management_key_secret
from modelgate.plugins.auth import Auth
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, context_before, run_hook


async def test_a_bearer_key_records_its_key_on_the_context(services: PluginServices, key: StoredKey) -> None:
    ctx = await context_before(
        "auth", services, payload=CHAT, headers={"Authorization": f"Bearer {key.secret}"}
    )

    await run_hook(Auth(services.keys).on_request(ctx))

    assert ctx.key == key.record
    assert ctx.key.plan_code == "free"


async def test_an_x_api_key_header_is_accepted_too(services: PluginServices, key: StoredKey) -> None:
    ctx = await context_before("auth", services, payload=CHAT, headers={"x-api-key": key.secret})

    await run_hook(Auth(services.keys).on_request(ctx))

    assert ctx.key.id == key.record.id


async def test_a_request_without_a_key_is_401_saying_how_to_send_one(services: PluginServices) -> None:
    ctx = await context_before("auth", services, payload=CHAT)

    with pytest.raises(AuthenticationFailed) as caught:
        await run_hook(Auth(services.keys).on_request(ctx))

    assert (caught.value.status, caught.value.type_b) == (401, "authentication_error")
    assert "didn't provide an API key" in caught.value.message
    assert ctx.key is None


@pytest.mark.parametrize(
    "presented",
    ["Bearer sk-unknown-key-0123456789", "Basic c2stZm9vOmJhcg==", f"Bearer {new_management_key_secret()}"],
    ids=["unknown key", "other scheme", "management key"],
)
async def test_a_key_that_is_no_model_key_is_401_incorrect(services: PluginServices, presented: str) -> None:
    ctx = await context_before("auth", services, payload=CHAT, headers={"Authorization": presented})

    with pytest.raises(AuthenticationFailed):
        await run_hook(Auth(services.keys).on_request(ctx))

    assert ctx.key is None


async def test_a_revoked_key_is_rejected_on_the_next_request(
    services: PluginServices, key: StoredKey
) -> None:
    async with services.db.transaction() as tx:  # as the cabinet revokes: status, then the directory's sink
        await tx.execute("UPDATE api_keys SET status = 'revoked' WHERE id = $1", key.record.id)
        await services.keys.key_revoked(hash_token(key.secret), tx)
    ctx = await context_before(
        "auth", services, payload=CHAT, headers={"Authorization": f"Bearer {key.secret}"}
    )

    with pytest.raises(AuthenticationFailed, match="Incorrect API key"):
        await run_hook(Auth(services.keys).on_request(ctx))


async def test_a_wrong_key_on_the_model_list_stays_in_envelope_a(services: PluginServices) -> None:
    ctx = await context_before(
        "auth",
        services,
        method="GET",
        path="/v1/models",
        headers={"x-api-key": "sk-unknown-key-0123456789", "anthropic-version": "2023-06-01"},
    )

    with pytest.raises(AuthenticationFailedEnvelopeA) as caught:
        await run_hook(Auth(services.keys).on_request(ctx))

    assert caught.value.always_envelope_a


async def test_a_key_served_from_the_cache_is_rejected_right_after_its_revocation(
    services: PluginServices, key: StoredKey
) -> None:
    headers = {"Authorization": f"Bearer {key.secret}"}
    auth = Auth(services.keys)
    await run_hook(auth.on_request(await context_before("auth", services, payload=CHAT, headers=headers)))
    cached = await context_before("auth", services, payload=CHAT, headers=headers)
    assert auth.on_request(cached) is None  # known now: resolved without waiting for the database
    assert cached.key == key.record
    async with services.db.transaction() as tx:
        await tx.execute("UPDATE api_keys SET status = 'revoked' WHERE id = $1", key.record.id)
        await services.keys.key_revoked(hash_token(key.secret), tx)
    ctx = await context_before("auth", services, payload=CHAT, headers=headers)

    with pytest.raises(AuthenticationFailed, match="Incorrect API key"):
        await run_hook(auth.on_request(ctx))
    assert ctx.key is None

"""Realtime credentials: a realtime connect claims a fresh client secret minted by its own key."""

from __future__ import annotations

import time

import pytest

from modelgate.domain.errors import InvalidRealtimeCredential, RequestInProgress
from modelgate.plugins.realtime_credentials import RealtimeCredentials
from modelgate.proxy.realtime.secrets import ClientSecret, InProcessSecrets
from tests.support.plugin_context import PluginServices, StoredKey, add_key, context_before, run_hook

SECRET = "ek_test_0123456789abcdef"


async def _minted(key: StoredKey, model: str = "gpt-test") -> InProcessSecrets:
    secrets = InProcessSecrets()
    record = key.record
    await secrets.mint(
        SECRET,
        ClientSecret(record.id, record.organization_id, model, {"voice": "alloy"}, int(time.time()) + 60),
    )
    return secrets


async def _connect(services: PluginServices, key: StoredKey, query: str):
    path = f"/v1/realtime?{query}" if query else "/v1/realtime"
    return await context_before("realtime_credentials", services, method="GET", path=path, key=key.record)


async def test_a_fresh_secret_is_claimed_and_names_the_model(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _connect(services, key, f"client_secret={SECRET}&model=gpt-test")

    await run_hook(RealtimeCredentials(await _minted(key)).on_request(ctx))

    assert ctx.realtime.value == SECRET
    assert ctx.realtime.secret.session == {"voice": "alloy"}
    assert not ctx.realtime.established
    assert ctx.payload == {"model": "gpt-test"}  # what model routing routes on


async def test_a_connect_without_a_secret_is_404_invalid_realtime_credential(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _connect(services, key, "model=gpt-test")

    with pytest.raises(InvalidRealtimeCredential) as caught:
        await run_hook(RealtimeCredentials(await _minted(key)).on_request(ctx))

    assert (caught.value.status, caught.value.code) == (404, "invalid_realtime_credential")


@pytest.mark.parametrize("query", [f"client_secret={SECRET}&model=openai-only", "client_secret=ek_unknown"])
async def test_a_secret_for_another_model_or_unknown_is_404(
    services: PluginServices, key: StoredKey, query: str
) -> None:
    ctx = await _connect(services, key, query)

    with pytest.raises(InvalidRealtimeCredential):
        await run_hook(RealtimeCredentials(await _minted(key)).on_request(ctx))

    assert ctx.realtime is None


async def test_another_keys_secret_is_404(services: PluginServices, key: StoredKey) -> None:
    secrets = await _minted(key)
    ctx = await _connect(services, await add_key(services), f"client_secret={SECRET}")

    with pytest.raises(InvalidRealtimeCredential):
        await run_hook(RealtimeCredentials(secrets).on_request(ctx))


async def test_a_second_connect_while_the_first_is_established_is_409(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = RealtimeCredentials(await _minted(key))
    await run_hook(plugin.on_request(await _connect(services, key, f"client_secret={SECRET}")))

    with pytest.raises(RequestInProgress) as caught:
        await run_hook(plugin.on_request(await _connect(services, key, f"client_secret={SECRET}")))

    assert caught.value.status == 409


async def test_a_claim_whose_session_never_opened_is_released_on_completion(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = RealtimeCredentials(await _minted(key))
    first = await _connect(services, key, f"client_secret={SECRET}")
    await run_hook(plugin.on_request(first))
    await run_hook(plugin.on_complete(first))
    retry = await _connect(services, key, f"client_secret={SECRET}")

    await run_hook(plugin.on_request(retry))

    assert retry.realtime is not None


async def test_minting_reads_the_model_from_the_session_object(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before(
        "realtime_credentials",
        services,
        path="/v1/realtime/client_secrets",
        payload={"session": {"type": "realtime", "model": "gpt-test"}},
        key=key.record,
    )

    await run_hook(RealtimeCredentials(InProcessSecrets()).on_request(ctx))

    assert ctx.payload["model"] == "gpt-test"
    assert ctx.realtime is None

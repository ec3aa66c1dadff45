"""Request ids: a client's `x-request-id` is claimed per organization while its request is in flight."""

from __future__ import annotations

import pytest

from modelgate.domain.counters import InProcessCounters
from modelgate.domain.errors import RequestInProgress
from modelgate.plugins.admission import pending
from modelgate.plugins.request_id import InFlightIds, RequestId, SharedRequestId, shared_claim_key
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, add_key, context_before


async def _with_id(services: PluginServices, key: StoredKey, request_id: str | None):
    headers = {"x-request-id": request_id} if request_id else {}
    return await context_before("request_id", services, payload=CHAT, key=key.record, headers=headers)


async def test_a_request_without_a_client_id_claims_nothing(services: PluginServices, key: StoredKey) -> None:
    ctx = await _with_id(services, key, None)

    RequestId(InFlightIds()).on_request(ctx)

    assert not ctx.admission.claimed_request_id
    assert not ctx.admission.asked


async def test_a_second_request_with_an_id_in_flight_is_409_request_in_progress(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = RequestId(InFlightIds())
    first, second = await _with_id(services, key, "job-42"), await _with_id(services, key, "job-42")
    plugin.on_request(first)

    with pytest.raises(RequestInProgress) as caught:
        plugin.on_request(second)

    assert (caught.value.status, caught.value.code) == (409, "request_in_progress")
    assert first.admission.claimed_request_id and not second.admission.claimed_request_id


async def test_the_id_is_free_again_once_its_request_completed(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = RequestId(InFlightIds())
    first = await _with_id(services, key, "job-42")
    plugin.on_request(first)
    plugin.on_complete(first)
    again = await _with_id(services, key, "job-42")

    plugin.on_request(again)

    assert again.admission.claimed_request_id


async def test_another_organization_may_use_the_same_id_at_once(
    services: PluginServices, key: StoredKey
) -> None:
    other = await add_key(services)
    plugin = RequestId(InFlightIds())
    plugin.on_request(await _with_id(services, key, "job-42"))
    theirs = await _with_id(services, other, "job-42")

    plugin.on_request(theirs)

    assert theirs.admission.claimed_request_id


async def test_the_shared_variant_records_the_claim_for_the_admission_step(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _with_id(services, key, "job-42")

    SharedRequestId(InFlightIds(), InProcessCounters()).on_request(ctx)

    assert pending(ctx).claim == shared_claim_key(key.record.organization_id, "job-42")
    assert not pending(ctx).taken  # taken by the admission step, not here

"""The context a stored response or a conversation carried is remembered with its binding, on both storage
backends: what a follow-up's reservation counts (docs/billing.md)."""

from __future__ import annotations

from modelgate.proxy.state.objects import ObjectBinding, ObjectStore
from modelgate.storage import Database


async def test_a_responses_context_is_stored_after_its_binding_and_read_by_another_process(
    db: Database,
) -> None:
    store = ObjectStore(db)
    store.remember(ObjectBinding("resp_1", "org_a", "response", "m", "row"))
    store.remember_context("resp_1", 10_000)  # known at its end, while the binding's INSERT may still run
    await store.drain()

    assert (await store.find("resp_1", "org_a", "response")).context_tokens == 10_000
    fresh = ObjectStore(db)  # another process: from the database
    assert (await fresh.find("resp_1", "org_a", "response")).context_tokens == 10_000


async def test_a_conversations_context_moves_with_each_response_but_only_for_its_organization(
    db: Database,
) -> None:
    store = ObjectStore(db)
    store.remember_conversation(ObjectBinding("conv_1", "org_a", "conversation", "m", "row", 5_000))
    await store.drain()
    store.remember_conversation(ObjectBinding("conv_1", "org_a", "conversation", "m", "row", 9_000))
    await store.drain()
    # Another organization naming the same id cannot lower (or raise) what org_a's next request reserves.
    store.remember_conversation(ObjectBinding("conv_1", "org_b", "conversation", "m", "row", 1))
    await store.drain()

    for reader in (store, ObjectStore(db)):
        assert (await reader.find("conv_1", "org_a", "conversation")).context_tokens == 9_000
        assert await reader.find("conv_1", "org_b", "conversation") is None

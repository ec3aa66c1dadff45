"""The SDK clients the Gemini and Vertex dialect tests share: the official `openai` and `anthropic` SDKs
pointed at a module's gateway, with its GeminiFake cleared first (each test starts from a clean record)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import openai

from tests.fakes.gemini_host import GeminiFake
from tests.support.gateway import Tenant, ThreadedGateway


@contextmanager
def openai_sdk(running: tuple[ThreadedGateway, Tenant], fake: GeminiFake) -> Iterator[openai.OpenAI]:
    fake.state.clear()
    gateway, tenant = running
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


@contextmanager
def anthropic_sdk(running: tuple[ThreadedGateway, Tenant], fake: GeminiFake) -> Iterator[anthropic.Anthropic]:
    fake.state.clear()
    gateway, tenant = running
    with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk

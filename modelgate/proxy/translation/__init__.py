"""Wire-format translation between the route the client called and the kind of provider a row is on.

`translator_for(route_name, upstream_kind, native_messages)` returns None when the row speaks the route's
format natively. Importing this package registers every translator:

- `messages` on `openai` rows: Messages ⇄ chat completions (`messages_on_openai`);
- `chat_completions` on `anthropic` rows: chat completions ⇄ Messages (`chat_on_anthropic`);
- `responses` on `anthropic` rows and on OpenAI-kind hosts without the Responses API: Responses ⇄ chat
  completions (⇄ Messages) (`responses_on_chat`).
"""

from __future__ import annotations

from modelgate.proxy.translation import chat_on_anthropic, messages_on_openai, responses_on_chat
from modelgate.proxy.translation.base import StreamTranslator, Translator
from modelgate.proxy.translation.registry import register, translator_for

__all__ = [
    "StreamTranslator",
    "Translator",
    "chat_on_anthropic",
    "messages_on_openai",
    "register",
    "responses_on_chat",
    "translator_for",
]

"""The field matrix: for each route the gateway translates, what happens to every documented request field
of the client's API (the `openai` and `anthropic` SDKs' request types list them; tests/unit/
test_field_matrix.py fails when one has no entry here). docs/translation-fields.md is rendered from it
(`render_markdown`, the command is at the top of the doc), and the translators refuse with it (field_rules).

A Messages request on an OpenAI-kind row reaches Bedrock Converse and Gemini as the chat request of the
`messages → chat` matrix, which then meets that host's own matrix; a Responses request on a row that does
not speak it is the chat request of the `responses → chat` matrix, which then meets the row's chat matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from modelgate.proxy.translation.field_rules import (
    ABOVE_ONE,
    FALSE,
    NOT_EMPTY,
    NOT_TEXT_ONLY,
    NOT_ZERO,
    THINKING_ON,
    TRUE,
    Condition,
    FieldEntry,
    forwarded,
    gateway,
    not_sent,
    one_of,
    refused,
    translated,
)

LOGPROBS_INCLUDE = "message.output_text.logprobs"  # the Responses `include` value that asks for logprobs


@dataclass(frozen=True, slots=True)
class RouteMatrix:
    """One translated route: the client's API, the rows it reaches, and an entry per request field."""

    title: str
    client_api: str  # "openai-chat", "openai-responses" or "anthropic-messages": whose SDK lists the fields
    rows: str
    fields: Mapping[str, FieldEntry]
    # What happens to fields inside the top-level ones (`tools[].function.strict`), where it differs from
    # what the top-level entry says; documentation only: the translators apply them as they build.
    sub_fields: Mapping[str, FieldEntry] = field(default_factory=dict)


# Entries every chat → X route shares (what none of the three providers has).
_CHAT_NOWHERE: dict[str, FieldEntry] = {
    "stream_options": gateway(
        "`include_usage` decides whether the translated stream ends with a usage chunk"
    ),
    "logit_bias": refused("the provider takes no token biases", NOT_EMPTY),
    "top_logprobs": refused("no log probabilities are returned", NOT_ZERO),
    "store": refused("the provider keeps no stored completions", TRUE),
    "audio": refused("audio output is not translated"),
    "modalities": refused("only text answers are translated", NOT_TEXT_ONLY),
    "prediction": refused("the provider takes no predicted output"),
    "prompt_cache_key": refused("OpenAI's prompt cache routing has no counterpart"),
    "prompt_cache_retention": refused("OpenAI's prompt cache has no counterpart"),
    "prompt_cache_options": refused("OpenAI's prompt cache has no counterpart"),
    "verbosity": refused("the provider has no verbosity setting"),
    "web_search_options": refused("web search is not translated"),
    "moderation": refused("OpenAI's moderation has no counterpart"),
    "functions": refused("deprecated: send `tools`"),
    "function_call": refused("deprecated: send `tool_choice`"),
}


# Inside `messages`, what none of the three providers has a place for.
_MESSAGE_HINTS: dict[str, FieldEntry] = {
    "messages[].name": not_sent("the provider has no participant names (the turn's text is sent)"),
    "messages[].content[].image_url.detail": not_sent(
        "the provider has no detail level: the image is read at its own resolution"
    ),
}


def _tool_choice_variants(none: str, auto: str, required: str, named: str) -> dict[str, FieldEntry]:
    """A row per `tool_choice` variant (tests/unit/test_translation_sub_fields.py checks each one)."""
    return {
        "tool_choice: none": translated(none),
        "tool_choice: auto": translated(auto),
        "tool_choice: required": translated(required),
        "tool_choice: a named function": translated(named),
    }


_IMAGES_BY_URL_OR_INLINE = "image parts by URL (the provider fetches it) or as a base64 data URL"

CHAT_ON_MESSAGES = RouteMatrix(
    "chat completions → Anthropic Messages",
    "openai-chat",
    "Anthropic-kind rows: Anthropic, Claude on Bedrock (InvokeModel), Claude on Vertex (rawPredict)",
    {
        "model": translated("the row's upstream model"),
        "messages": translated(
            "`system`/`developer` → `system`; user and assistant turns (consecutive ones merged); `tool` → "
            f"`tool_result` blocks; {_IMAGES_BY_URL_OR_INLINE} → `image` blocks (by URL on Anthropic's own "
            "API only: Claude on Bedrock and Vertex takes inline bytes, so a URL there is refused and "
            "never fetched); audio and file parts refused"
        ),
        "max_completion_tokens": translated("`max_tokens` (the model's `default_max_tokens` when unset)"),
        "max_tokens": translated("`max_tokens` (when `max_completion_tokens` is unset)"),
        "temperature": translated("`temperature`, clamped to 1; refused (but 1) with `reasoning_effort`"),
        "top_p": forwarded(),
        "stop": translated("`stop_sequences`; a stop sequence ends the answer with `finish_reason: stop`"),
        "stream": forwarded("as is; the Messages events become `chat.completion.chunk`s"),
        "tools": translated(
            "function tools → `tools` (`parameters` as `input_schema`); other tool types refused"
        ),
        "tool_choice": translated(
            "`auto`, `none` as is; `required` → `any`; a named function → `{type: tool, name}`; with "
            "`reasoning_effort` only `auto` and `none` (Claude cannot be made to call a tool while it thinks)"
        ),
        "parallel_tool_calls": translated("`false` → `tool_choice.disable_parallel_tool_use`"),
        "response_format": translated(
            "`json_schema` (strict or not), `json_object` → the forced tool `json_answer` (with "
            "`reasoning_effort`: `output_config.format`); its input comes back as the message content; "
            "other types, and a schema that is not an object, refused"
        ),
        "reasoning_effort": translated(
            "`thinking` with a budget: minimal/low 1024, medium 4096, high 16384, xhigh 32768, max 65536 "
            "tokens, within `max_tokens`; `none` → no thinking. The thinking comes back as "
            "`reasoning_content`, its tokens as `completion_tokens_details.reasoning_tokens`"
        ),
        "user": translated("`metadata.user_id`"),
        "safety_identifier": translated("`metadata.user_id` (when `user` is unset)"),
        "service_tier": translated(
            "`auto` → `auto`, `default` → `standard_only`",
            one_of("auto", "default"),
            "Messages has the tiers `auto` and `standard_only` only",
        ),
        "n": refused("Messages answers one choice", ABOVE_ONE),
        "seed": refused("Messages has no seed"),
        "frequency_penalty": refused("Messages has no frequency penalty", NOT_ZERO),
        "presence_penalty": refused("Messages has no presence penalty", NOT_ZERO),
        "logprobs": refused("Messages returns no log probabilities", TRUE),
        "metadata": refused(
            "Messages keeps no stored completions to tag (only `user` is carried)", NOT_EMPTY
        ),
        **_CHAT_NOWHERE,
    },
    {
        "tools[].function.strict": not_sent(
            "the schema goes as `input_schema`; Claude's own `strict` tool use is not asked for (older "
            "Claude models and some hosts refuse it), so the call's arguments are not held to the schema"
        ),
        "response_format.json_schema.strict": not_sent(
            "the forced answer tool carries the schema either way (not held to it token by token); with "
            "`reasoning_effort` it is `output_config.format`, which is"
        ),
        **_MESSAGE_HINTS,
        **_tool_choice_variants(
            "`{type: none}`",
            "`{type: auto}`",
            "`{type: any}`",
            "`{type: tool, name}`",
        ),
    },
)

CHAT_ON_CONVERSE = RouteMatrix(
    "chat completions → Bedrock Converse",
    "openai-chat",
    'OpenAI-kind rows on a Bedrock host (`dialect = "bedrock"`)',
    {
        "model": translated("the model id in the path"),
        "messages": translated(
            "`system`/`developer` → `system`; turns of `text` and `image` blocks (a base64 data URL only: an "
            "image URL is refused, the gateway fetches nothing); tool calls and results → `toolUse`, "
            "`toolResult`; audio and file parts refused"
        ),
        "max_completion_tokens": translated("`inferenceConfig.maxTokens`"),
        "max_tokens": translated("`inferenceConfig.maxTokens` (when `max_completion_tokens` is unset)"),
        "temperature": translated("`inferenceConfig.temperature`"),
        "top_p": translated("`inferenceConfig.topP`"),
        "stop": translated(
            "`inferenceConfig.stopSequences`; a Converse `stop_sequence` ends the answer with "
            "`finish_reason: stop` and reaches a Messages client as `stop_reason: stop_sequence`"
        ),
        "stream": translated("`converse-stream`; its events become `chat.completion.chunk`s"),
        "tools": translated("`toolConfig.tools` (`toolSpec`); other tool types refused"),
        "tool_choice": translated(
            "`auto` → `{auto}`, `required` → `{any}`, a named function → `{tool}`; `none` → no `toolConfig` "
            "(Converse has no `none`) unless the conversation already holds tool calls"
        ),
        "parallel_tool_calls": refused("Converse cannot turn parallel tool calls off", FALSE),
        "response_format": translated(
            "`json_schema` (strict or not), `json_object` → the forced tool `json_answer`; its input comes "
            "back as the message content"
        ),
        "reasoning_effort": translated(
            "Claude models: `additionalModelRequestFields.thinking` with the budget of the Messages route; "
            "other models refused. Reasoning comes back as `reasoning_content`"
        ),
        "user": translated("`requestMetadata.user`"),
        "safety_identifier": translated("`requestMetadata.safety_identifier`"),
        "metadata": translated("`requestMetadata` (string pairs, as Converse takes them)"),
        "service_tier": refused("Converse's service tiers are not translated", one_of("auto", "default")),
        "n": refused("Converse answers one choice", ABOVE_ONE),
        "seed": refused("Converse has no seed"),
        "frequency_penalty": refused("Converse has no frequency penalty", NOT_ZERO),
        "presence_penalty": refused("Converse has no presence penalty", NOT_ZERO),
        "logprobs": refused("Converse returns no log probabilities", TRUE),
        **_CHAT_NOWHERE,
    },
    {
        "tools[].function.strict": not_sent(
            "the schema goes as `toolSpec.inputSchema`; Converse has no strict mode for it"
        ),
        "response_format.json_schema.strict": not_sent(
            "the forced answer tool carries the schema either way (not held to it token by token)"
        ),
        **_MESSAGE_HINTS,
        **_tool_choice_variants(
            "no `toolConfig` (Converse has no `none`); when the conversation holds tool calls, Converse "
            "needs the tools to read them: they go without a `toolChoice`, and the model may call one",
            "`toolChoice: {auto}`",
            "`toolChoice: {any}`",
            "`toolChoice: {tool: {name}}`",
        ),
    },
)

CHAT_ON_GEMINI = RouteMatrix(
    "chat completions → Gemini generateContent",
    "openai-chat",
    "OpenAI-kind rows on a Gemini API host or Gemini on a Vertex host",
    {
        "model": translated("the model in the path"),
        "messages": translated(
            "`system`/`developer` → `systemInstruction`; turns → `contents` (`user`, `model`); "
            f"{_IMAGES_BY_URL_OR_INLINE} (`fileData`, `inlineData`); `input_audio` and file data → "
            "`inlineData`; tool calls and results → `functionCall`, `functionResponse`"
        ),
        "max_completion_tokens": translated("`generationConfig.maxOutputTokens`"),
        "max_tokens": translated(
            "`generationConfig.maxOutputTokens` (when `max_completion_tokens` is unset)"
        ),
        "temperature": translated("`generationConfig.temperature`"),
        "top_p": translated("`generationConfig.topP`"),
        "n": translated("`generationConfig.candidateCount`"),
        "seed": translated("`generationConfig.seed`"),
        "presence_penalty": translated("`generationConfig.presencePenalty`"),
        "frequency_penalty": translated("`generationConfig.frequencyPenalty`"),
        "stop": translated("`generationConfig.stopSequences`"),
        "stream": translated("`streamGenerateContent?alt=sse`; its events become `chat.completion.chunk`s"),
        "tools": translated(
            "`functionDeclarations` (schemas cut to Gemini's subset); other tool types refused"
        ),
        "tool_choice": translated(
            "`functionCallingConfig.mode`: `auto` → AUTO, `none` → NONE, `required` → ANY, a named function "
            "→ ANY with `allowedFunctionNames`"
        ),
        "parallel_tool_calls": refused("Gemini cannot turn parallel function calls off", FALSE),
        "response_format": translated(
            "`json_object` → `responseMimeType: application/json`; `json_schema` → that and `responseSchema`"
            " (cut to Gemini's subset)"
        ),
        "reasoning_effort": translated(
            "`thinkingConfig`: Gemini 3 `thinkingLevel` (minimal/low → low, others high); earlier models "
            "`thinkingBudget` (none 0, minimal/low 1024, medium 8192, high and above 24576); the thought "
            "summary comes back as `reasoning_content`"
        ),
        "user": not_sent("Gemini has no end-user field (an abuse-monitoring hint; the answer is the same)"),
        "safety_identifier": not_sent("Gemini has no end-user field (as `user`)"),
        "metadata": refused("Gemini keeps no stored completions to tag", NOT_EMPTY),
        "service_tier": refused("Gemini's service tiers are not translated", one_of("auto", "default")),
        **_CHAT_NOWHERE,
        "logprobs": translated(
            "`generationConfig.responseLogprobs`; each candidate's `logprobsResult` comes back as the "
            "choice's `logprobs.content` (token, logprob, bytes), streamed with the chunk it came in"
        ),
        "top_logprobs": translated(
            "`generationConfig.logprobs` (with `logprobs`: true); Gemini's `topCandidates` of each step "
            "come back as `top_logprobs`"
        ),
    },
    {
        "tools[].function.strict": not_sent(
            "Gemini's function declarations have no strict mode (cut with the other keywords it refuses)"
        ),
        "response_format.json_schema.strict": not_sent(
            "`responseSchema` is Gemini's own constrained output: the answer follows the schema either way"
        ),
        **_MESSAGE_HINTS,
        **_tool_choice_variants(
            "`functionCallingConfig.mode: NONE`",
            "`functionCallingConfig.mode: AUTO`",
            "`functionCallingConfig.mode: ANY`",
            "`mode: ANY` with `allowedFunctionNames: [name]`",
        ),
    },
)

MESSAGES_ON_CHAT = RouteMatrix(
    "Anthropic Messages → chat completions",
    "anthropic-messages",
    "OpenAI-kind rows (OpenAI, Azure, compatible clouds; Bedrock Converse and Gemini then apply their own "
    "matrix to the chat request)",
    {
        "model": translated("the row's upstream model"),
        "max_tokens": translated("`max_completion_tokens`"),
        "messages": translated(
            "text, `image` (base64 → data URL, url as is), `tool_use` → `tool_calls`, `tool_result` → `tool`"
            " messages (their images follow as a user message); thinking blocks of earlier native turns are "
            "left out (chat has no place for them); other block types refused"
        ),
        "system": translated("a `system` message (text blocks joined)"),
        "stop_sequences": translated(
            "`stop`; a matched stop sequence comes back as `stop_reason: stop_sequence`"
        ),
        "stream": translated("`stream` with `stream_options.include_usage`; chunks become Messages events"),
        "temperature": forwarded(),
        "top_p": forwarded(),
        "top_k": refused("chat has no top_k"),
        "tools": translated("custom tools → function tools; server tools refused"),
        "tool_choice": translated(
            "`auto`, `none` as is; `any` → `required`; `tool` → a named function; "
            "`disable_parallel_tool_use` → `parallel_tool_calls: false`"
        ),
        "metadata": translated("`user_id` → `user`"),
        "output_config": translated(
            "`format` (json_schema) → `response_format` json_schema, strict; `effort` → `reasoning_effort`"
        ),
        "service_tier": translated(
            "`auto` → `auto`, `standard_only` → `default`",
            one_of("auto", "standard_only"),
            "unknown tier",
        ),
        "thinking": refused(
            "extended thinking: the request keeps only native rows (none left: 400)", THINKING_ON
        ),
        "cache_control": refused("prompt caching: the request keeps only native rows (none left: 400)"),
        "container": refused("containers are a native feature"),
        "diagnostics": refused("diagnostics are a native feature"),
        "inference_geo": refused("inference geography is a native feature"),
        "speed": refused("fast mode is a native feature", one_of("standard")),
        "user_profile_id": refused("user profiles are a native feature"),
        "workspace_id": refused("workspaces are a native feature"),
    },
)

RESPONSES_ON_CHAT = RouteMatrix(
    "Responses → chat completions",
    "openai-responses",
    "Anthropic-kind rows, and OpenAI-kind rows on a Bedrock, Gemini or Vertex host (hosts that take chat "
    "completions only; OpenAI, Azure and compatible clouds get the request as written). The chat request "
    "then meets the row's chat table above; the answer comes back as a Response (`message` items with "
    "`output_text`, `function_call` and `reasoning` items, `usage` with cached and reasoning tokens, "
    "`status` `incomplete` on `max_output_tokens` or `content_filter`), streamed as the Responses events",
    {
        "model": translated("the row's upstream model"),
        "input": translated(
            "a string → a user message; `message` items (`user`, `assistant`, `system`, `developer`) → chat "
            "messages, their `input_text`, `input_image` (URL or data URL; by `file_id` refused), "
            "`input_file` (inline `file_data`; by id or URL refused) and `input_audio` parts → chat parts; "
            "`function_call` → assistant `tool_calls`; `function_call_output` → `tool` messages; `reasoning` "
            "items of earlier answers left out (chat has no place for them); other item types refused"
        ),
        "instructions": translated("a `system` message before the input"),
        "max_output_tokens": translated("`max_completion_tokens`"),
        "temperature": forwarded(),
        "top_p": forwarded(),
        "parallel_tool_calls": forwarded(),
        "tools": translated(
            "function tools → chat function tools (`parameters`, `strict`); built-in tools (web search, "
            "file search, computer use, code interpreter, MCP, image generation, custom…) refused naming "
            "the tool type"
        ),
        "tool_choice": translated(
            "`auto`, `none`, `required` as is; `{type: function, name}` → a named function; other choices "
            "(allowed tools, built-in tools) refused"
        ),
        "text": translated(
            "`format` `json_schema` → `response_format` json_schema (name, schema, strict), `json_object` → "
            "json_object, `text` → none; `verbosity` → `verbosity`; the JSON comes back as the message's "
            "`output_text`, so `responses.parse` reads it"
        ),
        "reasoning": translated(
            "`effort` → `reasoning_effort`; the thinking comes back as a `reasoning` item's summary "
            "(whatever `summary` asks), its tokens as `output_tokens_details.reasoning_tokens`"
        ),
        "metadata": translated("`metadata` (the row's chat table carries it or refuses it)"),
        "user": forwarded(),
        "safety_identifier": forwarded(),
        "service_tier": forwarded("as is (the row's chat table carries it or refuses it)"),
        "stream": translated(
            "`stream` with `stream_options.include_usage`; the chunks become `response.created`, "
            "`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`, "
            "`…done`, `response.completed` with usage"
        ),
        "stream_options": not_sent("`include_obfuscation`: a translated stream carries no obfuscation"),
        "store": refused("a translated row keeps no stored responses (the answer says `store: false`)", TRUE),
        "previous_response_id": refused("a translated row keeps no stored responses to continue"),
        "conversation": refused("a translated row keeps no conversations"),
        "background": refused("a translated row runs no background responses", TRUE),
        "background_options": refused("a translated row runs no background responses"),
        "prompt": refused("stored prompts are OpenAI's"),
        "include": translated(
            "`message.output_text.logprobs` → `logprobs: true` (the row's chat table carries it or refuses "
            "it); the chat `logprobs` come back as each `output_text`'s and each delta's `logprobs`",
            Condition(
                'anything but ["message.output_text.logprobs"]',
                lambda value: value not in (None, [], [LOGPROBS_INCLUDE]),
            ),
            "no other extra output (encrypted reasoning, sources, images) is translated",
        ),
        "top_logprobs": translated("`top_logprobs` (with the `include` above)"),
        "truncation": refused("the provider does not truncate the input for the gateway", one_of("disabled")),
        "max_tool_calls": refused("built-in tool calls are not translated"),
        "context_management": refused("OpenAI's context management has no counterpart"),
        "moderation": refused("OpenAI's moderation has no counterpart"),
        "prompt_cache_key": refused("OpenAI's prompt cache routing has no counterpart"),
        "prompt_cache_options": refused("OpenAI's prompt cache has no counterpart"),
        "prompt_cache_retention": refused("OpenAI's prompt cache has no counterpart"),
        "image": refused("request-level image options are not translated"),
        "access_programs": refused("OpenAI's access programs have no counterpart"),
    },
    {
        "tools[].strict": translated("`tools[].function.strict` (then as the row's chat table says)"),
        "text.format.strict": translated(
            "`response_format.json_schema.strict` (then as the row's chat table says)"
        ),
        "reasoning.summary": not_sent("the thinking comes back as a summary whatever it asks"),
        "tool_choice: allowed_tools": refused("allowed-tools lists are not translated"),
    },
)

# The route each translator and dialect applies: (route name, what it is translated to) → matrix.
MATRICES: dict[str, RouteMatrix] = {
    "chat→messages": CHAT_ON_MESSAGES,
    "chat→converse": CHAT_ON_CONVERSE,
    "chat→gemini": CHAT_ON_GEMINI,
    "messages→chat": MESSAGES_ON_CHAT,
    "responses→chat": RESPONSES_ON_CHAT,
}


def render_markdown() -> str:
    """docs/translation-fields.md: one table per translated route."""
    lines = [
        "# Request fields on translated routes",
        "",
        "Generated from `modelgate/proxy/translation/field_matrix.py` by `python -c 'from",
        'modelgate.proxy.translation.field_matrix import render_markdown as r; print(r(), end="")\'',
        "> docs/translation-fields.md`;",
        "`tests/unit/test_field_matrix.py` checks that this file matches, and that every request field",
        "of the installed `openai` (`chat.completion_create_params`, `responses.response_create_params`)",
        "and `anthropic` (`message_create_params`) SDKs has an entry.",
        "",
        "- **forwarded**: sent as the client wrote it; **translated**: sent as what the table says;",
        "  **refused**: a 400 naming the field and the row's provider (envelope A on chat, B on",
        "  `/v1/messages`), for the values the table names; **gateway**: read by the gateway, not sent;",
        "  **not sent**: an end-user hint the answer does not depend on, which the provider has no field",
        "  for.",
        "- A field no table lists is refused too. Another row of the model may still serve the request:",
        "  a refusal is final only when no row can carry it.",
        "- A Messages request on a Bedrock Converse or Gemini row is first the chat request of the Messages",
        "  table, then meets that host's table. A Responses request on a row that does not speak the",
        "  Responses API (Anthropic-kind rows; Bedrock, Gemini and Vertex hosts) is first the chat request",
        "  of the Responses table, then meets the row's chat table.",
        "",
    ]
    for matrix in MATRICES.values():
        lines += [
            f"## {matrix.title}",
            "",
            f"Rows: {matrix.rows}.",
            "",
            "| field | handling | what happens |",
        ]
        lines.append("|---|---|---|")
        entries = [*sorted(matrix.fields.items()), *sorted(matrix.sub_fields.items())]
        for name, entry in entries:
            handling = entry.handling
            detail = entry.detail
            if entry.refused_when is not None:
                if entry.handling == "refused":
                    handling = f"refused when {entry.refused_when.text}"
                else:
                    detail += f"; refused when {entry.refused_when.text}"
                    if entry.because:
                        detail += f" ({entry.because})"
            lines.append(f"| `{name}` | {handling} | {detail.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)

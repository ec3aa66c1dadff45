"""Images between the two wire formats: Anthropic `image` blocks and OpenAI `image_url` parts."""

from __future__ import annotations

from typing import Any

from modelgate.domain.errors import InvalidRequest


def image_part_of(block: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic image block as an OpenAI `image_url` part (base64 becomes a data URL)."""
    source = block.get("source")
    if not isinstance(source, dict):
        source = {}
    kind = source.get("type")
    if kind == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise InvalidRequest(
            f"image source type {kind!r} cannot be sent to this model's providers; use base64 or url"
        )
    return {"type": "image_url", "image_url": {"url": url}}


def image_block_of(part: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `image_url` part as an Anthropic image block (a data URL becomes a base64 source)."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise InvalidRequest("an image_url content part needs a non-empty 'url'")
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64":
            raise InvalidRequest("an image data URL must be base64-encoded: data:<media type>;base64,<data>")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}

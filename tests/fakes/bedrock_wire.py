"""Bedrock's wire for the fake: the event-stream frames it streams (written here from the format, CRCs and
all, independently of the gateway's decoder) and the SigV4 check of every request it receives (the
signature recomputed with botocore from the known test secret, compared with the one sent)."""

from __future__ import annotations

import hmac
import re
import struct
import zlib
from datetime import UTC, datetime

import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<day>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)"
    r"/aws4_request,"
    r" SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})"
)
MAX_CLOCK_SKEW = 300  # seconds, as AWS allows


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths, CRC), string headers, payload, message CRC."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event_frame(event_type: str, payload: dict) -> bytes:
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, orjson.dumps({**payload, "p": "abcdefghij"}))  # Bedrock pads its events


def exception_frame(exception_type: str, message: str) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, orjson.dumps({"message": message}))


def with_bad_crc(data: bytes) -> bytes:
    """The frame with its message CRC flipped."""
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def signature_problem(
    method: str,
    raw_path: str,
    headers: dict[str, str],
    body: bytes,
    region: str,
    keys: dict[str, tuple[str, str | None]],
) -> tuple[str, str] | None:
    """None if the request is signed with a known key for `bedrock` in `region`, else (AWS error name,
    message). `keys`: access key id → (secret, session token or None)."""
    found = _AUTHORIZATION.fullmatch(headers.get("authorization", ""))
    if found is None:
        return "MissingAuthenticationTokenException", "Missing or malformed SigV4 authorization header."
    key_id, signed = found["key"], found["signed"].split(";")
    if key_id not in keys:
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    if found["region"] != region or found["service"] != "bedrock":
        return "InvalidSignatureException", f"Credential should be scoped to {region}/bedrock."
    if "host" not in signed or "x-amz-date" not in signed or any(name not in headers for name in signed):
        return "InvalidSignatureException", f"Signed headers {signed} must include host and x-amz-date."
    secret, token = keys[key_id]
    if token is not None and (
        headers.get("x-amz-security-token") != token or "x-amz-security-token" not in signed
    ):
        return "UnrecognizedClientException", "The security token included in the request is invalid."
    amz_date = headers["x-amz-date"]
    when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    if amz_date[:8] != found["day"] or abs((datetime.now(UTC) - when).total_seconds()) > MAX_CLOCK_SKEW:
        return "InvalidSignatureException", "Signature expired or its date does not match its scope."
    request = AWSRequest(
        method=method,
        url=f"http://{headers['host']}{raw_path}",
        data=body,
        headers={n: headers[n] for n in signed},
    )
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(key_id, secret, token), "bedrock", region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, found["signature"]):
        return "InvalidSignatureException", (
            "The request signature we calculated does not match the signature you provided."
        )
    return None

"""Bad input is answered with a 4xx `{"error"}` and never a 500; unexpected failures are a bare 500."""

from __future__ import annotations

import logging
import re

import pytest

from modelgate.cabinet.app import ROUTES
from tests.integration.cabinet.cabinet_client import Account, Cabinet

# (method, path) of every endpoint that reads a JSON body; ids are filled in per test.
JSON_ENDPOINTS = [
    ("POST", "/auth/register"),
    ("POST", "/auth/login"),
    ("POST", "/auth/password"),
    ("PATCH", "/members/{member}"),
    ("POST", "/invitations"),
    ("POST", "/invitations/accept"),
    ("POST", "/organization/api-keys"),
    ("POST", "/organization/management-keys"),
    ("POST", "/systems"),
    ("PATCH", "/systems/{system}"),
]


async def _endpoints(cabinet: Cabinet, owner: Account) -> list[tuple[str, str]]:
    member = await cabinet.add_member(owner, "member")
    ids = {
        "member": await cabinet.user_id(member),
        "system": (await cabinet.create_system(owner)).body["id"],
    }
    return [(method, path.format(**ids)) for method, path in JSON_ENDPOINTS]


NOT_A_JSON_OBJECT = [
    (b"", "request body must be a JSON object"),
    (b"{not json", "request body is not valid JSON"),
    (b"\xff\xfe\x00garbage", "request body is not valid JSON"),
    (b'{"name": "\\ud800"}', "request body is not valid JSON"),
    (b"[1, 2, 3]", "request body must be a JSON object"),
    (b'"a string"', "request body must be a JSON object"),
    (b"null", "request body must be a JSON object"),
]


async def test_a_body_that_is_not_a_json_object_is_400_everywhere(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for method, path in await _endpoints(cabinet, owner):
        for body, message in NOT_A_JSON_OBJECT:
            reply = await cabinet.call(method, path, token=owner.token, data=body)

            assert (reply.status, reply.body) == (400, {"error": message}), (method, path, body)


async def test_a_body_over_64_kib_is_413_everywhere(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    body = b'{"name": "' + b"x" * (65 * 1024) + b'"}'

    for method, path in await _endpoints(cabinet, owner):
        reply = await cabinet.call(method, path, token=owner.token, data=body)

        assert (reply.status, reply.body) == (413, {"error": "request body is larger than 64 KiB"}), (
            method,
            path,
        )


async def test_a_chunked_body_over_64_kib_is_413(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    async def chunks():
        for _ in range(70):
            yield b" " * 1024

    async with cabinet.client.post(
        "/api/systems", data=chunks(), headers={"Authorization": f"Bearer {owner.token}"}
    ) as resp:
        assert resp.status == 413
        assert await resp.json() == {"error": "request body is larger than 64 KiB"}


async def test_wrong_json_types_are_400_everywhere(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    wrong = {
        "legalName": 1,
        "email": ["x"],
        "password": {"a": 1},
        "planCode": 3.5,
        "currentPassword": 1,
        "newPassword": False,
        "role": 1,
        "token": 7,
        "alias": 1,
        "ownerEmail": 1,
        "systemId": 1,
        "name": 1,
        "description": 1,
    }

    for method, path in await _endpoints(cabinet, owner):
        reply = await cabinet.call(method, path, token=owner.token, json=wrong)

        assert reply.status == 400, (method, path, reply.body)
        assert set(reply.body) == {"error"}


async def test_missing_fields_are_400_everywhere(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for method, path in await _endpoints(cabinet, owner):
        reply = await cabinet.call(method, path, token=owner.token, json={})

        assert reply.status == 400, (method, path, reply.body)
        assert reply.body["error"].endswith(("is required", "to change")), reply.body


async def test_unicode_names_are_stored_and_returned_unchanged(cabinet: Cabinet) -> None:
    owner = await cabinet.register(legal_name="Société Générale — 東京 🚀")
    name = "Ассистент 助手 🤖"

    system = await cabinet.create_system(owner, name, description="émoji ✓")
    key = await cabinet.create_key(owner, "ключ-🔑", systemId=system.body["id"])
    overview = await cabinet.call("GET", "/overview", token=owner.token)

    assert (system.status, key.status) == (201, 201)
    assert overview.body["organization"]["legalName"] == "Société Générale — 東京 🚀"
    assert overview.body["systems"][0]["name"] == name
    assert overview.body["apiKeys"][0]["alias"] == "ключ-🔑"


async def test_control_characters_in_names_are_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    system = await cabinet.create_system(owner, "bad\x01name")
    key = await cabinet.create_key(owner, "bad\x07alias")

    assert (system.status, system.body) == (400, {"error": "name must not contain control characters"})
    assert (key.status, key.body) == (400, {"error": "alias must not contain control characters"})


async def test_overlong_values_are_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    system = await cabinet.create_system(owner, "n" * 201)
    key = await cabinet.create_key(owner, "a" * 129)

    assert (system.status, system.body) == (400, {"error": "name must be at most 200 characters"})
    assert (key.status, key.body) == (400, {"error": "alias must be at most 128 characters"})


async def test_a_nul_character_in_a_login_email_is_400_not_a_storage_error(cabinet: Cabinet) -> None:
    reply = await cabinet.login("nul\x00@example.com", "whatever password")

    assert (reply.status, reply.body) == (400, {"error": "email must not contain NUL characters"})


async def test_unknown_api_paths_are_404_not_found(cabinet: Cabinet) -> None:
    for path in ("/nope", "/organization/api-keys/key_x/unrevoke", "/auth/oidc/google/logout"):
        reply = await cabinet.call("GET", path)

        assert (reply.status, reply.body) == (404, {"error": "not found"}), path


async def test_a_wrong_method_is_405_with_allow(cabinet: Cabinet) -> None:
    reply = await cabinet.call("PUT", "/auth/login", json={})

    assert (reply.status, reply.body) == (405, {"error": "method not allowed"})
    assert reply.headers["Allow"] == "POST"


async def test_an_unexpected_failure_is_logged_and_answered_500_without_details(
    cabinet: Cabinet, caplog: pytest.LogCaptureFixture
) -> None:
    owner = await cabinet.register()
    await cabinet.db.execute("DROP TABLE audit_log")

    with caplog.at_level(logging.ERROR, logger="modelgate.cabinet"):
        reply = await cabinet.create_system(owner, "doomed")

    assert (reply.status, reply.body) == (500, {"error": "internal error"})
    assert b"Traceback" not in reply.raw and b"audit_log" not in reply.raw
    assert "cabinet request failed: POST /api/systems" in caplog.text
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM systems") == 0


# -- NUL and invalid UTF-8: refused at the edge, on both storage backends ----------------------------------

UNSTORABLE = {"nul": "%00", "nul-inside": "sys_0123456789%00", "invalid-utf8": "%ff", "overlong": "%c0%80"}
_PATH_PARAMETER = re.compile(r"\{\w+\}")


async def test_nul_or_invalid_utf8_in_a_path_id_is_a_4xx_on_every_route(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    for route in ROUTES:
        if "{" not in route.path:
            continue
        for value in UNSTORABLE.values():
            target = _PATH_PARAMETER.sub(value, route.path)
            reply = await cabinet.call(route.method, target, token=owner.token, data=b"{}")

            assert 400 <= reply.status < 500, (route.method, target, reply.status, reply.raw[:200])
            assert set(reply.body) == {"error"}


@pytest.mark.parametrize(
    "query", ["cursor=evt_%00", "cursor=%ff", "limit=1%00", "from=2026-01-01%00", "to=%c0%80"]
)
async def test_nul_or_invalid_utf8_in_a_query_value_is_400(cabinet: Cabinet, query: str) -> None:
    owner = await cabinet.register()

    for path in ("/audit-log", "/usage"):
        reply = await cabinet.call("GET", f"{path}?{query}", token=owner.token)

        assert reply.status == 400, (path, query, reply.body)
        assert reply.body["error"] in (
            "the request URL contains a NUL character",
            "the request URL is not valid UTF-8",
        )


async def test_nul_anywhere_in_a_json_body_is_400_everywhere(cabinet: Cabinet) -> None:
    owner = await cabinet.register()
    body = b'{"name": "ok", "deep": [{"list": ["fine", {"\\u0000key": 1}]}]}'

    for method, path in [*await _endpoints(cabinet, owner), ("POST", "/policy-rules")]:
        reply = await cabinet.call(method, path, token=owner.token, data=body)

        assert (reply.status, reply.body) == (400, {"error": "deep must not contain NUL characters"}), path


async def test_nul_in_a_system_id_or_policy_subject_id_is_400(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    key = await cabinet.create_key(owner, "with-system", systemId="sys_\x00")
    rule = await cabinet.call(
        "POST",
        "/policy-rules",
        token=owner.token,
        json={"subjectType": "system", "subjectId": "sys_0123456789\x00", "effect": "deny", "models": ["m"]},
    )

    assert (key.status, key.body) == (400, {"error": "systemId must not contain NUL characters"})
    assert (rule.status, rule.body) == (400, {"error": "subjectId must not contain NUL characters"})


async def test_a_backslash_before_u0000_is_text_not_a_nul(cabinet: Cabinet) -> None:
    owner = await cabinet.register()

    reply = await cabinet.call("POST", "/systems", token=owner.token, data=b'{"name": "path\\\\u0000name"}')

    assert reply.status == 201, reply.body
    assert reply.body["name"] == "path\\u0000name"

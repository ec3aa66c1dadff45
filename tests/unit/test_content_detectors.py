"""The built-in detectors of content rules (`domain.content_detectors`), run as a rule runs them: what each
finds, and what its checksum or shape check keeps out (Luhn-invalid cards, bad IBAN check digits, dates)."""

from __future__ import annotations

import pytest

from modelgate.domain.content_detectors import DETECTOR_TABLE, iban_valid, luhn_valid
from modelgate.domain.content_matching import DETECTORS, ContentMatcher, ContentTerm


def found(detector: str, text: str) -> list[str]:
    """The texts the detector finds in `text`."""
    matcher = ContentMatcher.compile([ContentTerm("rule", "detector", detector)])
    return [text[match.start : match.end] for match in matcher.find(text)]


@pytest.mark.parametrize(
    "address", ["bob@example.com", "bob.smith+tag@mail.example.co.uk", "o'neil_2@sub-domain.example.org"]
)
def test_email_finds_an_address(address: str) -> None:
    assert found("email", f"write to {address}, please") == [address]


@pytest.mark.parametrize(
    "text", ["bob@localhost", "an @ sign alone", "bob@example.c", "user at example dot com"]
)
def test_email_ignores_what_is_not_an_address(text: str) -> None:
    assert found("email", text) == []


@pytest.mark.parametrize(
    "number", ["+1 415 555 2671", "+44 20 7946 0958", "+49 30 1234567", "(030) 123-4567", "030 1234567"]
)
def test_phone_finds_international_and_national_numbers(number: str) -> None:
    assert found("phone", f"call {number} today") == [number]


@pytest.mark.parametrize("date", ["2026-11-24", "24.11.2026", "24/11/2026", "2026.11.24"])
def test_phone_ignores_dates(date: str) -> None:
    assert found("phone", f"due on {date} at noon") == []


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111111 shipped",  # a plain long number
        "card 4111 1111 1111 1111",  # a card number is the payment_card detector's
        "card 3782 822463 10005",
        "host 192.168.100.10 is down",
        "a budget of 10 000 000 or 1.250.000 euros",
        "12 34",  # too few digits
    ],
)
def test_phone_ignores_card_numbers_addresses_and_short_numbers(text: str) -> None:
    assert found("phone", text) == []


@pytest.mark.parametrize(
    "number", ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "378282246310005"]
)
def test_payment_card_finds_a_luhn_valid_number_grouped_or_not(number: str) -> None:
    assert found("payment_card", f"pay with {number} now") == [number]


def test_payment_card_without_a_known_issuer_prefix_is_found() -> None:
    assert found("payment_card", "card 9999 9999 9999 9995") == ["9999 9999 9999 9995"]


@pytest.mark.parametrize("number", ["4111 1111 1111 1112", "4111111111111121", "1234 5678 9012"])
def test_payment_card_ignores_luhn_invalid_or_short_numbers(number: str) -> None:
    assert found("payment_card", f"pay with {number} now") == []


def test_luhn_checksum() -> None:
    assert luhn_valid("79927398713")
    assert not luhn_valid("79927398710")


@pytest.mark.parametrize(
    "iban",
    [
        "DE89 3704 0044 0532 0130 00",
        "GB82 WEST 1234 5698 7654 32",
        "FR14 2004 1010 0505 0001 3M02 606",
        "NL91ABNA0417164300",
        "ES91 2100 0418 4502 0005 1332",
        "IT60 X054 2811 1010 0000 0123 456",
        "CH93 0076 2011 6238 5295 7",
        "BE68 5390 0754 7034",
    ],
)
def test_iban_finds_a_valid_iban_with_or_without_spaces(iban: str) -> None:
    assert found("iban", f"transfer to {iban} by Friday") == [iban]


def test_iban_followed_by_an_uppercase_word_is_found_without_it() -> None:
    assert found("iban", "DE89 3704 0044 0532 0130 00 ASAP") == ["DE89 3704 0044 0532 0130 00"]


def test_iban_with_bad_check_digits_is_ignored() -> None:
    assert found("iban", "transfer to DE88 3704 0044 0532 0130 00") == []


def test_iban_of_the_wrong_length_for_its_country_is_ignored() -> None:
    # A valid mod-97 check, but a German IBAN has 22 characters, not 18.
    assert iban_valid("NL91ABNA0417164300")
    assert not iban_valid("DE" + "NL91ABNA0417164300"[2:])
    assert found("iban", "DE91 ABNA 0417 1643 00") == []


@pytest.mark.parametrize(
    "key",
    [
        "sk-" + "a1B2" * 12,
        "sk-proj-" + "Ab3_-x" * 26,
        "sk-ant-api03-" + "Zy9_" * 23,
        "ghp_" + "a" * 36,
        "gho_" + "B" * 36,
        "ghs_" + "1" * 36,
        "github_pat_" + "11ABCDEFG" * 9,
        "xoxb-1234567890-1234567890-abcdefghijkl",
        "xoxp-1234567890-abcdef",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAIOSFODNN7EXAMPLE",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    ],
)
def test_credentials_finds_provider_keys_and_tokens(key: str) -> None:
    assert found("credentials", f"my key is {key} ok") == [key]


def test_credentials_finds_a_jwt_without_the_period_ending_its_sentence() -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2ln"
    assert found("credentials", f"Use {token}.") == [token]


@pytest.mark.parametrize(
    "text",
    [
        "sk-short",
        "sk-learn-compatible-pipeline-builder",
        "ghp_tooshort",
        "AKIA1234",
        "task-management-system",
        "eyJhbGciOi.notatoken",
        "xoxz-123456789012",
    ],
)
def test_credentials_ignores_lookalikes(text: str) -> None:
    assert found("credentials", text) == []


def test_credentials_finds_a_private_key_block_through_its_end_line() -> None:
    block = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    )
    block += "-----END RSA PRIVATE KEY-----"
    assert found("credentials", f"key:\n{block}\nthanks") == [block]


def test_credentials_without_an_end_line_finds_the_begin_line_alone() -> None:
    text = "-----BEGIN PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4\n(truncated)"
    assert found("credentials", text) == ["-----BEGIN PRIVATE KEY-----"]


def test_credentials_private_key_end_line_beyond_16_kib_is_not_taken() -> None:
    text = "-----BEGIN EC PRIVATE KEY-----\n" + "A" * 17_000 + "\n-----END EC PRIVATE KEY-----"
    assert found("credentials", text) == ["-----BEGIN EC PRIVATE KEY-----"]


def test_payment_card_in_a_longer_run_of_digit_groups_is_found() -> None:
    assert found("payment_card", "ref 1234 4111 1111 1111 1111 ok") == ["4111 1111 1111 1111"]


def test_every_named_detector_has_a_definition() -> None:
    assert tuple(DETECTOR_TABLE) == DETECTORS

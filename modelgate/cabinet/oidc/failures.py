"""Why a single sign-on did not complete: one exception with a stable reason code."""

from __future__ import annotations


class SsoFailure(Exception):
    """A login through an identity provider that cannot complete.

    `reason` is a stable code (sent to the cabinet as `?error=` and audited); `detail` explains it to an
    operator and never contains a secret.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail

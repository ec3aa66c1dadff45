"""Following a link sent to an address (`POST /auth/verify-email {token}`): it proves the address, then does
what the link was sent for — verify the account's address, move the account to a new address, or finish a
registration that waited for its address."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.addresses import address_taken, change_address, verify_address
from modelgate.cabinet.clock import now
from modelgate.cabinet.email_links import redeem_link
from modelgate.cabinet.registration import complete_waiting_registration
from modelgate.cabinet.requests import json_response, read_json_object, required_secret
from modelgate.cabinet.services import services_of
from modelgate.storage import IntegrityViolation


async def follow_link(request: web.Request) -> web.Response:
    """POST /auth/verify-email {token} → 200 {email, emailVerified} for a verification or an address change;
    201 {token, email, …} signed in for a registration that waited; 400 for an unknown, used or expired link,
    409 when a verified account took the address meanwhile."""
    services = services_of(request)
    body = await read_json_object(request)
    token = required_secret(body, "token")
    at = now()
    try:
        async with services.db.transaction() as tx:
            link = await redeem_link(tx, token, ("verify", "change", "register"), at)
            if link.purpose == "register":
                return await complete_waiting_registration(request, tx, link, at)
            if link.purpose == "verify":
                answer = await verify_address(tx, link, at)
            else:
                answer = await change_address(tx, link, at)
    except IntegrityViolation as exc:
        raise address_taken() from exc
    return json_response(answer)

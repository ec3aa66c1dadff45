"""Single sign-on with OpenID Connect: identity providers per organization, the authorization-code flow with
state, nonce and PKCE, ID-token validation against the provider's JWKS, and one-time login codes."""

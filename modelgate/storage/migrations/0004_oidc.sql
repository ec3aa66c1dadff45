-- Single sign-on with OpenID Connect: identity providers per organization, logins under way (state, nonce and
-- PKCE verifier, single use) and the one-time codes that turn a finished login into a session token.
--
-- The client secret is stored as given: the gateway presents it to the provider's token endpoint, so a hash
-- would not do. The API accepts it on create and update and never returns it; protect the database and its
-- backups like the configuration file that holds the upstream API keys.
-- States and one-time codes are stored by the SHA-256 of their value, like every other token of the cabinet.

CREATE TABLE oidc_providers (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    name TEXT NOT NULL,
    issuer TEXT NOT NULL,
    client_id TEXT NOT NULL,
    client_secret TEXT NOT NULL,
    token_auth_method TEXT NOT NULL CHECK (token_auth_method IN ('client_secret_basic', 'client_secret_post')),
    scopes TEXT NOT NULL,
    allowed_domains TEXT NOT NULL,
    default_role TEXT NOT NULL CHECK (default_role IN ('admin', 'member')),
    auto_provision BIGINT NOT NULL CHECK (auto_provision IN (0, 1)),
    assume_pkce_s256 BIGINT NOT NULL DEFAULT 0 CHECK (assume_pkce_s256 IN (0, 1)),
    authorization_endpoint TEXT,
    token_endpoint TEXT,
    jwks_uri TEXT,
    userinfo_endpoint TEXT,
    signing_algs TEXT,
    discovered_at DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    UNIQUE (organization_id, name)
);

CREATE TABLE oidc_login_states (
    state_hash TEXT PRIMARY KEY,
    provider_id TEXT NOT NULL REFERENCES oidc_providers(id) ON DELETE CASCADE,
    nonce TEXT NOT NULL,
    code_verifier TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX oidc_login_states_by_expiry ON oidc_login_states (expires_at);
CREATE INDEX oidc_login_states_by_provider ON oidc_login_states (provider_id);

-- sealed_token is the session token encrypted with a key derived from the one-time code itself, so the
-- database alone never reveals a usable session token.
CREATE TABLE oidc_login_codes (
    code_hash TEXT PRIMARY KEY,
    sealed_token TEXT NOT NULL,
    email TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX oidc_login_codes_by_expiry ON oidc_login_codes (expires_at);

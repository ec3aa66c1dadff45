-- Issue #33: single sign-on domains an organization proves it controls (a DNS TXT record it publishes, or
-- the operator's approval). Sign-in options list, and a sign-in accepts, an identity provider only for the
-- e-mail domains its own organization verified. An organization may hold a pending claim of any domain; a
-- domain is verified by one organization at a time (the partial unique index), until that one releases it.
CREATE TABLE sso_domains (
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    domain TEXT NOT NULL,
    token TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    verified_at DOUBLE PRECISION,
    verified_by TEXT CHECK (verified_by IN ('dns', 'operator')),
    PRIMARY KEY (organization_id, domain)
);
CREATE UNIQUE INDEX sso_domains_one_owner ON sso_domains (domain) WHERE verified_at IS NOT NULL;

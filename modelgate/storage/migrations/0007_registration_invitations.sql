-- Registration invitations: with `[cabinet] registration = "invite_only"` an organization is registered only
-- with an operator's single-use, expiring token for one e-mail, which also fixes the plan (any plan, a
-- credit plan included). Only the token's hash is stored.
CREATE TABLE registration_invitations (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL,
    plan_code TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('pending', 'used')),
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    used_at DOUBLE PRECISION,
    organization_id TEXT
);

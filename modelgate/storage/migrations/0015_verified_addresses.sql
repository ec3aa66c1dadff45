-- Issue #33: verified e-mail addresses, single-use links sent to an address, and the mail outbox.
-- An address is an account's verified address only once a link sent to it was followed (or single sign-on
-- from a verified domain vouched for it): `email_verified_at`. Accounts made before this migration are
-- unverified — an invitation token used to be shown to the inviter, so nothing proved they own the address.
ALTER TABLE users ADD COLUMN email_verified_at DOUBLE PRECISION;

-- Links sent to an address (verification, password reset, address change, a registration waiting for its
-- address): only the SHA-256 of the token is stored; `payload` holds what following the link completes.
CREATE TABLE email_links (
    id TEXT PRIMARY KEY,
    purpose TEXT NOT NULL CHECK (purpose IN ('verify', 'register', 'change', 'reset')),
    token_hash TEXT NOT NULL UNIQUE,
    email TEXT NOT NULL,
    user_id TEXT,
    payload TEXT,
    requested_from TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    used_at DOUBLE PRECISION
);
CREATE INDEX email_links_by_email ON email_links (email, created_at);
CREATE INDEX email_links_by_requester ON email_links (requested_from, created_at);

-- Messages waiting for delivery: by SMTP when `[email]` is configured, else to the operator (`modelgate mail
-- pending`). The body (it holds the link) is kept only until the message is sent or its link expires.
CREATE TABLE mail_outbox (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    organization_id TEXT,
    to_address TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT,
    link TEXT,
    transport TEXT NOT NULL CHECK (transport IN ('smtp', 'operator')),
    status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'expired')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    sent_at DOUBLE PRECISION
);
CREATE INDEX mail_outbox_due ON mail_outbox (status, next_attempt_at);

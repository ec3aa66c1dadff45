-- The cabinet domain. Portable SQL: it runs unchanged on SQLite and PostgreSQL.
-- Times are epoch seconds (DOUBLE PRECISION); money is integer micro-units of the configured currency.

CREATE TABLE organizations (
    id TEXT PRIMARY KEY,
    legal_name TEXT NOT NULL,
    plan_code TEXT NOT NULL,
    balance_micros BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX users_by_org ON users (organization_id);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL REFERENCES users(id),
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
);
CREATE INDEX sessions_by_user ON sessions (user_id);

CREATE TABLE systems (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (organization_id, name)
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    alias TEXT NOT NULL,
    owner_email TEXT NOT NULL,
    system_id TEXT REFERENCES systems(id),
    status TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    secret_hash TEXT NOT NULL UNIQUE,
    secret_hint TEXT NOT NULL,
    created_by TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION,
    UNIQUE (organization_id, alias)
);
CREATE INDEX api_keys_by_system ON api_keys (system_id);

CREATE TABLE management_keys (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'revoked')),
    secret_hash TEXT NOT NULL UNIQUE,
    secret_hint TEXT NOT NULL,
    created_by TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
);
CREATE INDEX management_keys_by_org ON management_keys (organization_id);

CREATE TABLE invitations (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    email TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    token_hash TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL CHECK (status IN ('pending', 'accepted', 'revoked')),
    created_by TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    accepted_at DOUBLE PRECISION,
    revoked_at DOUBLE PRECISION
);
CREATE INDEX invitations_by_org ON invitations (organization_id);

CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL,
    event TEXT NOT NULL,
    actor_type TEXT NOT NULL,
    actor_id TEXT,
    actor_email TEXT,
    target_id TEXT,
    details TEXT NOT NULL DEFAULT '{}',
    created_at DOUBLE PRECISION NOT NULL
);
-- Pages of the audit log are read newest first by (created_at, id): the id breaks ties so the cursor is stable.
CREATE INDEX audit_log_by_org_time ON audit_log (organization_id, created_at, id);

CREATE TABLE invoices (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    plan_code TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'paid', 'void')),
    created_at DOUBLE PRECISION NOT NULL,
    paid_at DOUBLE PRECISION
);
CREATE INDEX invoices_by_org ON invoices (organization_id);

CREATE TABLE login_throttle (
    subject TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,
    window_started_at DOUBLE PRECISION NOT NULL,
    locked_until DOUBLE PRECISION
);

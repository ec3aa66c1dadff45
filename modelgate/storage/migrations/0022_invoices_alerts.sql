-- Issue #38: spend alerts. An owner sets a threshold (a percentage of a policy rule's budget, or an amount a
-- day for the organization, a system or a key); crossing it fires once per period (spend_alert_firings'
-- primary key) and queues a signed webhook (spend_alert_deliveries, retried with backoff, each one kept as
-- the delivery log). The signing secret is one per organization.
CREATE TABLE spend_alerts (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    kind TEXT NOT NULL CHECK (kind IN ('budget', 'daily')),
    rule_id TEXT,
    percent INTEGER,
    subject_type TEXT,
    subject_id TEXT,
    amount_micros BIGINT,
    url TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX spend_alerts_by_organization ON spend_alerts (organization_id, created_at);
CREATE TABLE alert_signing_secrets (
    organization_id TEXT PRIMARY KEY REFERENCES organizations(id),
    secret TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE spend_alert_firings (
    alert_id TEXT NOT NULL,
    period_start DOUBLE PRECISION NOT NULL,
    fired_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (alert_id, period_start)
);
CREATE TABLE spend_alert_deliveries (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL,
    alert_id TEXT NOT NULL,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_status INTEGER,
    last_error TEXT,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    delivered_at DOUBLE PRECISION
);
CREATE INDEX spend_alert_deliveries_due ON spend_alert_deliveries (status, next_attempt_at);
CREATE INDEX spend_alert_deliveries_by_organization ON spend_alert_deliveries (organization_id, created_at);

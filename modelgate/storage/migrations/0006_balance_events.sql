-- Money as events: every change of a stored balance other than metered spend (an invoice paid, a top-up, an
-- operator's credit, debit or set) is one row here with an id and a per-organization sequence number.
-- `organizations.credit_seq` is the sequence of the last event folded into `balance_micros`, read together
-- with it, so a live counter knows exactly which events it already holds.
ALTER TABLE organizations ADD COLUMN credit_seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE balance_events (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    activates INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL DEFAULT '',
    reference_id TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    UNIQUE (organization_id, seq)
);
-- Gateways read the events of the last minute every second (a channel message can be missed).
CREATE INDEX balance_events_by_time ON balance_events (created_at);

-- How a metered request ended: completed, client_closed, upstream_error, shutdown, crashed, refused.
ALTER TABLE usage_ledger ADD COLUMN outcome TEXT NOT NULL DEFAULT 'completed';

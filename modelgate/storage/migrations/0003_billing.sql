-- Billing and policy: the usage ledger, policy rules and their budget spend.
-- Money is integer micro-units of the configured currency.

-- The first paid invoice activates an organization; until then only a plan with a credit limit may spend.
ALTER TABLE organizations ADD COLUMN activated_at DOUBLE PRECISION;

CREATE TABLE usage_ledger (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL,
    key_id TEXT,
    system_id TEXT,
    model TEXT NOT NULL,
    row_key TEXT,
    request_id TEXT NOT NULL,
    status INTEGER NOT NULL,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    units DOUBLE PRECISION NOT NULL DEFAULT 0,
    cost_micros BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX usage_ledger_by_org_time ON usage_ledger (organization_id, created_at);

CREATE TABLE policy_rules (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    subject_type TEXT NOT NULL CHECK (subject_type IN ('organization', 'key', 'system')),
    subject_id TEXT NOT NULL,
    effect TEXT NOT NULL CHECK (effect IN ('allow', 'deny')),
    models TEXT NOT NULL,
    budget_micros BIGINT,
    budget_period TEXT CHECK (budget_period IN ('day', 'month')),
    rpm INTEGER,
    tpm INTEGER,
    description TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX policy_rules_by_org ON policy_rules (organization_id);

-- Spend per budgeted rule and period, maintained by the ledger flush; counters start from it after a restart.
CREATE TABLE policy_budget_spend (
    rule_id TEXT NOT NULL,
    period_start DOUBLE PRECISION NOT NULL,
    spent_micros BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (rule_id, period_start)
);

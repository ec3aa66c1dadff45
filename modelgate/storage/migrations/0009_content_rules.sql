-- Content rules (issue #16): a policy rule whose effect is block, redact or flag carries a `content` JSON
-- object (where to look and the phrases, patterns and detectors to look for); access rules keep it NULL.
-- SQLite cannot alter a CHECK, so the table is rebuilt: created anew, copied, dropped and renamed, which
-- runs the same on PostgreSQL. Nothing references policy_rules (policy_budget_spend keys on the rule id
-- without a foreign key), so dropping the old table touches no other row.
CREATE TABLE policy_rules_new (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    subject_type TEXT NOT NULL CHECK (subject_type IN ('organization', 'key', 'system')),
    subject_id TEXT NOT NULL,
    effect TEXT NOT NULL CHECK (effect IN ('allow', 'deny', 'block', 'redact', 'flag')),
    models TEXT NOT NULL,
    budget_micros BIGINT,
    budget_period TEXT CHECK (budget_period IN ('day', 'month')),
    rpm INTEGER,
    tpm INTEGER,
    description TEXT NOT NULL DEFAULT '',
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    content TEXT,
    -- An access rule has no content, a content rule always has one.
    CHECK ((effect IN ('allow', 'deny')) = (content IS NULL))
);
INSERT INTO policy_rules_new (
    id, organization_id, subject_type, subject_id, effect, models, budget_micros, budget_period, rpm, tpm,
    description, created_at, updated_at
)
SELECT
    id, organization_id, subject_type, subject_id, effect, models, budget_micros, budget_period, rpm, tpm,
    description, created_at, updated_at
FROM policy_rules;
DROP TABLE policy_rules;
ALTER TABLE policy_rules_new RENAME TO policy_rules;
CREATE INDEX policy_rules_by_org ON policy_rules (organization_id);

-- Who an entry concerns on the model API (content-policy events name the key, its system and the route),
-- so the audit log can be filtered by them.
ALTER TABLE audit_log ADD COLUMN key_id TEXT;
ALTER TABLE audit_log ADD COLUMN system_id TEXT;
ALTER TABLE audit_log ADD COLUMN route TEXT;
-- Filters by event (an exact name or a prefix, read as a range) and by key, newest first like a page.
CREATE INDEX audit_log_by_org_event_time ON audit_log (organization_id, event, created_at, id);
CREATE INDEX audit_log_by_org_key_time ON audit_log (organization_id, key_id, created_at, id);

-- What a content rule did to a request: '' (nothing), 'blocked', 'redacted' or 'flagged'.
ALTER TABLE usage_ledger ADD COLUMN content_action TEXT NOT NULL DEFAULT '';

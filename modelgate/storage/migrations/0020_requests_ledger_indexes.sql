-- Issue #38: the cabinet's request log (GET /api/requests) pages an organization's ledger rows newest first,
-- filtered by key, model or status; each filter gets an index that leads with the organization and ends in
-- the page order, so a page reads its rows from the index instead of scanning the organization's ledger.
-- (Without those filters, and for system and outcome, `usage_ledger_by_org_time` serves.)
CREATE INDEX usage_ledger_by_org_key_time ON usage_ledger (organization_id, key_id, created_at, id);
CREATE INDEX usage_ledger_by_org_model_time ON usage_ledger (organization_id, model, created_at, id);
CREATE INDEX usage_ledger_by_org_status_time ON usage_ledger (organization_id, status, created_at, id);

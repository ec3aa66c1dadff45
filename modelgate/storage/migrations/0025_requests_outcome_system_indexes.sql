-- Issue #38: the request log's outcome and system filters read 0020's index by time and dropped the rows of
-- other outcomes or systems one by one: fine for a common value, but a rare one (`outcome=crashed`, a quiet
-- system) walked the organization's whole ledger, 160-240 ms at 100,000 rows. Each gets an index in the
-- page order, like the key, model and status filters. The one by system also serves the alert watcher's
-- daily spend of a system (alerts_repository.spent_today), which read the same index by time.
CREATE INDEX usage_ledger_by_org_outcome_time ON usage_ledger (organization_id, outcome, created_at, id);
CREATE INDEX usage_ledger_by_org_system_time ON usage_ledger (organization_id, system_id, created_at, id);

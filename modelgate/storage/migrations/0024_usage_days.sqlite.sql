-- Issue #38: the cabinet's usage reports (the overview's chart, the usage page) summed 30 days of ledger rows
-- per call, 0.5-2 s at 100,000 rows. usage_days holds the ledger's sums per organization, UTC day (whole days
-- since the epoch), model, key and system ('' for a row without a key or system: a primary key takes no
-- NULL); the ledger's flush adds each batch to it in the batch's own transaction
-- (modelgate/domain/usage_days.py), so it never disagrees with usage_ledger. Filled here from the rows so far.
CREATE TABLE usage_days (
    organization_id TEXT NOT NULL,
    day INTEGER NOT NULL,
    model TEXT NOT NULL,
    key_id TEXT NOT NULL,
    system_id TEXT NOT NULL,
    requests BIGINT NOT NULL,
    refused BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL,
    PRIMARY KEY (organization_id, day, model, key_id, system_id)
);
INSERT INTO usage_days (organization_id, day, model, key_id, system_id, requests, refused, errors, input_tokens,
    cached_input_tokens, output_tokens, cost_micros)
SELECT organization_id, CAST(created_at / 86400 AS INTEGER), model, COALESCE(key_id, ''), COALESCE(system_id, ''), COUNT(*),
    SUM(CASE WHEN status IN (402, 403, 429) THEN 1 ELSE 0 END),
    SUM(CASE WHEN (status >= 400 OR status = 0) AND status NOT IN (402, 403, 429) THEN 1 ELSE 0 END),
    SUM(input_tokens), SUM(cached_input_tokens), SUM(output_tokens), SUM(cost_micros)
FROM usage_ledger
GROUP BY organization_id, CAST(created_at / 86400 AS INTEGER), model, COALESCE(key_id, ''), COALESCE(system_id, '');

-- Issue #17: a ledger row whose tokens were estimated rather than reported by the provider (a host that
-- reports no usage in streams, or an answer cut short before its usage) says so.
ALTER TABLE usage_ledger ADD COLUMN usage_estimated BOOLEAN NOT NULL DEFAULT FALSE;

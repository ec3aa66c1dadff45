-- Issue #38: keys as the unit of control. An organization may let its members create their own API keys
-- (off by default); a key's last use is read from the ledger, by key and time.
ALTER TABLE organizations ADD COLUMN members_create_keys BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX usage_ledger_by_key_time ON usage_ledger (key_id, created_at);

-- Issue #38: keys as the unit of control. An organization may let its members create their own API keys
-- (off by default). A key's last use and spend are read from the ledger through 0020's
-- usage_ledger_by_org_key_time (organization, key, time): no index of its own, one less for every ledger write.
ALTER TABLE organizations ADD COLUMN members_create_keys BOOLEAN NOT NULL DEFAULT FALSE;

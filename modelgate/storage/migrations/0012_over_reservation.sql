-- Issue #32: a request is charged what the provider bills, even past its reservation. Its ledger row says by
-- how much it went over (micro-units) and whether the reported usage was implausible (more than any model
-- could produce: charged at the physical bound instead, docs/billing.md).
ALTER TABLE usage_ledger ADD COLUMN over_reservation_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_ledger ADD COLUMN usage_implausible BOOLEAN NOT NULL DEFAULT FALSE;
-- The context a stored response carried (its reported input + output tokens): what a follow-up naming it as
-- previous_response_id re-reads, so that follow-up's reservation bounds it. NULL: not known (yet).
ALTER TABLE model_objects ADD COLUMN context_tokens BIGINT;

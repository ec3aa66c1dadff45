-- Issue #32: a ledger row keeps what its charge was computed from beyond input, cached and output tokens
-- (cache writes 5m/1h, audio, image and reasoning tokens, tool calls by kind, images by size and quality,
-- audio and video seconds, the service tier): a JSON object of the kinds present, NULL when none was.
-- TEXT on both backends: the row is written as the spool holds it, and read only to audit a charge.
ALTER TABLE usage_ledger ADD COLUMN usage_detail TEXT;

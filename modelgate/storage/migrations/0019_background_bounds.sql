-- Issue #32, one money path: a followed background response is charged by the same rule as any request
-- (modelgate/domain/charges.py), whichever process charges it: its row records the excess over the balance
-- reservation its request took, and usage beyond the physical bound (the context window plus the output
-- allowance sent, 0: none, as with hosted tools) is charged at that bound.
ALTER TABLE background_responses ADD COLUMN reserved_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE background_responses ADD COLUMN most_output_tokens BIGINT NOT NULL DEFAULT 0;

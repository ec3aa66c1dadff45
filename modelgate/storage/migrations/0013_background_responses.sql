-- Issue #32: a background response (`POST /v1/responses` with `background: true`) is followed to its
-- terminal state and charged its final usage once. One row per response being followed: who follows it
-- (the process whose lease runs), what its request's journal charges should that process die (the crash
-- cost), and when it was charged (settled_at: the one charge, claimed by a conditional update).
CREATE TABLE background_responses (
    response_id TEXT PRIMARY KEY,
    row_id TEXT NOT NULL,
    organization_id TEXT NOT NULL,
    key_id TEXT,
    system_id TEXT,
    model TEXT NOT NULL,
    row_key TEXT NOT NULL,
    request_id TEXT NOT NULL,
    budgets TEXT NOT NULL,
    crash_cost_micros BIGINT NOT NULL,
    crash_input_tokens BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    owner TEXT NOT NULL,
    lease_until DOUBLE PRECISION NOT NULL,
    settled_at DOUBLE PRECISION
);
CREATE INDEX background_responses_open ON background_responses (settled_at, lease_until);

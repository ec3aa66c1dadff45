-- Login throttling with growing delays, counted per (account, client address) pair, per address and per
-- account (cabinet/throttle.py); it replaces the fixed lockout of `login_throttle`, whose rows (short-lived
-- failure counters) are simply dropped. `last_success_at` marks a pair as a known address of its account.
-- Rows whose `forget_at` has passed hold nothing worth keeping and are removed in batches.
DROP TABLE login_throttle;

CREATE TABLE login_attempts (
    subject TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,
    blocked_until DOUBLE PRECISION,
    last_failure_at DOUBLE PRECISION,
    last_success_at DOUBLE PRECISION,
    forget_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX login_attempts_by_forget_at ON login_attempts (forget_at);

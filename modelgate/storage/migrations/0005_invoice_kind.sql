-- What an invoice is for: one period of the plan's fee, or a balance top-up by the operator.
ALTER TABLE invoices ADD COLUMN kind TEXT NOT NULL DEFAULT 'plan' CHECK (kind IN ('plan', 'top_up'));

"""Money and limits on the hot path: prices, live counters (balance, budgets, rate windows), the ledger."""

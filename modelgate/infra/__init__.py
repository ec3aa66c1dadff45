"""Infrastructure with no business rules, below the domain: the Redis wire client and the counters' Lua
scripts, the ledger's local spool."""

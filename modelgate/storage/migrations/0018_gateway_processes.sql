-- Issue #33: the gateway processes sharing a PostgreSQL database, each with a lease it renews on its
-- notification connection (modelgate/storage/presence.py). A key revocation, plan or policy change waits
-- until every process registered before it acknowledged it, renewed its lease since, or let it lapse.
-- Times are the database's clock (seconds since the epoch). On SQLite the table stays empty: the workers of
-- one host hear each other through the host channel.
CREATE TABLE gateway_processes (
    id TEXT PRIMARY KEY,
    renewed_at DOUBLE PRECISION NOT NULL,
    lease_until DOUBLE PRECISION NOT NULL
);

-- Objects created through the model API (stored responses, videos) remembered with the organization and
-- the routing row that created them, so follow-up calls reach the same provider and no other organization.
CREATE TABLE model_objects (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    row_key TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    deleted_at DOUBLE PRECISION
);
CREATE INDEX model_objects_by_org ON model_objects (organization_id, kind, created_at);

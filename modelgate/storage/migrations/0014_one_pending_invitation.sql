-- Issue #33: one pending invitation per (organization, address). Of duplicates made before, the newest stays
-- pending; the others end as revoked. A pending invitation to an address that already has an account could
-- never be accepted (an address has one account): it ends too.
UPDATE invitations SET status = 'revoked', revoked_at = created_at
 WHERE status = 'pending' AND EXISTS (
    SELECT 1 FROM invitations AS newer
     WHERE newer.organization_id = invitations.organization_id AND newer.email = invitations.email
       AND newer.status = 'pending'
       AND (newer.created_at > invitations.created_at
            OR (newer.created_at = invitations.created_at AND newer.id > invitations.id)));
UPDATE invitations SET status = 'revoked', revoked_at = created_at
 WHERE status = 'pending' AND email IN (SELECT email FROM users);
CREATE UNIQUE INDEX invitations_one_pending ON invitations (organization_id, email) WHERE status = 'pending';

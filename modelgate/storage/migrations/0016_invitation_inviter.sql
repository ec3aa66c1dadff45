-- Issue #33: the accept page names who invited. The inviter's address is kept with the invitation (the
-- inviting user may leave the organization before the invitation is accepted); earlier rows take it from
-- the user who created them, when that user still exists.
ALTER TABLE invitations ADD COLUMN invited_by TEXT;
UPDATE invitations SET invited_by = (SELECT email FROM users WHERE users.id = invitations.created_by);

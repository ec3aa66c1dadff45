-- Issue #38: a 0.00 invoice is paid as it is opened (registration on a plan without a fee activates the
-- organization). A 0.00 invoice stored open before that, of an organization already activated (by a
-- top-up), is paid at its opening: it owes nothing and activates nothing. One of an organization never
-- activated stays open, so the operator's `mark-paid` still activates it; the cabinet shows no 0.00
-- invoice as unpaid either way.
UPDATE invoices SET status = 'paid', paid_at = created_at
WHERE status = 'open' AND amount_micros = 0
  AND organization_id IN (SELECT id FROM organizations WHERE activated_at IS NOT NULL);

// Invoices of the organization: plan invoices and top-ups, with what to do about unpaid ones.

import { api } from "../api.js";
import { page } from "../router.js";
import { badge, formatDate, formatMoney, h, loading, notice, section, table, show } from "../ui.js";

const KINDS = { plan: "Plan fee", top_up: "Balance top-up" };

function nextStep(invoice, money) {
  if (invoice.status === "open") return `Pay ${money(invoice.amountMicros)} quoting ${invoice.id}; the operator marks it paid.`;
  if (invoice.status === "paid") return `Paid ${formatDate(invoice.paidAt, false)}`;
  if (invoice.status === "void") return "Cancelled: nothing to pay.";
  return "";
}

async function render(main) {
  loading(main);
  const [answer, overview] = await Promise.all([api("GET", "/invoices"), api("GET", "/overview")]);
  const billing = overview.billing;
  const money = (micros) => formatMoney(micros, billing.currency);
  const invoices = answer.invoices || [];
  const open = invoices.filter((invoice) => invoice.status === "open");
  let summary;
  if (open.length === 0) {
    summary = notice("success", invoices.length ? "All invoices are paid." : "No invoices yet.");
  } else {
    const owed = open.reduce((sum, invoice) => sum + invoice.amountMicros, 0);
    const first = !billing.activated && billing.creditLimitMicros <= 0;
    summary = notice(
      "warning",
      h(
        "div",
        { class: "notice-body" },
        h("strong", {}, first ? "Your first invoice is unpaid: pay it to start using the API." : `${open.length === 1 ? "One invoice is" : `${open.length} invoices are`} unpaid: ${money(owed)} in total.`),
        h("p", {}, "Pay as agreed with your gateway operator and quote the invoice number. The operator marks the invoice paid; it then shows here as paid and the amount is credited to your balance."),
      ),
    );
  }
  show(main,
    summary,
    section(
      "All invoices",
      table(
        [
          { label: "Invoice", render: (row) => h("code", {}, row.id) },
          { label: "Kind", render: (row) => KINDS[row.kind] || row.kind },
          { label: "Plan", key: "planCode" },
          { label: "Amount", numeric: true, render: (row) => money(row.amountMicros) },
          { label: "Status", render: (row) => badge(row.status) },
          { label: "Period", render: (row) => (row.kind === "plan" ? `Month from ${formatDate(row.createdAt, false)}` : `Paid in ${formatDate(row.createdAt, false)}`) },
          { label: "What to do", class: "wrap", render: (row) => nextStep(row, money) },
        ],
        invoices,
        { caption: "Invoices, newest first", empty: "No invoices yet." },
      ),
    ),
  );
}

page("/invoices", { title: "Invoices", render });

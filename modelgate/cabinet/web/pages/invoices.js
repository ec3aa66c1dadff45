// Invoices of the organization: plan invoices and top-ups, with what to do about unpaid ones.

import { api } from "../api.js";
import { page } from "../router.js";
import { badge, formatDate, formatMoney, h, loading, notice, section, show, stackedTable } from "../ui.js";

/** What an invoice is for, by kind: a plan invoice is the plan's monthly fee, a top-up is money paid in. */
function purpose(invoice) {
  if (invoice.kind === "plan") return [h("strong", {}, "Monthly plan fee"), h("br"), `Plan ${invoice.planCode}, opened ${formatDate(invoice.createdAt, false)}`];
  if (invoice.kind === "top_up") return [h("strong", {}, "Balance top-up"), h("br"), `Paid in on ${formatDate(invoice.paidAt || invoice.createdAt, false)}`];
  return [h("strong", {}, invoice.kind), h("br"), `Opened ${formatDate(invoice.createdAt, false)}`];
}

function nextStep(invoice, money) {
  if (invoice.status === "open") return `Pay ${money(invoice.amountMicros)} quoting ${invoice.id}; the operator marks it paid.`;
  if (invoice.status === "paid" && invoice.kind === "top_up") return "Nothing: the amount is in your balance.";
  if (invoice.status === "paid") return `Nothing: paid ${formatDate(invoice.paidAt, false)}.`;
  if (invoice.status === "void") return "Nothing: cancelled.";
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
      stackedTable(
        [
          { label: "Invoice", class: "invoice-id", render: (row) => h("code", {}, row.id) },
          { label: "For", class: "wrap", render: purpose },
          { label: "Amount", numeric: true, render: (row) => money(row.amountMicros) },
          { label: "Status", render: (row) => badge(row.status) },
          { label: "What to do", class: "wrap", render: (row) => nextStep(row, money) },
        ],
        invoices,
        { caption: "Invoices, newest first", empty: "No invoices yet." },
      ),
    ),
  );
}

page("/invoices", { title: "Invoices", render });

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

/** How to pay an open invoice: the operator's link and instructions, or to ask the operator. */
export function paymentHow(invoice, money) {
  const payment = invoice.payment || {};
  const parts = [];
  if (payment.link) parts.push(h("p", {}, h("a", { href: payment.link, rel: "noopener noreferrer", target: "_blank" }, `Pay ${money(invoice.amountMicros)} online`), " (opens the payment page)"));
  if (payment.instructions) parts.push(h("p", { class: "payment-instructions" }, payment.instructions));
  if (parts.length === 0) parts.push(h("p", {}, `Pay ${money(invoice.amountMicros)} as agreed with your gateway operator, who then marks it paid.`));
  return parts;
}

function nextStep(invoice, money) {
  if (invoice.status === "open" && invoice.amountMicros <= 0) return "Nothing to pay.";
  if (invoice.status === "open") return paymentHow(invoice, money);
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
  const open = invoices.filter((invoice) => invoice.status === "open" && invoice.amountMicros > 0);
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
        h("p", {}, "Each unpaid invoice below says how to pay it. Once the operator marks it paid it shows here as paid and the amount is credited to your balance."),
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
          { label: "Status", render: (row) => badge(row.status === "open" && row.amountMicros <= 0 ? "nothing due" : row.status) },
          { label: "What to do", class: "wrap", render: (row) => nextStep(row, money) },
        ],
        invoices,
        { caption: "Invoices, newest first", empty: "No invoices yet." },
      ),
    ),
  );
}

page("/invoices", { title: "Invoices", render });

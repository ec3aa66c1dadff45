// The overview: plan, balance or credit, the invoice state with what to do next, the plan's limits with this
// minute's use, the budgets of the policy rules (spent, held by requests in flight, refusing: GET /api/meters),
// and a chart of this month's daily spend by model.

import { api } from "../api.js";
import { barChart } from "../chart.js";
import { href, page } from "../router.js";
import { session } from "../session.js";
import { copyButton, emptyState, errorText, formatDate, formatMoney, formatNumber, h, loading, notice, section, show, table } from "../ui.js";
import { paymentHow } from "./invoices.js";
import { limitSeries, monthStart, requestSplit, shortDay, spendByDayAndModel, utcToday } from "../usage_data.js";

const ADMIN = ["owner", "admin"];

function isAdmin() {
  return ADMIN.includes(session.role);
}

function stat(label, value, ...detail) {
  return h("div", { class: "card stat" }, h("span", { class: "stat-label" }, label), h("span", { class: "stat-value" }, value), detail.length ? h("span", { class: "stat-detail" }, ...detail) : null);
}

/** The organization id with a copy button: what the gateway operator needs to top up or mark paid. */
function organizationIdLine(organization) {
  return h(
    "p",
    { class: "org-id-line" },
    "Your organization id, for your gateway operator: ",
    h("code", { class: "org-id" }, organization.id),
    " ",
    copyButton(organization.id, "Copy organization id"),
  );
}

/** What the invoice and balance state mean for the user, and what to do next. */
function billingNotice(billing, activeKeys, organization) {
  const orgId = organizationIdLine(organization);
  const money = (micros) => formatMoney(micros, billing.currency);
  const open = billing.openInvoices || [];
  const owed = open.reduce((sum, invoice) => sum + invoice.amountMicros, 0);
  if (!billing.activated && billing.creditLimitMicros <= 0) {
    if (open.length > 0) {
      const first = open[0];
      return notice(
        "warning",
        h(
          "div",
          { class: "notice-body" },
          h("strong", {}, "Your first invoice is unpaid: pay it to start using the API."),
          h("p", {}, `Invoice ${first.id} over ${money(first.amountMicros)} (plan ${first.planCode}) was opened ${formatDate(first.createdAt)}. Model requests work as soon as it is marked paid (or your balance is topped up).`),
          ...paymentHow(first, money),
          orgId,
          h("p", {}, h("a", { href: href("/invoices") }, "See your invoices")),
        ),
      );
    }
    return notice("warning", h("div", { class: "notice-body" }, h("strong", {}, "Your organization is not active yet."), h("p", {}, "Ask your gateway operator to top up your balance: model requests work once it is done."), orgId));
  }
  if (open.length > 0) {
    return notice(
      "warning",
      h("div", { class: "notice-body" }, h("strong", {}, `${open.length === 1 ? "An invoice is" : `${open.length} invoices are`} unpaid (${money(owed)}).`), h("p", {}, "Pay it to keep your plan in good standing."), ...(open.length === 1 ? paymentHow(open[0], money) : []), orgId, h("p", {}, h("a", { href: href("/invoices") }, "See your invoices"))),
    );
  }
  const available = billing.balanceMicros + billing.creditLimitMicros;
  if (available <= 0) {
    const spent = billing.usage && billing.usage.costMicros > 0;
    return notice("error", h("div", { class: "notice-body" }, h("strong", {}, spent ? "Your balance is used up." : "Your balance is empty."), h("p", {}, "Model requests are refused (402) until your gateway operator tops it up."), orgId));
  }
  const next = activeKeys > 0
    ? h("p", {}, "Your applications use the API with your organization's keys. ", h("a", { href: href("/usage") }, "See usage"))
    : isAdmin()
      ? h("p", {}, "Next: ", h("a", { href: href("/keys") }, "create an API key"), " for your first application.")
      : h("p", {}, "Ask an owner or admin of your organization for an API key.");
  return notice("success", h("div", { class: "notice-body" }, h("strong", {}, "Your organization can use the API."), next));
}

function summaryCards(data) {
  const billing = data.billing;
  const money = (micros) => formatMoney(micros, billing.currency);
  const plan = billing.plan;
  const credit = billing.creditLimitMicros > 0;
  const activeKeys = data.apiKeys.filter((key) => key.status === "active").length;
  return h(
    "div",
    { class: "cards" },
    stat("Plan", plan ? plan.name : data.organization.planCode, plan ? `${money(plan.monthlyFeeMicros)} per month` : null),
    credit
      ? stat("Balance", money(billing.balanceMicros), `Credit limit ${money(billing.creditLimitMicros)}; available ${money(billing.balanceMicros + billing.creditLimitMicros)}`)
      : stat("Balance", money(billing.balanceMicros), billing.activated ? `Active since ${formatDate(billing.activatedAt, false)}` : "Not active yet"),
    stat("Spend this month", money(billing.usage.costMicros), `Since ${formatDate(billing.usage.since, false)}: `, h("a", { href: href("/requests"), class: "usage-split" }, requestSplit(billing.usage))),
    stat("API keys", formatNumber(activeKeys), h("a", { href: href("/keys") }, activeKeys === 1 ? "1 active key" : `${activeKeys} active keys`)),
  );
}

function subjectName(rule, data) {
  if (rule.subjectType === "organization") return "Organization";
  if (rule.subjectType === "key") {
    const key = data.apiKeys.find((item) => item.id === rule.subjectId);
    return `Key ${key ? key.alias : rule.subjectId}`;
  }
  const system = data.systems.find((item) => item.id === rule.subjectId);
  return `System ${system ? system.name : rule.subjectId}`;
}

/** What the amount of a budget counts, in words (the gateway charges a budget exactly its rule's models). */
function budgetScope(budget, data) {
  const subject = subjectName(budget, data);
  const who = budget.subjectType === "organization" ? "the organization" : subject.replace(/^(Key|System) /, (word) => word.toLowerCase());
  if (budget.models.includes("*")) return `Counts the spend of ${who} on every model.`;
  return `Counts the spend of ${who} on ${budget.models.length === 1 ? "the model" : "the models"} ${budget.models.join(", ")} only.`;
}

/** Why a budget refuses requests, and until when; null while the next request fits. */
function refusalText(budget, money) {
  if (!budget.refusing) return null;
  const until = `until the ${budget.period === "day" ? "day (UTC)" : "month"} ends or the budget is raised`;
  if (budget.availableMicros <= 0) {
    return budget.heldMicros > 0
      ? `Refusing requests: requests in flight hold the rest of the budget. Requests that cost money get 402 until they finish, or ${until}.`
      : `Refusing requests: the budget is used up. Requests that cost money get 402 ${until}.`;
  }
  const last = budget.lastReservation;
  return `Refusing requests: ${money(budget.availableMicros)} is left, less than the ${money(last.askedMicros)} the last request reserved (a request reserves its worst-case cost). Requests like it get 402 ${until}; a smaller max_tokens may fit.`;
}

/** The budgets as the gateway's live counters see them: spend, what requests in flight hold, refusing. */
function budgetsSection(meters, data) {
  const budgets = meters.budgets;
  const title = "Spend against budgets";
  if (budgets.length === 0) {
    return section(title, emptyState("No budgets are set. A policy rule with a budget caps the spend of the organization, a system or a key.", isAdmin() ? h("p", {}, h("a", { href: href("/rules") }, "Set a budget in policy rules")) : null));
  }
  const money = (micros) => formatMoney(micros, meters.currency);
  return section(
    title,
    h(
      "ul",
      { class: "budget-list" },
      budgets.map((budget) => {
        const limit = budget.limitMicros;
        const used = budget.spentMicros + budget.heldMicros;
        const ratio = limit > 0 ? used / limit : used > 0 ? 1 : 0;
        const refusal = refusalText(budget, money);
        const state = refusal || ratio >= 1 ? "over" : ratio >= 0.8 ? "near" : "ok";
        const label = `${subjectName(budget, data)} · ${budget.models.join(", ")}`;
        const labelId = `budget-${budget.ruleId}`;
        const figuresId = `budget-figures-${budget.ruleId}`;
        const period = budget.period === "day" ? "day (UTC)" : "month";
        const percent = `${Math.round(ratio * 100)}% used`;
        return h(
          "li",
          { class: ["meter", `meter-${state}`] },
          h("span", { id: labelId }, h("strong", {}, label), budget.description ? ` — ${budget.description}` : ""),
          h("progress", { max: 100, value: Math.round(Math.min(1, ratio) * 100), "aria-labelledby": labelId, "aria-describedby": figuresId, "aria-valuetext": refusal ? `${percent}, refusing requests` : percent }),
          h(
            "span",
            { class: "meter-figures", id: figuresId },
            h("span", {}, `${money(budget.spentMicros)} of ${money(limit)} this ${period}`),
            h("span", { class: "meter-held" }, `${money(budget.heldMicros)} held by requests in flight`),
            h("span", { class: "meter-percent" }, refusal ? `${percent} · refusing requests` : percent),
          ),
          h("span", { class: "muted meter-scope" }, budgetScope(budget, data)),
          refusal ? h("strong", { class: "meter-warning" }, refusal) : null,
        );
      }),
    ),
  );
}

/** The plan's limits and what the organization used of them in the last minute. */
function limitsSection(meters) {
  const plan = meters.plan;
  const minute = meters.currentMinute;
  const money = (micros) => formatMoney(micros, meters.currency);
  // Without a limit the gateway keeps no window, so there is no count to show either.
  const window = (used, limit) => (limit > 0 ? `${formatNumber(used)} of ${formatNumber(limit)}` : "No limit");
  return section(
    "Plan limits",
    h(
      "div",
      { class: "cards limits" },
      stat("Requests this minute", window(minute.requests, plan.rpm), plan.rpm > 0 ? `Plan ${plan.name}: ${formatNumber(plan.rpm)} requests per minute, per key and for the organization` : `Plan ${plan.name} sets no request limit`),
      stat("Tokens this minute", window(minute.tokens, plan.tpm), plan.tpm > 0 ? `Plan ${plan.name}: ${formatNumber(plan.tpm)} tokens per minute, per key and for the organization` : `Plan ${plan.name} sets no token limit`),
      stat("Credit limit", plan.creditLimitMicros > 0 ? money(plan.creditLimitMicros) : "None", plan.creditLimitMicros > 0 ? "Spend allowed below a zero balance" : "Requests need a positive balance"),
    ),
    h("p", { class: "muted" }, "A policy rule may set lower RPM and TPM limits for a key, a system or the organization."),
  );
}

function dailyChart(spend, currency) {
  const title = "Daily spend by model this month";
  const money = (micros) => formatMoney(micros, currency);
  // Refused requests cost nothing: a month of them only is still "no spend" (an axis of $0.000001 steps says nothing).
  const total = spend.models.reduce((sum, model) => sum + spend.cost.get(model).reduce((a, b) => a + b, 0), 0);
  if (spend.models.length === 0 || total === 0) return section(title, emptyState("No spend this month yet. Requests through your API keys show up here by day and model."));
  const series = limitSeries(spend.models.map((model) => ({ name: model, values: spend.cost.get(model) })));
  const chart = barChart({ title, categories: spend.days, series, format: money, categoryLabel: shortDay, legend: true });
  const rows = spend.days.map((day, index) => ({ day, index })).filter(({ day }) => spend.perDay.has(day));
  const columns = [
    { label: "Day (UTC)", render: (row) => row.day },
    ...series.map((item) => ({ label: item.name, numeric: true, render: (row) => money(item.values[row.index]) })),
    { label: "Total", numeric: true, render: (row) => money(series.reduce((sum, item) => sum + item.values[row.index], 0)) },
  ];
  return section(
    title,
    chart,
    h("details", { class: "table-alternative" }, h("summary", {}, "Show the chart as a table"), table(columns, rows, { caption: "Spend by day and model", rowHeaders: true, empty: "No spend this month." })),
  );
}

function openInvoices(billing) {
  if (!billing.openInvoices || billing.openInvoices.length === 0) return null;
  return section(
    "Unpaid invoices",
    table(
      [
        { label: "Invoice", render: (row) => h("code", {}, row.id) },
        { label: "Plan", key: "planCode" },
        { label: "Amount", numeric: true, render: (row) => formatMoney(row.amountMicros, billing.currency) },
        { label: "Opened", render: (row) => formatDate(row.createdAt) },
      ],
      billing.openInvoices,
      { caption: "Unpaid invoices" },
    ),
  );
}

/** The chart reads its own usage report (by day, split by model), so it fills in after the rest of the page. */
async function fillDailyChart(slot, currency) {
  const today = utcToday();
  try {
    const spend = await spendByDayAndModel(monthStart(today), today);
    slot.replaceWith(dailyChart(spend, currency));
  } catch (exc) {
    show(slot, h("h2", {}, "Daily spend by model this month"), notice("error", `The chart could not be loaded: ${errorText(exc)}`));
  }
}

async function render(main) {
  loading(main);
  const [data, meters] = await Promise.all([api("GET", "/overview"), api("GET", "/meters")]);
  const activeKeys = data.apiKeys.filter((key) => key.status === "active").length;
  const chartSlot = section("Daily spend by model this month", h("p", { class: "loading", role: "status" }, "Loading the chart…"));
  show(main, billingNotice(data.billing, activeKeys, data.organization), summaryCards(data), limitsSection(meters), budgetsSection(meters, data), chartSlot, openInvoices(data.billing));
  await fillDailyChart(chartSlot, data.billing.currency);
}

page("/overview", { title: "Overview", render });

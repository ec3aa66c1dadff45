// The overview: plan, balance or credit, the invoice state with what to do next, this month's spend against
// the budgets of the policy rules, and a chart of this month's daily spend by model.

import { api } from "../api.js";
import { barChart } from "../chart.js";
import { href, page } from "../router.js";
import { session } from "../session.js";
import { copyButton, emptyState, errorText, formatDate, formatMoney, formatNumber, h, loading, notice, section, show, table } from "../ui.js";
import { paymentHow } from "./invoices.js";
import { globMatches, limitSeries, monthStart, shortDay, spendByDayAndModel, usageReport, utcToday } from "../usage_data.js";

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
    stat("Spend this month", money(billing.usage.costMicros), `${formatNumber(billing.usage.requests)} requests since ${formatDate(billing.usage.since, false)}`),
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

function ruleCounts(rule, model) {
  return rule.models.includes("*") || rule.models.some((glob) => globMatches(glob, model ?? ""));
}

/**
 * The spend a budget rule has used in its period, from the usage reports: {micros, exact}. Rows are split
 * by model (organization reports are by model; key and system reports carry a per-model `breakdown`), so
 * only the rule's models count. `exact` is false when the report cannot tell the models apart (no
 * breakdown, or spend of an unknown model): the amount is then the subject's spend on every model, an
 * upper bound of the rule's.
 */
function budgetSpend(rule, groups) {
  const period = rule.budget.period === "day" ? "day" : "month";
  const everyModel = rule.models.includes("*");
  const report = groups[`${rule.subjectType}:${period}`];
  const sum = (rows) => rows.reduce((total, row) => total + row.costMicros, 0);
  let rows;
  if (rule.subjectType === "organization") rows = report.rows;
  else {
    const column = rule.subjectType === "key" ? "keyId" : "systemId";
    const row = report.rows.find((item) => item[column] === rule.subjectId);
    if (!row) return { micros: 0, exact: true };
    if (everyModel) return { micros: row.costMicros, exact: true };
    if (!Array.isArray(row.breakdown)) return { micros: row.costMicros, exact: false };
    rows = row.breakdown;
  }
  if (everyModel) return { micros: sum(rows), exact: true };
  const unknown = rows.filter((row) => row.model === null || row.model === undefined);
  const counted = rows.filter((row) => row.model !== null && row.model !== undefined && ruleCounts(rule, row.model));
  return unknown.some((row) => row.costMicros > 0) ? { micros: sum(counted) + sum(unknown), exact: false } : { micros: sum(counted), exact: true };
}

/** What the amount of a budget counts, in words. */
function budgetScope(rule, data, used) {
  const subject = subjectName(rule, data);
  const who = rule.subjectType === "organization" ? "the organization" : subject.replace(/^(Key|System) /, (word) => word.toLowerCase());
  if (rule.models.includes("*")) return `Counts the spend of ${who} on every model.`;
  const models = rule.models.join(", ");
  if (used.exact) return `Counts the spend of ${who} on ${rule.models.length === 1 ? "the model" : "the models"} ${models} only.`;
  return `Upper bound: the usage report cannot tell every request's model apart, so this includes spend of ${who} on models other than ${models}.`;
}

async function budgetsSection(rules, data) {
  const budgets = rules.filter((rule) => rule.budget && rule.effect === "allow");
  const title = "Spend against budgets";
  if (budgets.length === 0) {
    return section(title, emptyState("No budgets are set. A policy rule with a budget caps the spend of the organization, a system or a key.", isAdmin() ? h("p", {}, h("a", { href: href("/rules") }, "Set a budget in policy rules")) : null));
  }
  const today = utcToday();
  const from = monthStart(today);
  // One usage report per grouping and period the budgets need (an organization's budget sums its models).
  const needed = new Set(budgets.map((rule) => `${rule.subjectType}:${rule.budget.period === "day" ? "day" : "month"}`));
  const groups = {};
  await Promise.all(
    [...needed].map(async (name) => {
      const [subject, period] = name.split(":");
      groups[name] = subject === "organization" ? await usageReport(period === "day" ? today : from, today, "model") : await usageReport(period === "day" ? today : from, today, subject, "model");
    }),
  );
  const money = (micros) => formatMoney(micros, data.billing.currency);
  return section(
    title,
    h(
      "ul",
      { class: "budget-list" },
      budgets.map((rule) => {
        const used = budgetSpend(rule, groups);
        const limit = rule.budget.amountMicros;
        const usedMicros = used.micros;
        const ratio = limit > 0 ? usedMicros / limit : usedMicros > 0 ? 1 : 0;
        const state = ratio >= 1 ? "over" : ratio >= 0.8 ? "near" : "ok";
        const label = `${subjectName(rule, data)} · ${rule.models.join(", ")}`;
        const labelId = `budget-${rule.id}`;
        const figuresId = `budget-figures-${rule.id}`;
        const period = rule.budget.period === "day" ? "day (UTC)" : "month";
        return h(
          "li",
          { class: ["meter", `meter-${state}`] },
          h("span", { id: labelId }, h("strong", {}, label), rule.description ? ` — ${rule.description}` : ""),
          h("progress", { max: 100, value: Math.round(Math.min(1, ratio) * 100), "aria-labelledby": labelId, "aria-describedby": figuresId, "aria-valuetext": `${Math.round(ratio * 100)}% of the budget used` }),
          h(
            "span",
            { class: "meter-figures", id: figuresId },
            h("span", {}, `${used.exact ? "" : "At most "}${money(usedMicros)} of ${money(limit)} this ${period}`),
            h("span", { class: "meter-percent" }, `${Math.round(ratio * 100)}% used`),
          ),
          h("span", { class: "muted meter-scope" }, budgetScope(rule, data, used)),
          state === "over" ? h("strong", { class: "meter-warning" }, `Budget used up: requests that cost money are refused (402) until the ${rule.budget.period === "day" ? "day" : "month"} ends or the budget is raised.`) : null,
        );
      }),
    ),
  );
}

function dailyChart(spend, currency) {
  const title = "Daily spend by model this month";
  const money = (micros) => formatMoney(micros, currency);
  if (spend.models.length === 0) return section(title, emptyState("No spend this month yet. Requests through your API keys show up here by day and model."));
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
  const [data, rules] = await Promise.all([api("GET", "/overview"), api("GET", "/policy-rules").then((answer) => answer.policyRules || [])]);
  const activeKeys = data.apiKeys.filter((key) => key.status === "active").length;
  const budgets = await budgetsSection(rules, data);
  const chartSlot = section("Daily spend by model this month", h("p", { class: "loading", role: "status" }, "Loading the chart…"));
  show(main, billingNotice(data.billing, activeKeys, data.organization), summaryCards(data), budgets, chartSlot, openInvoices(data.billing));
  await fillDailyChart(chartSlot, data.billing.currency);
}

page("/overview", { title: "Overview", render });

// Spend alerts (owners): a threshold — a share of a policy rule's budget, or an amount a day for the
// organization, a system or a key — that calls a webhook (and mails the owners when the gateway sends mail)
// once per period when spend crosses it; with the log of the webhook deliveries.

import { api } from "../api.js";
import { page } from "../router.js";
import { announce, badge, confirmDialog, copyButton, form, formatDate, formatMoney, h, loading, section, stackedTable } from "../ui.js";
import { actionButton, code } from "./admin_kit.js";

const KINDS = [
  { value: "daily", label: "An amount a day (UTC)" },
  { value: "budget", label: "A share of a policy rule's budget" },
];
const SUBJECTS = [
  { value: "organization", label: "The whole organization" },
  { value: "system", label: "One system" },
  { value: "key", label: "One API key" },
];

function what(alert, currency) {
  if (alert.kind === "budget") return `${alert.percent}% of the budget of rule ${alert.ruleId}`;
  const subject = alert.subjectType === "organization" ? "the organization" : `${alert.subjectType} ${alert.subjectId}`;
  return `${formatMoney(alert.amountMicros, currency)} a day for ${subject}`;
}

function secretPanel(secret, onDone) {
  const done = h("button", { type: "button", class: "button" }, "I have stored the secret");
  const panel = h(
    "section",
    { class: "card secret-panel", "aria-labelledby": "alert-secret-title", tabindex: "-1" },
    h("h2", { id: "alert-secret-title" }, "Webhook signing secret"),
    h("p", {}, h("strong", {}, "Copy it now: it will not be shown again."), " Each webhook carries the header modelgate-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\" with this secret>. Check it before trusting a call."),
    h("code", { class: "secret-value", id: "alert-signing-secret" }, secret),
    h("div", { class: "form-actions" }, copyButton(secret, "Copy secret"), done),
  );
  done.addEventListener("click", () => {
    panel.remove();
    onDone();
  });
  return panel;
}

async function render(main) {
  loading(main);
  const [overview, rules] = await Promise.all([api("GET", "/overview"), api("GET", "/policy-rules")]);
  const currency = overview.billing ? overview.billing.currency : "USD";
  const budgeted = (rules.policyRules || []).filter((rule) => rule.budget);
  const secretSlot = h("div", {});
  const listSlot = h("div", {});
  const logSlot = h("div", {});

  async function redraw() {
    const [answer, log] = await Promise.all([api("GET", "/alerts"), api("GET", "/alerts/deliveries")]);
    listSlot.replaceChildren(
      stackedTable(
        [
          { label: "Threshold", class: "wrap", render: (a) => what(a, currency) },
          { label: "Webhook", class: "wrap", render: (a) => code(a.url) },
          { label: "Created", render: (a) => formatDate(a.createdAt, false) },
          { label: "Actions", render: (a) => actionButton("Delete", () => remove(a), { danger: true, ariaLabel: `Delete alert ${what(a, currency)}` }) },
        ],
        answer.alerts,
        { label: "Alerts", empty: "No alerts yet." },
      ),
    );
    logSlot.replaceChildren(
      stackedTable(
        [
          { label: "When", render: (d) => formatDate(d.createdAt) },
          { label: "Alert", render: (d) => code(d.alertId) },
          { label: "Status", render: (d) => badge(d.status) },
          { label: "Attempts", numeric: true, key: "attempts" },
          { label: "Last answer", class: "wrap", render: (d) => d.lastError || (d.lastStatus ? `HTTP ${d.lastStatus}` : "—") },
        ],
        log.deliveries,
        { label: "Webhook deliveries", empty: "No webhook was called yet." },
      ),
    );
  }

  async function remove(alert) {
    const ok = await confirmDialog(`Delete the alert "${what(alert, currency)}"? Its deliveries stay in the log.`, { title: "Delete alert", confirmLabel: "Delete" });
    if (!ok) return;
    await api("DELETE", `/alerts/${encodeURIComponent(alert.id)}`);
    await redraw();
    announce("success", "The alert was deleted.");
  }

  const createForm = form(
    [
      { label: "Alert when", name: "kind", type: "select", required: true, value: "daily", options: KINDS },
      { label: "Webhook URL", name: "url", type: "url", required: true, autocomplete: "off", hint: "http:// or https://; it receives a signed JSON POST." },
      { label: "Applies to", name: "subjectType", type: "select", value: "organization", options: SUBJECTS, hint: "For an amount a day." },
      { label: "System or key id", name: "subjectId", autocomplete: "off", hint: "For one system or key: its id (sys_… or key_…, on the Systems and API keys pages)." },
      { label: `Amount a day (${currency})`, name: "amount", type: "number", min: "0.000001", step: "any", hint: "For an amount a day." },
      {
        label: "Policy rule",
        name: "ruleId",
        type: "select",
        options: [{ value: "", label: budgeted.length ? "Choose a rule with a budget" : "No rule has a budget" }, ...budgeted.map((rule) => ({ value: rule.id, label: `${rule.id} (${formatMoney(rule.budget.amountMicros, currency)} a ${rule.budget.period})` }))],
        hint: "For a share of a budget.",
      },
      { label: "Share of the budget", name: "percent", type: "select", value: "80", options: ["50", "80", "100"].map((p) => ({ value: p, label: `${p} %` })) },
    ],
    async (values, element) => {
      const body = { kind: values.kind, url: values.url };
      if (values.kind === "budget") {
        body.ruleId = values.ruleId;
        body.percent = Number(values.percent);
      } else {
        body.subjectType = values.subjectType;
        if (values.subjectType !== "organization") body.subjectId = values.subjectId;
        body.amountMicros = Math.round(Number(values.amount) * 1_000_000);
      }
      const created = await api("POST", "/alerts", body);
      element.reset();
      if (created.signingSecret) secretSlot.replaceChildren(secretPanel(created.signingSecret, () => secretSlot.replaceChildren()));
      await redraw();
      announce("success", "The alert was created.");
    },
    { submitLabel: "Create alert", busyLabel: "Creating…", label: "Create an alert" },
  );

  await redraw();
  main.replaceChildren(
    h("p", { class: "muted" }, "An alert calls your webhook once a period (the day, or the budget's period) when spend crosses its threshold, retrying until the webhook answers 2xx; when the gateway sends e-mail, the owners get a message too. Spend is checked in the background, so an alert may come a little after the request that crossed it."),
    secretSlot,
    section("Create an alert", createForm),
    section("Alerts", listSlot),
    section("Webhook deliveries", logSlot),
  );
}

page("/alerts", { title: "Alerts", roles: ["owner"], render });

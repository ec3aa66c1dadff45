// Spend alerts (owners): a threshold — a share of a policy rule's budget, or an amount a day for the
// organization, a system or a key — that calls a webhook (and mails the owners when the gateway sends mail)
// once per period when spend crosses it; with the log of the webhook deliveries and the rotation of the
// webhook signing secret. The form shows only the fields of the kind of alert chosen.

import { api } from "../api.js";
import { page } from "../router.js";
import { announce, badge, confirmDialog, copyButton, form, formatDate, formatMoney, h, loading, section, stackedTable } from "../ui.js";
import { actionButton, code } from "./admin_kit.js";

const KINDS = [
  { value: "daily", label: "An amount a day (UTC)" },
  { value: "budget", label: "A share of a policy rule's budget" },
];
// The form's fields of each kind of alert (the others are hidden and disabled, so never checked or sent).
const KIND_FIELDS = { daily: ["subjectType", "subjectId", "amount"], budget: ["ruleId", "percent"] };
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

function secretPanel(secret, onDone, rotated = false) {
  const done = h("button", { type: "button", class: "button" }, "I have stored the secret");
  const panel = h(
    "section",
    { class: "card secret-panel", "aria-labelledby": "alert-secret-title", tabindex: "-1" },
    h("h2", { id: "alert-secret-title" }, rotated ? "New webhook signing secret" : "Webhook signing secret"),
    h("p", {}, h("strong", {}, "Copy it now: it will not be shown again."), rotated ? " The old secret signs no webhook from now on." : "", " Each webhook carries the header modelgate-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\" with this secret>. Check it before trusting a call."),
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
      { label: "Applies to", name: "subjectType", type: "select", value: "organization", options: SUBJECTS },
      { label: "System or key id", name: "subjectId", required: true, autocomplete: "off", hint: "Its id: sys_… or key_…, on the Systems and API keys pages." },
      { label: `Amount a day (${currency})`, name: "amount", type: "number", required: true, min: "0.000001", step: "any" },
      {
        label: "Policy rule",
        name: "ruleId",
        type: "select",
        required: true,
        options: [{ value: "", label: budgeted.length ? "Choose a rule with a budget" : "No rule has a budget" }, ...budgeted.map((rule) => ({ value: rule.id, label: `${rule.id} (${formatMoney(rule.budget.amountMicros, currency)} a ${rule.budget.period})` }))],
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
      showKindFields();
      if (created.signingSecret) secretSlot.replaceChildren(secretPanel(created.signingSecret, () => secretSlot.replaceChildren()));
      await redraw();
      announce("success", "The alert was created.");
    },
    { submitLabel: "Create alert", busyLabel: "Creating…", label: "Create an alert" },
  );

  const byName = Object.fromEntries(createForm.fields.filter((wrapper) => wrapper.fieldName).map((wrapper) => [wrapper.fieldName, wrapper]));
  function showKindFields() {
    const kind = byName.kind.control.value;
    const organizationWide = byName.subjectType.control.value === "organization";
    for (const [fieldsKind, names] of Object.entries(KIND_FIELDS)) {
      for (const name of names) {
        const shown = fieldsKind === kind && !(name === "subjectId" && organizationWide);
        byName[name].hidden = !shown;
        byName[name].control.disabled = !shown;
      }
    }
  }
  byName.kind.control.addEventListener("change", showKindFields);
  byName.subjectType.control.addEventListener("change", showKindFields);
  showKindFields();

  async function rotate() {
    const ok = await confirmDialog("Make a new webhook signing secret? The current one stops signing at once: webhooks (retries included) carry the new signature from now on, so update your receiver.", { title: "Rotate signing secret", confirmLabel: "Rotate" });
    if (!ok) return;
    const answer = await api("POST", "/alerts/signing-secret/rotate");
    secretSlot.replaceChildren(secretPanel(answer.signingSecret, () => secretSlot.replaceChildren(), true));
    secretSlot.querySelector(".secret-panel").focus();
    announce("success", "A new signing secret was made.");
  }
  const rotation = section(
    "Webhook signing secret",
    h("p", {}, "Every webhook is signed with your organization's secret (header modelgate-signature). Rotate it when it may have leaked: the new one is shown once, and the old one signs nothing more."),
    h("div", { class: "form-actions" }, actionButton("Rotate signing secret", rotate)),
  );

  await redraw();
  main.replaceChildren(
    h("p", { class: "muted" }, "An alert calls your webhook once a period (the day, or the budget's period) when spend crosses its threshold, retrying until the webhook answers 2xx; when the gateway sends e-mail, the owners get a message too. Spend is checked in the background, so an alert may come a little after the request that crossed it."),
    secretSlot,
    section("Create an alert", createForm),
    section("Alerts", listSlot),
    section("Webhook deliveries", logSlot),
    rotation,
  );
}

page("/alerts", { title: "Alerts", roles: ["owner"], render });

// API keys of the organization, a page at a time (GET /api/key-report): created, last used, spend today and
// this month, and the limits that apply (the plan's and the rules'); sorted and filtered by the server.
// Owners and admins create a key with its budget, RPM/TPM and models in one form (the API writes the key's
// rule), revoke keys, and may let members create their own keys.

import { api } from "../api.js";
import { page, replaceParams } from "../router.js";
import { session } from "../session.js";
import { announce, badge, confirmDialog, copyButton, emptyState, form, formatDate, formatMoney, formatNumber, h, loading, section, show, stackedTable } from "../ui.js";
import { loadCatalogue, modelFields, modelsOf } from "./model_picker.js";

const ADMIN = ["owner", "admin"];
const PAGE_SIZE = 50;
const SORTS = {
  "-created": "Newest first",
  created: "Oldest first",
  alias: "Alias A–Z",
  "-alias": "Alias Z–A",
  "-lastUsed": "Last used",
  "-spendMonth": "Spend this month",
  "-spendToday": "Spend today",
  status: "Status",
};
const SPECIFICITY = { key: 3, system: 2, organization: 1 };
const MAX_RATE = 1_000_000_000;

function secretPanel(created, onDone) {
  const done = h("button", { type: "button", class: "button" }, "I have stored the secret");
  const panel = h(
    "section",
    { class: "card secret-panel", "aria-labelledby": "secret-title", tabindex: "-1" },
    h("h2", { id: "secret-title" }, `Secret of the new key "${created.alias}"`),
    h("p", {}, h("strong", {}, "Copy it now: it will not be shown again."), " Store it where your application reads its configuration. If it is lost, revoke the key and create a new one."),
    h("code", { class: "secret-value", id: "new-key-secret" }, created.secret),
    h("div", { class: "form-actions" }, copyButton(created.secret, "Copy secret"), done),
  );
  done.addEventListener("click", () => {
    panel.remove();
    onDone();
  });
  return panel;
}

function systemName(systems, id) {
  if (!id) return "";
  const system = systems.find((item) => item.id === id);
  return system ? system.name : id;
}

/** The most specific rule's value of `field` (key, then system, then organization), else the plan's. */
function rate(key, plan, field) {
  const rules = key.rules.filter((rule) => rule.effect === "allow" && rule[field] !== null && rule[field] !== undefined);
  rules.sort((a, b) => SPECIFICITY[b.subjectType] - SPECIFICITY[a.subjectType]);
  if (rules.length) return `${rules[0][field] ? formatNumber(rules[0][field]) : "no per-key limit"} ${field.toUpperCase()} (${rules[0].subjectType} rule)`;
  if (!plan) return null;
  return `${plan[field] ? formatNumber(plan[field]) : "unlimited"} ${field.toUpperCase()} (plan)`;
}

/** The limits that apply to a key: budgets (with what is spent), rates, and the models allowed or denied. */
function limitsCell(key, plan, money) {
  const items = [];
  for (const rule of key.rules) {
    if (rule.budget) {
      items.push(`Budget ${money(rule.budget.amountMicros)} per ${rule.budget.period} (${rule.subjectType}; ${money(rule.budget.spentMicros)} spent)`);
    }
  }
  for (const field of ["rpm", "tpm"]) {
    const text = rate(key, plan, field);
    if (text) items.push(text);
  }
  const allowed = key.rules.filter((rule) => rule.effect === "allow").flatMap((rule) => rule.models);
  const denied = key.rules.filter((rule) => rule.effect === "deny").flatMap((rule) => rule.models);
  if (allowed.length) items.push(`Models: ${[...new Set(allowed)].join(", ")}`);
  if (denied.length) items.push(`Denied: ${[...new Set(denied)].join(", ")}`);
  return h("ul", { class: "plain-list key-limits" }, items.map((text) => h("li", {}, text)));
}

/** The create form's limit fields (owners and admins): budget, RPM, TPM and the models the key may use. */
function limitFields(catalogue) {
  return [
    { label: "Budget (USD)", name: "budgetAmount", type: "number", min: 0, max: 1_000_000_000, step: "any", hint: "Optional. The most this key may spend per period; 0 means no spend at all." },
    { label: "Budget period", name: "budgetPeriod", type: "select", value: "month", options: [{ value: "month", label: "Per calendar month (UTC)" }, { value: "day", label: "Per day (UTC)" }] },
    { label: "Requests per minute (RPM)", name: "rpm", type: "number", min: 0, max: MAX_RATE, step: 1, hint: "Optional; replaces the plan's per-key limit. 0 means no per-key limit." },
    { label: "Tokens per minute (TPM)", name: "tpm", type: "number", min: 0, max: MAX_RATE, step: 1, hint: "Optional; replaces the plan's per-key limit. 0 means no per-key limit." },
    ...modelFields(catalogue, [], { hint: "Optional: the models this key may use. None picked: what the organization's rules allow." }),
  ];
}

function createBody(values, admin) {
  const body = { alias: values.alias };
  if (values.systemId) body.systemId = values.systemId;
  if (!admin) return body;
  if (values.ownerEmail) body.ownerEmail = values.ownerEmail;
  if (values.budgetAmount !== null && values.budgetAmount !== undefined) body.budget = { amountMicros: Math.round(values.budgetAmount * 1_000_000), period: values.budgetPeriod };
  if (values.rpm !== null && values.rpm !== undefined) body.rpm = values.rpm;
  if (values.tpm !== null && values.tpm !== undefined) body.tpm = values.tpm;
  const models = modelsOf(values);
  if (models.length) body.models = models;
  return body;
}

async function render(main, params) {
  loading(main);
  const admin = ADMIN.includes(session.role);
  const [data, systemsAnswer, settings, catalogue] = await Promise.all([
    api("GET", "/overview"),
    api("GET", "/systems"),
    api("GET", "/organization/settings"),
    admin ? loadCatalogue() : Promise.resolve({ models: [] }),
  ]);
  const systems = systemsAnswer.systems || [];
  const money = (micros) => formatMoney(micros, (data.billing && data.billing.currency) || "USD");
  const mayCreate = admin || settings.membersCreateKeys;
  const state = { filter: params.filter || "", sort: SORTS[params.sort] ? params.sort : "-created", offset: Math.max(0, Number.parseInt(params.offset || "0", 10) || 0) };
  const listArea = h("div", { class: "key-list", "aria-live": "polite" });
  const secretArea = h("div", { class: "secret-area" });
  const position = h("span", { class: "muted pager-position", id: "key-page-position" });
  const previous = h("button", { type: "button", class: "button" }, "← Previous");
  const next = h("button", { type: "button", class: "button" }, "Next →");
  const pager = h("nav", { class: "pager", "aria-label": "Key pages" }, previous, position, next);
  let shownRequest = 0;

  async function load() {
    const request = ++shownRequest;
    replaceParams({ filter: state.filter, sort: state.sort === "-created" ? "" : state.sort, offset: state.offset || "" });
    listArea.setAttribute("aria-busy", "true");
    try {
      const report = await api("GET", "/key-report", undefined, { query: { q: state.filter, sort: state.sort, limit: PAGE_SIZE, offset: state.offset } });
      if (request === shownRequest) drawList(report);
    } finally {
      if (request === shownRequest) listArea.removeAttribute("aria-busy");
    }
  }

  async function revoke(key) {
    const confirmed = await confirmDialog(`Revoke the key "${key.alias}"? Applications using it get 401 from the next request on. This cannot be undone.`, { title: "Revoke API key", confirmLabel: "Revoke key" });
    if (!confirmed) return;
    try {
      await api("POST", `/organization/api-keys/${encodeURIComponent(key.id)}/revoke`);
      announce("success", `The key "${key.alias}" is revoked.`);
      await load();
    } catch (exc) {
      announce("error", `Revoking "${key.alias}" failed: ${exc.message}`);
    }
  }

  function drawList(report) {
    const columns = [
      { label: "Alias", class: "key-alias", render: (key) => [h("strong", {}, key.alias), h("br"), h("code", { class: "muted small" }, key.id)] },
      { label: "Status", render: (key) => badge(key.status) },
      { label: "System", class: "key-system", render: (key) => systemName(systems, key.systemId) || h("span", { class: "muted" }, "—") },
      { label: "Owner", class: "key-owner", key: "ownerEmail" },
      { label: "Created, used", class: "key-dates", render: (key) => [`Created ${formatDate(key.createdAt)}`, h("br"), key.lastUsedAt ? `Used ${formatDate(key.lastUsedAt)}` : h("span", { class: "muted" }, "Never used")] },
      { label: "Spend", numeric: true, render: (key) => [`Today ${money(key.spendTodayMicros)}`, h("br"), `Month ${money(key.spendMonthMicros)}`] },
      { label: "Limits", class: "key-limits-cell", render: (key) => limitsCell(key, report.plan, money) },
    ];
    if (admin) {
      columns.push({
        label: "Actions",
        render: (key) => (key.status === "active" ? h("button", { type: "button", class: "button small danger", "aria-label": `Revoke ${key.alias}`, onclick: () => revoke(key) }, "Revoke") : null),
      });
    }
    const first = report.total === 0 ? 0 : report.offset + 1;
    const last = report.offset + report.keys.length;
    position.textContent = report.total ? `Keys ${formatNumber(first)}–${formatNumber(last)} of ${formatNumber(report.total)}` : "";
    previous.disabled = report.offset === 0;
    next.disabled = last >= report.total;
    pager.hidden = report.total <= PAGE_SIZE && report.offset === 0;
    let body;
    if (report.total === 0 && !state.filter) {
      body = emptyState(mayCreate ? "No API keys yet. Create one above for your first application." : "No API keys yet. An owner or admin creates them.");
    } else {
      body = stackedTable(columns, report.keys, { caption: `API keys (${SORTS[state.sort].toLowerCase()})`, empty: `No key matches "${state.filter}".` });
    }
    show(listArea, h("p", { class: "muted", role: "status" }, report.total ? `${formatNumber(report.total)} keys${state.filter ? ` match "${state.filter}"` : ""}.` : ""), body);
  }

  const filter = h("input", { type: "search", id: "key-filter", value: state.filter, placeholder: "alias, status, owner or id", autocomplete: "off" });
  filter.addEventListener("input", () => {
    state.filter = filter.value.trim();
    state.offset = 0;
    load();
  });
  const sort = h("select", { id: "key-sort" }, Object.entries(SORTS).map(([value, label]) => h("option", { value, selected: value === state.sort }, label)));
  sort.addEventListener("change", () => {
    state.sort = sort.value;
    state.offset = 0;
    load();
  });
  previous.addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - PAGE_SIZE);
    load().then(() => (previous.disabled ? next : previous).focus());
  });
  next.addEventListener("click", () => {
    state.offset += PAGE_SIZE;
    load().then(() => (next.disabled ? previous : next).focus());
  });

  let createSection = null;
  if (mayCreate) {
    const fields = [
      { label: "Alias", name: "alias", required: true, maxlength: 128, hint: "A unique name, e.g. the application that uses the key." },
      {
        label: "System",
        name: "systemId",
        type: "select",
        options: [{ value: "", label: "No system" }, ...systems.map((system) => ({ value: system.id, label: system.name }))],
        hint: systems.length ? "Optional. Policy rules of the system apply to its keys." : "Optional; there are no systems yet, so the key belongs to the organization.",
      },
    ];
    if (admin) {
      fields.push({ label: "Owner e-mail", name: "ownerEmail", type: "email", maxlength: 320, hint: "Optional; a member of the organization, you by default.", list: "member-emails" }, ...limitFields(catalogue));
    }
    const createForm = form(
      fields,
      async (values, element) => {
        const created = await api("POST", "/organization/api-keys", createBody(values, admin));
        element.reset();
        const panel = secretPanel(created, () => filter.focus());
        show(secretArea, panel);
        panel.focus();
        await load();
      },
      { submitLabel: "Create key", busyLabel: "Creating…", label: "Create an API key" },
    );
    if (admin) {
      const limitNames = ["budgetAmount", "budgetPeriod", "rpm", "tpm", "pickedModels", "modelPatterns"];
      const wrappers = createForm.fields.filter((w) => limitNames.includes(w.fieldName));
      const fieldset = h("fieldset", { class: "rule-group key-limits-fields" }, h("legend", {}, "Limits of this key (optional; written as the key's rule)"));
      wrappers[0].before(fieldset);
      fieldset.append(...wrappers);
    }
    createSection = section(
      "Create an API key",
      admin ? null : h("p", { class: "muted" }, "Your organization lets members create their own keys; the key is yours. Owners and admins set its limits."),
      createForm,
      h("datalist", { id: "member-emails" }, (data.members || []).map((member) => h("option", { value: member.email }))),
    );
  }

  let settingsSection = null;
  if (admin) {
    const toggle = h("input", { type: "checkbox", id: "members-create-keys", checked: Boolean(settings.membersCreateKeys) });
    toggle.addEventListener("change", async () => {
      try {
        const saved = await api("PATCH", "/organization/settings", { membersCreateKeys: toggle.checked });
        toggle.checked = saved.membersCreateKeys;
        announce("success", saved.membersCreateKeys ? "Members may now create their own keys." : "Only owners and admins create keys now.");
      } catch (exc) {
        toggle.checked = !toggle.checked;
        announce("error", `Saving the setting failed: ${exc.message}`);
      }
    });
    settingsSection = section(
      "Who creates keys",
      h("div", { class: "field field-checkbox" }, toggle, h("label", { for: "members-create-keys" }, "Members may create their own API keys")),
      h("p", { class: "hint" }, "Off by default. A member's key is owned by the member; owners and admins set its limits and revoke it."),
    );
  }

  show(main,
    secretArea,
    createSection,
    section(
      "Keys",
      mayCreate ? null : h("p", { class: "muted" }, "Owners and admins create and revoke keys; ask one of them for a key."),
      h(
        "div",
        { class: "toolbar" },
        h("div", { class: "field" }, h("label", { for: "key-filter" }, "Filter keys"), filter),
        h("div", { class: "field" }, h("label", { for: "key-sort" }, "Sort by"), sort),
      ),
      listArea,
      pager,
    ),
    settingsSection,
  );
  await load();
}

page("/keys", { title: "API keys", render });

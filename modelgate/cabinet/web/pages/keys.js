// API keys of the organization: the list (from GET /api/overview), a filter, and for owners and admins
// creating a key (its secret shown once) and revoking one after a confirmation.

import { api } from "../api.js";
import { page, replaceParams } from "../router.js";
import { session } from "../session.js";
import { announce, badge, confirmDialog, copyButton, emptyState, form, h, loading, section, show, stackedTable } from "../ui.js";

const ADMIN = ["owner", "admin"];

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

function matches(key, systems, text) {
  if (!text) return true;
  const needle = text.toLowerCase();
  return [key.alias, key.status, key.ownerEmail, key.id, systemName(systems, key.systemId)].some((value) => (value || "").toLowerCase().includes(needle));
}

async function render(main, params) {
  loading(main);
  const admin = ADMIN.includes(session.role);
  const [data, systemsAnswer] = await Promise.all([api("GET", "/overview"), api("GET", "/systems")]);
  let keys = data.apiKeys;
  const systems = systemsAnswer.systems || [];
  let filterText = params.filter || "";
  const listArea = h("div", { class: "key-list" });
  const secretArea = h("div", { class: "secret-area" });

  async function reload() {
    keys = (await api("GET", "/overview")).apiKeys;
    drawList();
  }

  async function revoke(key) {
    const confirmed = await confirmDialog(`Revoke the key "${key.alias}"? Applications using it get 401 from the next request on. This cannot be undone.`, { title: "Revoke API key", confirmLabel: "Revoke key" });
    if (!confirmed) return;
    try {
      await api("POST", `/organization/api-keys/${encodeURIComponent(key.id)}/revoke`);
      announce("success", `The key "${key.alias}" is revoked.`);
      await reload();
    } catch (exc) {
      announce("error", `Revoking "${key.alias}" failed: ${exc.message}`);
    }
  }

  function drawList() {
    const shown = keys.filter((key) => matches(key, systems, filterText));
    const columns = [
      { label: "Alias", class: "key-alias", render: (key) => [h("strong", {}, key.alias), h("br"), h("code", { class: "muted small" }, key.id)] },
      { label: "Status", render: (key) => badge(key.status) },
      { label: "System", render: (key) => systemName(systems, key.systemId) || h("span", { class: "muted" }, "—") },
      { label: "Owner", key: "ownerEmail" },
    ];
    if (admin) {
      columns.push({
        label: "Actions",
        render: (key) => (key.status === "active" ? h("button", { type: "button", class: "button small danger", "aria-label": `Revoke ${key.alias}`, onclick: () => revoke(key) }, "Revoke") : null),
      });
    }
    const active = keys.filter((key) => key.status === "active").length;
    show(listArea,
      h("p", { class: "muted", role: "status" }, keys.length === 0 ? "" : `${shown.length} of ${keys.length} keys shown; ${active} active.`),
      keys.length === 0
        ? emptyState(admin ? "No API keys yet. Create one above for your first application." : "No API keys yet. An owner or admin creates them.")
        : stackedTable(columns, shown, { caption: "API keys", empty: `No key matches "${filterText}".` }),
    );
  }

  const filter = h("input", { type: "search", id: "key-filter", value: filterText, placeholder: "alias, status, system or owner", autocomplete: "off" });
  filter.addEventListener("input", () => {
    filterText = filter.value.trim();
    replaceParams(filterText ? { filter: filterText } : {});
    drawList();
  });

  let createSection = null;
  if (admin) {
    const createForm = form(
      [
        { label: "Alias", name: "alias", required: true, maxlength: 128, hint: "A unique name, e.g. the application that uses the key." },
        {
          label: "System",
          name: "systemId",
          type: "select",
          options: [{ value: "", label: "No system" }, ...systems.map((system) => ({ value: system.id, label: system.name }))],
          hint: systems.length ? "Optional. Policy rules of the system apply to its keys." : "Optional; there are no systems yet, so the key belongs to the organization.",
        },
        { label: "Owner e-mail", name: "ownerEmail", type: "email", maxlength: 320, hint: "Optional; defaults to you.", list: "member-emails" },
      ],
      async (values, element) => {
        const body = { alias: values.alias };
        if (values.systemId) body.systemId = values.systemId;
        if (values.ownerEmail) body.ownerEmail = values.ownerEmail;
        const created = await api("POST", "/organization/api-keys", body);
        element.reset();
        const panel = secretPanel(created, () => filter.focus());
        show(secretArea, panel);
        panel.focus();
        await reload();
      },
      { submitLabel: "Create key", busyLabel: "Creating…" },
    );
    createSection = section(
      "Create an API key",
      createForm,
      h("datalist", { id: "member-emails" }, (data.members || []).map((member) => h("option", { value: member.email }))),
    );
  }

  show(main,
    secretArea,
    createSection,
    section(
      "Keys",
      admin ? null : h("p", { class: "muted" }, "Owners and admins create and revoke keys; ask one of them for a key."),
      h("div", { class: "toolbar" }, h("div", { class: "field" }, h("label", { for: "key-filter" }, "Filter keys"), filter)),
      listArea,
    ),
  );
  drawList();
}

page("/keys", { title: "API keys", render });

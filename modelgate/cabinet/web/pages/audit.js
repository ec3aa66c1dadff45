// The audit log (owner/admin): who did what to which object, newest first, filtered by event (or a prefix
// such as "content_policy."), rule, key, system and route, read page by page with the API's cursor.

import { api } from "../api.js";
import { page, replaceParams } from "../router.js";
import { errorText, form, formatDate, formatMoney, h, loading, notice, section, stackedTable } from "../ui.js";
import { MANAGER_ROLES, code } from "./admin_kit.js";

const FILTERS = [
  { name: "event", label: "Event", hint: "An event name, or a prefix ending in a dot (content_policy.)", list: "audit-events" },
  { name: "ruleId", label: "Rule or target id", hint: "The object an entry concerns (pol_…, key_…, sys_…)" },
  { name: "keyId", label: "API key id", hint: "Requests made with this key" },
  { name: "systemId", label: "System id", hint: "Requests of this system" },
  { name: "route", label: "Route", hint: "A model API route, e.g. /v1/chat/completions" },
];
const PAGE_SIZES = ["25", "50", "100", "200"];
const DEFAULT_PAGE_SIZE = "50";
const MAX_FILTER_LENGTH = 200;
// Suggestions for the event filter; any other name is accepted too.
const KNOWN_EVENTS = [
  "api_key.",
  "api_key.created",
  "api_key.revoked",
  "auth.",
  "auth.sso_login",
  "auth.sso_failed",
  "content_policy.",
  "content_policy.blocked",
  "content_policy.redacted",
  "content_policy.flagged",
  "invitation.",
  "member.",
  "oidc_provider.",
  "plan.changed",
  "policy_rule.",
  "system.",
];

function actorText(actor) {
  if (!actor) return "—";
  if (actor.email) return actor.email;
  const kind = { management_key: "management key", api_key: "API key", user: "user" }[actor.type] || actor.type;
  return actor.id ? [`${kind} `, code(actor.id)] : kind;
}

/** A details key as words: "ownerEmail" → "owner email"; money keys lose their unit ("amountMicros" → "amount"). */
function detailName(name) {
  return name
    .replace(/Micros$/, "")
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/_/g, " ")
    .toLowerCase();
}

/** A details value as text: money (keys ending in "Micros") formatted, lists joined, objects as name: value. */
function detailValue(name, value, currency) {
  if (value === null || value === undefined || value === "") return "—";
  if (/Micros$/.test(name) && typeof value === "number") return formatMoney(value, currency);
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (Array.isArray(value)) return value.length ? value.map((item) => detailValue("", item, currency)).join(", ") : "none";
  if (typeof value === "object") {
    return Object.entries(value)
      .map(([inner, item]) => `${detailName(inner)}: ${detailValue(inner, item, currency)}`)
      .join("; ");
  }
  return String(value);
}

/** The details object as "name: value" lines, never as markup. */
function detailsText(details, currency) {
  const entries = Object.entries(details || {});
  if (entries.length === 0) return null;
  return h(
    "dl",
    { class: "audit-details" },
    entries.map(([name, value]) => [h("dt", {}, detailName(name)), h("dd", {}, detailValue(name, value, currency))]),
  );
}

/** What the entry concerns: its target and, for model API requests, the key, system and route. */
function objectsText(entry) {
  const parts = [
    ["target", entry.targetId],
    ["key", entry.keyId],
    ["system", entry.systemId],
    ["route", entry.route],
  ].filter(([, value]) => value);
  if (parts.length === 0) return h("span", { class: "muted" }, "—");
  return h("span", { class: "audit-objects" }, parts.map(([name, value]) => h("span", {}, `${name} `, code(value))));
}

function entriesTable(entries, currency) {
  return stackedTable(
    [
      { label: "When", render: (e) => formatDate(e.createdAt) },
      { label: "Event", class: "wrap", render: (e) => [code(e.event), detailsText(e.details, currency)] },
      { label: "Actor", class: "wrap", render: (e) => actorText(e.actor) },
      { label: "Concerns", class: "wrap", render: objectsText },
    ],
    entries,
    { empty: "No audit entries match.", label: "Audit entries" },
  );
}

function filtersOf(params) {
  const filters = {};
  for (const { name } of FILTERS) if (params[name]) filters[name] = params[name];
  filters.limit = PAGE_SIZES.includes(params.limit) ? params.limit : DEFAULT_PAGE_SIZE;
  return filters;
}

async function render(main, params) {
  loading(main);
  let filters = filtersOf(params);
  // Amounts in the details are in the organization's currency (the overview says which; USD if it cannot).
  const currency = await api("GET", "/overview").then(
    (overview) => overview.billing.currency,
    () => "USD",
  );
  // The cursors of the pages before the current one: the API pages forward only, so "Newer" goes back here.
  let previous = [];
  let cursor = null;
  const results = h("div", { "aria-live": "polite" });
  const pager = h("nav", { class: "pager", "aria-label": "Audit log pages" });

  const newer = h("button", { type: "button", class: "button" }, "← Newer");
  const older = h("button", { type: "button", class: "button" }, "Older →");
  const position = h("span", { class: "muted pager-position" });
  pager.append(newer, position, older);

  function setButtons() {
    newer.disabled = previous.length === 0;
    older.disabled = !older.dataset.cursor;
    position.textContent = `Page ${previous.length + 1}`;
    pager.hidden = previous.length === 0 && !older.dataset.cursor;
  }

  async function show(at) {
    newer.disabled = older.disabled = true;
    results.setAttribute("aria-busy", "true");
    try {
      const answer = await api("GET", "/audit-log", undefined, { query: { ...filters, cursor: at } });
      cursor = at;
      results.replaceChildren(entriesTable(answer.entries, currency));
      older.dataset.cursor = answer.nextCursor || "";
    } finally {
      results.removeAttribute("aria-busy");
      setButtons();
    }
  }

  async function turn(action) {
    try {
      await action();
    } catch (exc) {
      results.replaceChildren(notice("error", errorText(exc)));
      setButtons();
    }
    // A pager button that just became disabled dropped the focus: give it to the page of entries.
    if (document.activeElement === document.body || document.activeElement === null) results.querySelector(".table-wrap")?.focus();
  }

  older.addEventListener("click", () =>
    turn(async () => {
      const next = older.dataset.cursor;
      previous.push(cursor);
      try {
        await show(next);
      } catch (exc) {
        previous.pop();
        throw exc;
      }
    }),
  );
  newer.addEventListener("click", () =>
    turn(async () => {
      const back = previous.pop();
      try {
        await show(back === undefined ? null : back);
      } catch (exc) {
        previous.push(back);
        throw exc;
      }
    }),
  );

  const filterForm = form(
    [
      ...FILTERS.map((f) => ({
        label: f.label,
        name: f.name,
        value: filters[f.name] || "",
        hint: f.hint,
        maxlength: MAX_FILTER_LENGTH,
        autocomplete: "off",
        list: f.list || null,
        validate: (value) => (/[\u0000-\u001f\u007f]/.test(value) ? "Use printable characters only." : ""),
      })),
      { label: "Entries per page", name: "limit", type: "select", value: filters.limit, options: PAGE_SIZES },
    ],
    async (values) => {
      filters = filtersOf(values);
      previous = [];
      replaceParams(Object.fromEntries(Object.entries(filters).filter(([name, value]) => !(name === "limit" && value === DEFAULT_PAGE_SIZE))));
      await show(null);
    },
    {
      submitLabel: "Apply filters",
      busyLabel: "Loading…",
      class: "form-inline audit-filters",
      label: "Filter the audit log",
      extra: h("datalist", { id: "audit-events" }, KNOWN_EVENTS.map((name) => h("option", { value: name }))),
    },
  );
  const clear = h("button", { type: "button", class: "button" }, "Clear filters");
  clear.addEventListener("click", () => {
    for (const wrapper of filterForm.fields) if (wrapper.fieldName !== "limit") wrapper.control.value = "";
    filterForm.requestSubmit();
  });
  filterForm.querySelector(".form-actions").append(clear);

  await show(null);
  main.replaceChildren(
    section(
      "Filters",
      h("p", { class: "muted" }, "Entries are newest first. Every filter given must match; the log has no date filter, so page on to go further back."),
      filterForm,
    ),
    section("Entries", results, pager),
  );
}

page("/audit", { title: "Audit log", roles: MANAGER_ROLES, render });

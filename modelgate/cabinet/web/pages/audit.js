// The audit log (owner/admin): who did what to which object, newest first, filtered by event (or a prefix
// such as "content_policy."), rule, key, system, route, actor and UTC days, read page by page with the API's
// cursor or downloaded whole as CSV. Names stand beside ids; every rule id links to its rule.

import { api, apiUrl } from "../api.js";
import { page, replaceParams } from "../router.js";
import { errorText, form, formatDate, formatMoney, h, loading, notice, ruleHref, section, stackedTable, withRuleLinks } from "../ui.js";
import { MANAGER_ROLES, code } from "./admin_kit.js";

const FILTERS = [
  { name: "event", label: "Event", hint: "An event name, or a prefix ending in a dot (content_policy.)", list: "audit-events" },
  { name: "ruleId", label: "Rule or target id", hint: "The object an entry concerns (pol_…, key_…, sys_…)" },
  { name: "keyId", label: "API key id", hint: "Requests made with this key" },
  { name: "systemId", label: "System id", hint: "Requests of this system" },
  { name: "route", label: "Route", hint: "As your client calls it (/v1/chat/completions) or by name (chat_completions)" },
  { name: "actor", label: "Actor", hint: "A member's e-mail, or the id of a user or key" },
  { name: "from", label: "From", type: "date", hint: "First day (UTC), included" },
  { name: "to", label: "To", type: "date", hint: "Last day (UTC), included" },
];
const PAGE_SIZES = ["25", "50", "100", "200"];
const DEFAULT_PAGE_SIZE = "50";
const MAX_FILTER_LENGTH = 200;
// Suggestions for the event filter; any other name is accepted too.
const KNOWN_EVENTS = [
  "api_key.",
  "api_key.created",
  "api_key.revoked",
  "alert.",
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

/** An id, linked to its rule when it is a rule's. */
function idCode(id) {
  return /^pol_/.test(id) ? h("a", { href: ruleHref(id), class: "rule-link" }, code(id)) : code(id);
}

/** An id with its name (from the entry's `names`) before it, when the object still exists. */
function named(id, names) {
  const name = names && names[id];
  return name ? [h("span", { class: "audit-name" }, name), " ", idCode(id)] : idCode(id);
}

function actorText(actor, names) {
  if (!actor) return "—";
  if (actor.email) return actor.email;
  const kind = { management_key: "management key", api_key: "API key", user: "user" }[actor.type] || actor.type;
  return actor.id ? [`${kind} `, named(actor.id, names)] : kind;
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

/** What an edit changed ({field: {before, after}}) as "field: before → after" lines. */
function changeLines(changes, currency) {
  const fields = Object.entries(changes || {});
  if (fields.length === 0) return [[h("dt", {}, "changes"), h("dd", {}, "none")]];
  return fields.map(([name, change]) => [
    h("dt", {}, detailName(name)),
    h("dd", {}, withRuleLinks(`${detailValue(name, change && change.before, currency)} → ${detailValue(name, change && change.after, currency)}${change && change.termsChanged ? " (terms changed)" : ""}`)),
  ]);
}

/** The details object as "name: value" lines, never as markup; an id has its name beside it (from the
entry's `names`), and rule ids link to their rules. */
function detailsText(details, currency, names) {
  const entries = Object.entries(details || {});
  if (entries.length === 0) return null;
  return h(
    "dl",
    { class: "audit-details" },
    entries.map(([name, value]) =>
      name === "changes" && value && typeof value === "object" && !Array.isArray(value)
        ? changeLines(value, currency)
        : [h("dt", {}, detailName(name)), h("dd", {}, typeof value === "string" && names && names[value] ? named(value, names) : withRuleLinks(detailValue(name, value, currency)))],
    ),
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
  return h(
    "span",
    { class: "audit-objects" },
    parts.map(([name, value]) => h("span", {}, `${name} `, name === "route" ? code(value) : named(value, entry.names))),
  );
}

function entriesTable(entries, currency) {
  return stackedTable(
    [
      { label: "When", render: (e) => formatDate(e.createdAt) },
      { label: "Event", class: "wrap", render: (e) => [code(e.event), detailsText(e.details, currency, e.names)] },
      { label: "Actor", class: "wrap", render: (e) => actorText(e.actor, e.names) },
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
  // The CSV of every entry the filters keep (the API writes it page by page; the page size does not apply).
  const download = h("a", { class: "button", download: "audit-log.csv" }, "Download CSV");
  const setDownload = () => {
    const kept = { ...filters, format: "csv" };
    delete kept.limit;
    download.href = apiUrl("/audit-log", kept);
  };
  setDownload();
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
        type: f.type || "text",
        maxlength: f.type ? null : MAX_FILTER_LENGTH,
        autocomplete: "off",
        list: f.list || null,
        validate: (value, values) => {
          if (/[\u0000-\u001f\u007f]/.test(value)) return "Use printable characters only.";
          if (f.name === "to" && value && values.from && value < values.from) return "The last day comes before the first.";
          return "";
        },
      })),
      { label: "Entries per page", name: "limit", type: "select", value: filters.limit, options: PAGE_SIZES },
    ],
    async (values) => {
      filters = filtersOf(values);
      setDownload();
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
      h("p", { class: "muted" }, "Entries are newest first. Every filter given must match; days are UTC."),
      filterForm,
      h("p", { class: "audit-export" }, download),
    ),
    section("Entries", results, pager),
  );
}

page("/audit", { title: "Audit log", roles: MANAGER_ROLES, render });

// Requests: the organization's model API requests one by one (its usage ledger), newest first, filtered by
// UTC days, key, system, model, status and outcome, read page by page with the API's cursor; a CSV file of
// every matching request from the API; and one request in detail (#/request?id=…).

import { api, apiUrl } from "../api.js";
import { href, page, replaceParams } from "../router.js";
import { errorText, form, formatDate, formatMoney, formatNumber, h, loading, notice, section, stackedTable } from "../ui.js";
import { code } from "./admin_kit.js";

const PAGE_SIZES = ["25", "50", "100", "200"];
const DEFAULT_PAGE_SIZE = "50";
// The statuses a request of the model API most often ends with; the status box takes any other too.
const STATUSES = ["200", "400", "402", "403", "404", "413", "429", "500", "502", "503"];
const OUTCOMES = [
  { value: "", label: "Any outcome" },
  { value: "completed", label: "Completed" },
  { value: "refused", label: "Refused" },
  { value: "blocked", label: "Blocked by content policy" },
  { value: "client_closed", label: "Client closed" },
  { value: "upstream_error", label: "Provider error" },
  { value: "shutdown", label: "Gateway shut down" },
  { value: "crashed", label: "Gateway crashed" },
];
const FILTER_NAMES = ["from", "to", "keyId", "systemId", "model", "status", "outcome"];
const DATE = /^\d{4}-\d{2}-\d{2}$/;

/** The filters of the page's address (what the API takes; limit only when not the default). */
function filtersOf(params) {
  const filters = {};
  for (const name of FILTER_NAMES) if (params[name]) filters[name] = String(params[name]);
  filters.limit = PAGE_SIZES.includes(params.limit) ? params.limit : DEFAULT_PAGE_SIZE;
  return filters;
}

function keyName(id, keys) {
  if (!id) return h("span", { class: "muted" }, "(no key)");
  const key = keys.find((item) => item.id === id);
  return key ? h("span", { title: id }, key.alias) : code(id);
}

function statusText(row) {
  const kind = row.refused ? "refused" : row.status >= 400 || row.status === 0 ? "failed" : "served";
  return h("span", { class: ["request-status", `request-${kind}`] }, h("strong", {}, row.status === 0 ? "—" : String(row.status)), " ", row.outcome.replace(/_/g, " "));
}

function tokensText(row) {
  const cached = row.cachedInputTokens ? ` (${formatNumber(row.cachedInputTokens)} cached)` : "";
  return `${formatNumber(row.inputTokens)}${cached} → ${formatNumber(row.outputTokens)}${row.estimated ? " (estimated)" : ""}`;
}

function latencyText(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s` : `${ms} ms`;
}

function requestsTable(rows, keys, currency) {
  return stackedTable(
    [
      { label: "Time", render: (row) => h("a", { href: href("/request", { id: row.id }), title: row.createdAt }, formatDate(row.createdAt)) },
      { label: "Key", class: "request-wrap", render: (row) => keyName(row.keyId, keys) },
      { label: "Model", class: "request-wrap", render: (row) => [row.model, row.provider ? h("span", { class: "muted" }, ` via ${row.provider}`) : null] },
      { label: "Status", class: "request-wrap", render: (row) => [statusText(row), row.contentAction ? h("span", { class: "muted" }, ` · content ${row.contentAction}`) : null] },
      { label: "Tokens in → out", numeric: true, class: "request-wrap", render: tokensText },
      { label: "Cost", numeric: true, render: (row) => formatMoney(row.costMicros, currency) },
      { label: "Latency", numeric: true, render: (row) => latencyText(row.latencyMs) },
    ],
    rows,
    { empty: "No requests match.", label: "Requests" },
  );
}

async function render(main, params) {
  loading(main);
  let filters = filtersOf(params);
  const overview = await api("GET", "/overview");
  const keys = overview.apiKeys;
  let previous = [];
  let cursor = null;
  const results = h("div", { "aria-live": "polite" });
  const pager = h("nav", { class: "pager", "aria-label": "Request pages" });
  const newer = h("button", { type: "button", class: "button" }, "← Newer");
  const older = h("button", { type: "button", class: "button" }, "Older →");
  const position = h("span", { class: "muted pager-position" });
  pager.append(newer, position, older);
  const csvLink = h("a", { class: "button", id: "requests-csv", download: "requests.csv" }, "Download CSV");

  function apiFilters() {
    return Object.fromEntries(Object.entries(filters).filter(([name]) => name !== "limit"));
  }

  function setButtons() {
    newer.disabled = previous.length === 0;
    older.disabled = !older.dataset.cursor;
    position.textContent = `Page ${previous.length + 1}`;
    pager.hidden = previous.length === 0 && !older.dataset.cursor;
    csvLink.href = apiUrl("/requests.csv", apiFilters());
  }

  async function show(at) {
    newer.disabled = older.disabled = true;
    results.setAttribute("aria-busy", "true");
    try {
      const answer = await api("GET", "/requests", undefined, { query: { ...filters, cursor: at } });
      cursor = at;
      results.replaceChildren(requestsTable(answer.requests, keys, answer.currency));
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
      older.dataset.cursor = "";
      setButtons();
    }
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

  const anyOption = (label) => ({ value: "", label });
  const filterForm = form(
    [
      { label: "From (UTC day)", name: "from", type: "date", value: DATE.test(filters.from || "") ? filters.from : "" },
      {
        label: "To (UTC day)",
        name: "to",
        type: "date",
        value: DATE.test(filters.to || "") ? filters.to : "",
        validate: (to, values) => (values.from && to && values.from > to ? "The end date must not be before the start date." : null),
      },
      { label: "API key", name: "keyId", type: "select", value: filters.keyId || "", options: [anyOption("Any key"), ...keys.map((key) => ({ value: key.id, label: key.alias }))] },
      { label: "System", name: "systemId", type: "select", value: filters.systemId || "", options: [anyOption("Any system"), ...overview.systems.map((system) => ({ value: system.id, label: system.name }))] },
      { label: "Model", name: "model", value: filters.model || "", maxlength: 200, autocomplete: "off" },
      {
        label: "Status",
        name: "status",
        value: filters.status || "",
        inputmode: "numeric",
        maxlength: 3,
        autocomplete: "off",
        list: "request-statuses",
        hint: "An HTTP status, e.g. 429",
        validate: (value) => (value && !/^[1-5]\d\d$/.test(value) ? "Enter an HTTP status from 100 to 599." : null),
      },
      { label: "Outcome", name: "outcome", type: "select", value: filters.outcome || "", options: OUTCOMES },
      { label: "Rows per page", name: "limit", type: "select", value: filters.limit, options: PAGE_SIZES },
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
      class: "form-inline request-filters",
      label: "Filter the requests",
      extra: h("datalist", { id: "request-statuses" }, STATUSES.map((status) => h("option", { value: status }))),
    },
  );
  const clear = h("button", { type: "button", class: "button" }, "Clear filters");
  clear.addEventListener("click", () => {
    for (const wrapper of filterForm.fields) if (wrapper.fieldName !== "limit") wrapper.control.value = "";
    filterForm.requestSubmit();
  });
  filterForm.querySelector(".form-actions").append(clear);

  main.replaceChildren(
    section("Filters", h("p", { class: "muted" }, "Requests are newest first; days are UTC days. Refused requests (402, 403, 429) never reached a provider."), filterForm),
    section("Requests", h("div", { class: "form-actions" }, csvLink, h("span", { class: "muted" }, "The CSV file holds every request matching the filters.")), results, pager),
  );
  setButtons();
  try {
    await show(null);
  } catch (exc) {
    // A bad filter in the address: the form stays, with the API's message.
    results.replaceChildren(notice("error", errorText(exc)));
  }
}

function detailRow(name, value) {
  return [h("dt", {}, name), h("dd", {}, value === null || value === undefined || value === "" ? "—" : value)];
}

async function renderDetail(main, params) {
  loading(main);
  const back = h("p", {}, h("a", { href: href("/requests") }, "← All requests"));
  if (!params.id) {
    main.replaceChildren(back, notice("error", "No request is named in the address."));
    return;
  }
  let row;
  try {
    row = await api("GET", `/requests/${encodeURIComponent(params.id)}`);
  } catch (exc) {
    main.replaceChildren(back, notice("error", errorText(exc)));
    return;
  }
  const overview = await api("GET", "/overview");
  const money = (micros) => formatMoney(micros, row.currency);
  const system = overview.systems.find((item) => item.id === row.systemId);
  const detail = row.usageDetail ? Object.entries(row.usageDetail).map(([name, value]) => `${name.replace(/_/g, " ")}: ${typeof value === "object" ? JSON.stringify(value) : value}`).join("; ") : null;
  main.replaceChildren(
    back,
    section(
      `Request ${row.id}`,
      h(
        "dl",
        { class: "audit-details request-detail" },
        detailRow("Time", `${formatDate(row.createdAt)} (${row.createdAt})`),
        detailRow("Request id", code(row.requestId)),
        detailRow("API key", row.keyId ? [keyName(row.keyId, overview.apiKeys), " ", code(row.keyId)] : null),
        detailRow("System", row.systemId ? [system ? system.name : "", " ", code(row.systemId)] : null),
        detailRow("Model", row.model),
        detailRow("Provider", row.provider),
        detailRow("Routing row", row.row ? code(row.row) : null),
        detailRow("Status", statusText(row)),
        detailRow("Input tokens", formatNumber(row.inputTokens)),
        detailRow("Cached input tokens", formatNumber(row.cachedInputTokens)),
        detailRow("Output tokens", formatNumber(row.outputTokens)),
        detailRow("Usage", row.estimated ? "estimated (the provider reported none)" : "as the provider reported it"),
        detailRow("Other usage", detail),
        detailRow("Cost", money(row.costMicros)),
        detailRow("Charged beyond the reservation", row.overReservationMicros ? money(row.overReservationMicros) : null),
        detailRow("Latency", latencyText(row.latencyMs)),
        detailRow("Content policy", row.contentAction),
      ),
    ),
  );
}

page("/requests", { title: "Requests", render });
page("/request", { title: "Request", nav: false, render: renderDetail });

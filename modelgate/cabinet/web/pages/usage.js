// Usage: a date range (or a quick range), a grouping (day, model, key, system), optionally one key and one
// model; a bar chart and a table of the same rows with served, refused and failed requests apart, and a CSV
// file of them made in the browser.

import { api } from "../api.js";
import { barChart } from "../chart.js";
import { href, navigate, page } from "../router.js";
import { emptyState, errorText, form, formatMoney, formatNumber, h, loading, notice, section, table, show } from "../ui.js";
import { addDays, monthStart, requestSplit, shortDay, usageReport, utcToday } from "../usage_data.js";

const GROUPINGS = [
  { value: "day", label: "Day" },
  { value: "model", label: "Model" },
  { value: "key", label: "API key" },
  { value: "system", label: "System" },
];
const METRICS = [
  { value: "costMicros", label: "Cost" },
  { value: "requests", label: "Requests" },
  { value: "refused", label: "Refused requests" },
  { value: "inputTokens", label: "Input tokens" },
  { value: "outputTokens", label: "Output tokens" },
];
const DEFAULT_DAYS = 30;
let csvUrl = null;
const MAX_DAYS = 366;
const GROUP_COLUMNS = { day: "day", model: "model", key: "keyId", system: "systemId" };
const GROUP_HEADINGS = { day: "Day (UTC)", model: "Model", key: "API key", system: "System" };
const GROUP_WORDS = { day: "day", model: "model", key: "API key", system: "system" };
const NONE = { day: "", model: "(unknown model)", key: "(no key)", system: "(no system)" };

function csvCell(value) {
  const text = value === null || value === undefined ? "" : String(value);
  // Quote what needs it, and keep spreadsheets from reading a cell as a formula.
  const safe = /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** The report as CSV text: one line per row, money in currency units. */
export function usageCsv(report, names) {
  const column = GROUP_COLUMNS[report.groupBy];
  const header = [report.groupBy, ...(report.groupBy === "key" || report.groupBy === "system" ? ["name"] : []), "requests", "served", "refused", "errors", "input_tokens", "cached_input_tokens", "output_tokens", `cost_${report.currency.toLowerCase()}`];
  const lines = [header];
  for (const row of report.rows) {
    const id = row[column];
    lines.push([
      id ?? "",
      ...(report.groupBy === "key" || report.groupBy === "system" ? [names(id)] : []),
      row.requests,
      row.served,
      row.refused,
      row.errors,
      row.inputTokens,
      row.cachedInputTokens,
      row.outputTokens,
      (row.costMicros / 1_000_000).toFixed(6),
    ]);
  }
  return `${lines.map((line) => line.map(csvCell).join(",")).join("\r\n")}\r\n`;
}

function dayCount(from, to) {
  return Math.round((Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / 86_400_000) + 1;
}

/** A real calendar day YYYY-MM-DD (not 2025-02-30). */
function isDay(value) {
  if (typeof value !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(value)) return false;
  const date = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === value;
}

/** The page's query from its address; a bad date falls back to the default range, said in `problems`. */
function readParams(params) {
  const today = utcToday();
  const problems = [];
  for (const name of ["from", "to"]) {
    if (params[name] && !isDay(params[name])) problems.push(`"${params[name]}" in the address is not a date (${name}); the default range is shown.`);
  }
  let to = isDay(params.to) ? params.to : today;
  let from = isDay(params.from) ? params.from : addDays(to, -(DEFAULT_DAYS - 1));
  if (from > to || dayCount(from, to) > MAX_DAYS) {
    problems.push(`The range ${from} to ${to} in the address is not a range of 1 to ${MAX_DAYS} days; the default range is shown.`);
    to = today;
    from = addDays(to, -(DEFAULT_DAYS - 1));
  }
  const groupBy = GROUPINGS.some((g) => g.value === params.groupBy) ? params.groupBy : "day";
  const metric = METRICS.some((m) => m.value === params.metric) ? params.metric : "costMicros";
  const keyId = typeof params.keyId === "string" ? params.keyId : "";
  const model = typeof params.model === "string" ? params.model.slice(0, 200) : "";
  return { from, to, groupBy, metric, keyId, model, problems };
}

/** The quick ranges: [label, from, to] in UTC days. */
function quickRanges(today) {
  return [
    ["Today", today, today],
    ["7 days", addDays(today, -6), today],
    ["30 days", addDays(today, -29), today],
    ["This month", monthStart(today), today],
  ];
}

async function render(main, params) {
  const query = readParams(params);
  loading(main);
  // The key list fills the key filter; the names of keys and systems label the rows.
  const overview = await api("GET", "/overview");
  const keep = (values) => Object.fromEntries(Object.entries(values).filter(([, value]) => value !== "" && value !== null && value !== undefined));
  const current = { groupBy: query.groupBy, metric: query.metric, keyId: query.keyId, model: query.model };
  const today = utcToday();
  const quick = h(
    "nav",
    { class: "quick-ranges", "aria-label": "Quick ranges" },
    h("span", { class: "muted" }, "Quick range:"),
    quickRanges(today).map(([label, from, to]) =>
      h("a", { class: "button", href: href("/usage", keep({ ...current, from, to })), "aria-current": query.from === from && query.to === to ? "true" : null }, label),
    ),
  );
  const rangeForm = form(
    [
      { label: "From", name: "from", type: "date", required: true, value: query.from },
      {
        label: "To",
        name: "to",
        type: "date",
        required: true,
        value: query.to,
        validate: (to, values) => {
          if (values.from > to) return "The end date must not be before the start date.";
          if (dayCount(values.from, to) > MAX_DAYS) return `The range may span at most ${MAX_DAYS} days.`;
          return null;
        },
      },
      { label: "API key", name: "keyId", type: "select", value: query.keyId, options: [{ value: "", label: "Any key" }, ...overview.apiKeys.map((key) => ({ value: key.id, label: key.alias }))] },
      { label: "Model", name: "model", value: query.model, maxlength: 200, autocomplete: "off", hint: "Exactly as requested, e.g. gpt-4o" },
      { label: "Group by", name: "groupBy", type: "select", options: GROUPINGS, value: query.groupBy },
      { label: "Chart shows", name: "metric", type: "select", options: METRICS, value: query.metric },
    ],
    async (values) => navigate("/usage", keep(values)),
    { submitLabel: "Show", busyLabel: "Loading…", class: "form-inline" },
  );
  const results = h("div", { class: "page" });
  show(main, section("Range", ...query.problems.map((text) => notice("warning", text)), quick, rangeForm), results);
  loading(results);

  let report;
  try {
    report = await usageReport(query.from, query.to, query.groupBy, undefined, { keyId: query.keyId, model: query.model });
  } catch (exc) {
    // A filter the API refuses (a key id from an old link): the form stays to correct it.
    show(results, notice("error", errorText(exc)));
    return;
  }
  const money = (micros) => formatMoney(micros, report.currency);
  const column = GROUP_COLUMNS[report.groupBy];
  const names = (id) => {
    if (id === null || id === undefined) return NONE[report.groupBy];
    if (report.groupBy === "key") {
      const key = overview.apiKeys.find((item) => item.id === id);
      return key ? key.alias : id;
    }
    if (report.groupBy === "system") {
      const system = overview.systems.find((item) => item.id === id);
      return system ? system.name : id;
    }
    return id;
  };
  const label = (row) => (report.groupBy === "day" ? row.day : names(row[column]));
  const metric = METRICS.find((m) => m.value === query.metric);
  const format = query.metric === "costMicros" ? money : formatNumber;
  const filtered = [query.keyId ? `key ${overview.apiKeys.find((k) => k.id === query.keyId)?.alias || query.keyId}` : "", query.model ? `model ${query.model}` : ""].filter(Boolean).join(", ");
  const title = `${metric.label} by ${GROUP_WORDS[report.groupBy]}, ${report.from} to ${report.to}${filtered ? ` (${filtered})` : ""}`;

  const hasUsage = report.totals.requests > 0;
  // One file URL at a time: the previous report's is released when a new one is shown.
  if (csvUrl) URL.revokeObjectURL(csvUrl);
  csvUrl = URL.createObjectURL(new Blob([usageCsv(report, names)], { type: "text/csv;charset=utf-8" }));
  const csvLink = h("a", { class: "button", download: `usage-${report.from}-${report.to}-by-${report.groupBy}.csv`, href: csvUrl }, "Download CSV");

  const columns = [
    { label: GROUP_HEADINGS[report.groupBy], render: (row) => (report.groupBy === "key" || report.groupBy === "system" ? h("span", { title: row[column] || "" }, label(row)) : label(row)) },
    { label: "Requests", numeric: true, render: (row) => formatNumber(row.requests) },
    { label: "Refused", numeric: true, render: (row) => formatNumber(row.refused) },
    { label: "Failed", numeric: true, render: (row) => formatNumber(row.errors) },
    { label: "Input tokens", numeric: true, render: (row) => formatNumber(row.inputTokens) },
    { label: "Cached input", numeric: true, render: (row) => formatNumber(row.cachedInputTokens) },
    { label: "Output tokens", numeric: true, render: (row) => formatNumber(row.outputTokens) },
    { label: "Cost", numeric: true, render: (row) => money(row.costMicros) },
  ];
  const totals = report.totals;
  const footer = ["Total", formatNumber(totals.requests), formatNumber(totals.refused), formatNumber(totals.errors), formatNumber(totals.inputTokens), formatNumber(totals.cachedInputTokens), formatNumber(totals.outputTokens), money(totals.costMicros)];

  // By day the report lists every day of the range; the table keeps the days with usage (the chart and the
  // CSV keep them all).
  const tableRows = report.groupBy === "day" ? report.rows.filter((row) => row.requests > 0 || row.costMicros > 0) : report.rows;
  const skipped = report.rows.length - tableRows.length;
  const tableNote = report.groupBy === "day"
    ? `Days are UTC days${skipped ? `; ${skipped} days without usage are left out of the table (the CSV has every day)` : ""}.`
    : `${report.rows.length} rows.`;
  show(results,
    h("p", { class: "usage-split", id: "usage-split" }, hasUsage ? requestSplit(totals) : "No requests in this range."),
    section(
      "Chart",
      hasUsage
        ? barChart({
            title,
            categories: report.rows.map((row) => label(row)),
            series: [{ name: metric.label, values: report.rows.map((row) => row[query.metric]) }],
            format,
            categoryLabel: report.groupBy === "day" ? shortDay : String,
          })
        : emptyState(`No usage from ${report.from} to ${report.to}.`),
    ),
    section(
      "Table",
      h("div", { class: "form-actions" }, csvLink, h("span", { class: "muted" }, tableNote)),
      table(columns, tableRows, { caption: title.replace(/^[^ ]+/, "Usage"), rowHeaders: true, footer, empty: `No usage from ${report.from} to ${report.to}.` }),
    ),
  );
}

page("/usage", { title: "Usage", render });

// Reading GET /api/usage for charts: UTC day ranges, spend by day and model (one report grouped by day,
// each day split by model with `then=model`), and display names of groups.

import { api } from "./api.js";

/** Today's UTC date as YYYY-MM-DD (the ledger's days are UTC days). */
export function utcToday() {
  return new Date().toISOString().slice(0, 10);
}

/** The first day of the UTC month of `day` (YYYY-MM-DD). */
export function monthStart(day) {
  return `${day.slice(0, 8)}01`;
}

/** `day` moved by `days` (YYYY-MM-DD in, YYYY-MM-DD out). */
export function addDays(day, days) {
  const date = new Date(`${day}T00:00:00Z`);
  date.setUTCDate(date.getUTCDate() + days);
  return date.toISOString().slice(0, 10);
}

/** "2026-11-24" → "Nov 24" (the short label of a chart bar). */
export function shortDay(day) {
  const date = new Date(`${day}T00:00:00Z`);
  if (Number.isNaN(date.getTime())) return String(day);
  return new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric", timeZone: "UTC" }).format(date);
}

/**
 * GET /api/usage?from&to&groupBy (and `then`: each row split by a second grouping, in `breakdown`; `only`:
 * {keyId, model} to sum one key's or one model's requests).
 */
export function usageReport(from, to, groupBy, then, only = {}) {
  return api("GET", "/usage", undefined, { query: { from, to, groupBy, then, keyId: only.keyId, model: only.model } });
}

function percent(part, whole) {
  if (!whole) return "0%";
  const value = (100 * part) / whole;
  return `${value < 10 && value > 0 ? value.toFixed(1) : Math.round(value)}%`;
}

/**
 * Served, refused and failed requests of usage numbers as one line: "1,200 served · 40 refused (3.2%) ·
 * 6 failed (0.5% of served)". Refused: 402, 403, 429 (never reached a provider); failed: served with an error.
 */
export function requestSplit(usage) {
  const count = (n) => new Intl.NumberFormat("en-US").format(n);
  return `${count(usage.served)} served · ${count(usage.refused)} refused (${percent(usage.refused, usage.requests)}) · ${count(usage.errors)} failed (${percent(usage.errors, usage.served)} of served)`;
}

/**
 * Spend by day and model over from..to: {days: [day], models: [name], cost: Map(model → [micros per day]),
 * byDay: the groupBy=day report}. Models are ordered by their total, costliest first.
 */
export async function spendByDayAndModel(from, to) {
  const byDay = await usageReport(from, to, "day", "model");
  const busy = byDay.rows.filter((row) => row.requests > 0 || row.costMicros > 0);
  const busyDays = busy.map((row) => row.day);
  const reports = busy.map((row) => ({ rows: row.breakdown || [] }));
  const days = byDay.rows.map((row) => row.day);
  const cost = new Map();
  const totals = new Map();
  reports.forEach((report, index) => {
    const at = days.indexOf(busyDays[index]);
    for (const row of report.rows) {
      const model = row.model ?? "(unknown model)";
      if (!cost.has(model)) cost.set(model, new Array(days.length).fill(0));
      cost.get(model)[at] += row.costMicros;
      totals.set(model, (totals.get(model) || 0) + row.costMicros);
    }
  });
  const models = [...cost.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  return { days, models, cost, totals, byDay, perDay: new Map(busyDays.map((day, index) => [day, reports[index]])) };
}

/** Whether a model name matches a policy rule glob (fnmatch: `*`, `?`, `[seq]`, `[!seq]`; case-sensitive). */
export function globMatches(glob, name) {
  let pattern = "";
  for (let i = 0; i < glob.length; i += 1) {
    const c = glob[i];
    if (c === "*") pattern += ".*";
    else if (c === "?") pattern += ".";
    else if (c === "[") {
      const end = glob.indexOf("]", i + 2);
      if (end === -1) pattern += "\\[";
      else {
        let body = glob.slice(i + 1, end);
        if (body.startsWith("!")) body = `^${body.slice(1)}`;
        pattern += `[${body.replace(/\\/g, "\\\\")}]`;
        i = end;
      }
    } else pattern += c.replace(/[.+^${}()|\\\]]/g, "\\$&");
  }
  try {
    return new RegExp(`^${pattern}$`, "s").test(name);
  } catch {
    return glob === name;
  }
}

/** Group the series beyond the `keep` largest into one "Other" series. */
export function limitSeries(series, keep = 8) {
  if (series.length <= keep + 1) return series;
  const kept = series.slice(0, keep);
  const rest = series.slice(keep);
  const values = rest[0].values.map((_, index) => rest.reduce((sum, item) => sum + (item.values[index] || 0), 0));
  return [...kept, { name: `Other (${rest.length} models)`, values, other: true }];
}

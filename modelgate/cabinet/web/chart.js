// SVG bar charts drawn here (no library): bars stacked by series, a value axis with gridlines, category
// labels, a legend, and `role="img"` with <title>/<desc> so screen readers get a summary (pages add a table).

import { h, svg, uid } from "./ui.js";

/** Fill colours, each at least 4.5:1 against white, in an order where neighbours differ in hue. */
export const PALETTE = ["#1f5fbf", "#c2410c", "#15803d", "#7e22ce", "#be185d", "#0e7490", "#a16207", "#4d7c0f", "#9f1239", "#4338ca"];
/** The colour of the series that gathers the rest. */
export const OTHER_COLOR = "#57534e";

const CHAR_WIDTH = 7.5;
const FONT_HEIGHT = 12;

/** The colour of series number `index` (`other: true` for the "everything else" series). */
export function seriesColor(index, other = false) {
  return other ? OTHER_COLOR : PALETTE[index % PALETTE.length];
}

function niceStep(max, ticks) {
  const raw = max / ticks;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 2.5, 5, 10]) {
    if (factor * magnitude >= raw) return factor * magnitude;
  }
  return 10 * magnitude;
}

function availableWidth() {
  const page = document.getElementById("page") || document.body;
  return Math.max(300, Math.min(1100, page.clientWidth - 34));
}

/** A legend: a list of colour swatches with series names. */
export function legend(series) {
  return h(
    "ul",
    { class: "chart-legend", "aria-label": "Legend" },
    series.map((item, index) =>
      h(
        "li",
        {},
        svg("svg", { viewBox: "0 0 10 10", "aria-hidden": "true", focusable: "false" }, svg("rect", { width: 10, height: 10, rx: 2, fill: item.color || seriesColor(index, item.other) })),
        item.name,
      ),
    ),
  );
}

/**
 * A bar chart as a <figure>: `barChart({title, description, categories, series: [{name, values, other?}],
 * format(value) → text, categoryLabel(category) → text, height})`. Several series stack in each category.
 */
export function barChart(options) {
  const { title, description = "", categories, series, format = String, categoryLabel = String, height = 280 } = options;
  const width = options.width || availableWidth();
  const totals = categories.map((_, index) => series.reduce((sum, item) => sum + (Number(item.values[index]) || 0), 0));
  const peak = Math.max(0, ...totals);
  const step = peak > 0 ? niceStep(peak, 4) : 1;
  const top = peak > 0 ? Math.ceil(peak / step) * step : 4;
  const ticks = [];
  for (let value = 0; value <= top + step / 2; value += step) ticks.push(value);

  const tickTexts = ticks.map((value) => format(value));
  const left = Math.max(...tickTexts.map((text) => text.length)) * CHAR_WIDTH + 18;
  const labels = categories.map((category) => categoryLabel(category));
  const longestLabel = Math.max(1, ...labels.map((text) => text.length));
  const plotWidth = Math.max(40, width - left - 12);
  const slot = plotWidth / Math.max(1, categories.length);
  // Labels that would not fit side by side are thinned out (every n-th), or turned when few and long.
  const labelWidth = longestLabel * CHAR_WIDTH + 8;
  const slanted = categories.length <= 12 && labelWidth > slot;
  const every = slanted ? 1 : Math.max(1, Math.ceil(labelWidth / slot));
  const bottom = slanted ? Math.min(120, longestLabel * CHAR_WIDTH * 0.72 + 22) : FONT_HEIGHT + 16;
  const plotTop = 10;
  const plotHeight = height - plotTop - bottom;
  const y = (value) => plotTop + plotHeight - (value / top) * plotHeight;
  const barWidth = Math.max(2, Math.min(56, slot * 0.7));

  const titleId = uid("chart-title");
  const descId = uid("chart-desc");
  const grid = ticks.map((value, index) =>
    svg(
      "g",
      { class: "chart-axis" },
      svg("line", { class: "chart-grid", x1: left, x2: left + plotWidth, y1: y(value), y2: y(value) }),
      svg("text", { x: left - 8, y: y(value) + 4, "text-anchor": "end" }, tickTexts[index]),
    ),
  );
  const bars = [];
  categories.forEach((category, index) => {
    let base = 0;
    const x = left + index * slot + (slot - barWidth) / 2;
    series.forEach((item, seriesIndex) => {
      const value = Number(item.values[index]) || 0;
      if (value <= 0) return;
      const y0 = y(base);
      const y1 = y(base + value);
      base += value;
      bars.push(
        svg(
          "rect",
          { class: "chart-bar", x: x.toFixed(2), y: y1.toFixed(2), width: barWidth.toFixed(2), height: Math.max(0.5, y0 - y1).toFixed(2), fill: item.color || seriesColor(seriesIndex, item.other), stroke: "#ffffff", "stroke-width": series.length > 1 ? 0.75 : 0 },
          svg("title", {}, `${labels[index]}${series.length > 1 ? ` · ${item.name}` : ""}: ${format(value)}`),
        ),
      );
    });
  });
  const xLabels = labels.map((text, index) => {
    if (index % every !== 0) return null;
    const cx = left + index * slot + slot / 2;
    const ty = plotTop + plotHeight + FONT_HEIGHT + 6;
    return slanted
      ? svg("text", { x: cx, y: ty, "text-anchor": "end", transform: `rotate(-35 ${cx} ${ty})` }, text)
      : svg("text", { x: cx, y: ty, "text-anchor": "middle" }, text);
  });
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-labelledby": `${titleId} ${descId}`, preserveAspectRatio: "xMinYMin meet" },
    svg("title", { id: titleId }, title),
    svg("desc", { id: descId }, description || summary(categories, labels, totals, format)),
    grid,
    svg("line", { class: "chart-axis-line", x1: left, x2: left + plotWidth, y1: y(0), y2: y(0) }),
    bars,
    svg("g", { class: "chart-axis" }, xLabels),
  );
  return h("figure", { class: "chart" }, chart, series.length > 1 || options.legend ? legend(series) : null);
}

function summary(categories, labels, totals, format) {
  if (categories.length === 0) return "No data.";
  let best = 0;
  totals.forEach((value, index) => {
    if (value > totals[best]) best = index;
  });
  const sum = totals.reduce((a, b) => a + b, 0);
  return `${categories.length} bars from ${labels[0]} to ${labels[labels.length - 1]}; total ${format(sum)}; highest ${labels[best]} with ${format(totals[best])}.`;
}

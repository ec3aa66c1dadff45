// The model catalogue (GET /api/models): each model the organization may use, its kinds, prices per token
// kind, context window, and the limits that bound a request to it — the plan's and the matching rules'.

import { page } from "../router.js";
import { formatNumber, h, loading, section, show, stackedTable } from "../ui.js";
import { code } from "./admin_kit.js";
import { loadCatalogue } from "./model_picker.js";

const TOKEN_LABELS = {
  input: "Input",
  cachedInput: "Cached input",
  cacheWrite5m: "Cache write (5 min)",
  cacheWrite1h: "Cache write (1 h)",
  inputAudio: "Input audio",
  inputImage: "Input image",
  output: "Output",
  reasoning: "Reasoning",
  outputAudio: "Output audio",
  outputImage: "Output image",
};

function perMillion(value, currency) {
  try {
    return new Intl.NumberFormat("en-US", { style: "currency", currency, maximumFractionDigits: 4 }).format(value);
  } catch {
    return `${value} ${currency}`;
  }
}

/** The token prices of a model: input and output always, the other kinds when they differ from those. */
function pricesCell(model, currency) {
  const rates = model.prices.perMillionTokens;
  const shown = Object.entries(TOKEN_LABELS).filter(([name]) => {
    if (name === "input" || name === "output") return true;
    const base = ["output", "reasoning", "outputAudio", "outputImage"].includes(name) ? rates.output : rates.input;
    return rates[name] !== base;
  });
  const extras = Object.entries(model.prices).filter(([name, value]) => name.endsWith("Micros") && value);
  return h(
    "ul",
    { class: "plain-list" },
    shown.map(([name, label]) => h("li", {}, `${label}: ${perMillion(rates[name], currency)} / 1M tokens`)),
    extras.map(([name, value]) => h("li", {}, `Per ${name.replace(/^per|Micros$/g, "").replace(/([A-Z])/g, " $1").trim().toLowerCase()}: ${perMillion(value / 1_000_000, currency)}`)),
    model.prices.longContext.map((tier) => h("li", {}, `Above ${formatNumber(tier.aboveInputTokens)} prompt tokens: input ${perMillion(tier.perMillionTokens.input, currency)}, output ${perMillion(tier.perMillionTokens.output, currency)} / 1M`)),
  );
}

function limitText(rule, currency) {
  const parts = [];
  if (rule.effect === "deny") parts.push("denied");
  if (rule.budget) parts.push(`budget ${perMillion(rule.budget.amountMicros / 1_000_000, currency)} per ${rule.budget.period}`);
  if (rule.rpm !== null && rule.rpm !== undefined) parts.push(`${formatNumber(rule.rpm)} RPM`);
  if (rule.tpm !== null && rule.tpm !== undefined) parts.push(`${formatNumber(rule.tpm)} TPM`);
  if (parts.length === 0) parts.push("allowed");
  return parts.join(", ");
}

function rulesCell(model, currency) {
  if (model.rules.length === 0) return h("span", { class: "muted" }, "No rule names it: the plan's limits apply.");
  return h(
    "ul",
    { class: "plain-list" },
    model.rules.map((rule) => h("li", {}, `${rule.subjectType} `, code(rule.ruleId), `: ${limitText(rule, currency)}`)),
  );
}

function planSection(plan, currency) {
  if (!plan) return null;
  const unlimited = (value) => (value ? formatNumber(value) : "unlimited");
  return section(
    `Your plan: ${plan.name}`,
    h(
      "ul",
      { class: "plain-list plan-limits" },
      h("li", {}, `Requests per minute, per key: ${unlimited(plan.rpm)}`),
      h("li", {}, `Tokens per minute, per key: ${unlimited(plan.tpm)}`),
      h("li", {}, `Realtime connections at once: ${unlimited(plan.realtimeConcurrency)}`),
      h("li", {}, `Credit: ${plan.creditLimitMicros ? perMillion(plan.creditLimitMicros / 1_000_000, currency) : "none (pay before use)"}`),
    ),
    h("p", { class: "muted" }, "A rule's RPM or TPM replaces the plan's per-key limit for the keys it applies to."),
  );
}

async function render(main) {
  loading(main);
  const catalogue = await loadCatalogue();
  const currency = catalogue.currency || "USD";
  show(main,
    planSection(catalogue.plan, currency),
    section(
      "Models you may use",
      stackedTable(
        [
          { label: "Model", class: "model-id", render: (model) => code(model.id) },
          { label: "Kinds", class: "wrap", render: (model) => model.kinds.join(", ") },
          { label: "Context window", numeric: true, render: (model) => (model.contextWindow ? `${formatNumber(model.contextWindow)} tokens` : "—") },
          { label: "Prices", class: "wrap", render: (model) => pricesCell(model, currency) },
          { label: "Rules that apply", class: "wrap", render: (model) => rulesCell(model, currency) },
        ],
        catalogue.models,
        { caption: "Model catalogue", empty: "No model is open to the organization: its rules deny or leave out every model." },
      ),
    ),
  );
}

page("/models", { title: "Models", render });

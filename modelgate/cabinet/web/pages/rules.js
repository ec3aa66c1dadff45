// Policy rules: which models the organization, a system or a key may use (allow / deny), with budgets and
// rate overrides on allow rules, and content rules (block / redact / flag) that look at prompts and answers.
// Everyone reads them; owners and admins create, edit and delete. The precedence is explained on the page.

import { api } from "../api.js";
import { page } from "../router.js";
import { announce, badge, confirmDialog, form, formatMoney, formatNumber, h, loading, notice, section, stackedTable } from "../ui.js";
import { actionButton, canManage, code, itemsOf, linesOf, openFormDialog } from "./admin_kit.js";
import { loadCatalogue, modelFields, modelsOf } from "./model_picker.js";

const ACCESS_EFFECTS = ["allow", "deny"];
const CONTENT_EFFECTS = ["block", "redact", "flag"];
const EFFECT_LABELS = {
  allow: "Allow — enable these models (optionally with a budget and rate limits)",
  deny: "Deny — refuse these models",
  block: "Block — refuse requests or answers with matching content",
  redact: "Redact — replace matching content",
  flag: "Flag — serve unchanged, record the match",
};
const SUBJECT_LABELS = { organization: "The whole organization", system: "A system", key: "An API key" };
const DETECTORS = {
  email: "E-mail addresses",
  phone: "Phone numbers",
  payment_card: "Payment card numbers",
  iban: "IBANs",
  credentials: "Credentials (API keys, private keys, JWTs)",
};
const WHERE_LABELS = { prompt: "Prompts", answer: "Answers", both: "Prompts and answers" };
// The API's bounds (cabinet/policy_rule_input.py).
const MAX_MODELS = 100;
const MAX_MODEL_LENGTH = 200;
const MAX_BUDGET_USD = 1_000_000_000;
const MAX_RATE = 1_000_000_000;
const MAX_PHRASES = 1000;
const MAX_PHRASE_LENGTH = 500;
const MAX_PATTERNS = 50;
const MAX_PATTERN_LENGTH = 1000;
const MAX_DESCRIPTION_LENGTH = 2000;

const isContent = (effect) => CONTENT_EFFECTS.includes(effect);

function subjectOptions(subjectType, context, current) {
  if (subjectType === "system") return context.systems.map((s) => ({ value: s.id, label: s.name }));
  if (subjectType === "key") {
    return context.apiKeys
      .filter((k) => k.status === "active" || k.id === current)
      .map((k) => ({ value: k.id, label: k.status === "active" ? k.alias : `${k.alias} (${k.status})` }));
  }
  return [];
}

function validateModels(value, values) {
  const models = modelsOf(values);
  if (!isContent(values.effect) && models.length === 0) return "Pick at least one model (or Every model).";
  if (models.length > MAX_MODELS) return `At most ${MAX_MODELS} model patterns.`;
  const long = models.find((m) => m.length > MAX_MODEL_LENGTH);
  return long ? `Each model pattern has at most ${MAX_MODEL_LENGTH} characters.` : "";
}

function validateTerms(values) {
  if (!isContent(values.effect)) return "";
  const phrases = linesOf(values.phrases);
  const patterns = linesOf(values.patterns);
  const detectors = Object.keys(DETECTORS).filter((d) => values[`detector_${d}`]);
  if (phrases.length + patterns.length + detectors.length === 0) return "A content rule needs at least one phrase, pattern or detector.";
  if (phrases.length > MAX_PHRASES) return `At most ${MAX_PHRASES} phrases.`;
  if (phrases.some((p) => p.length > MAX_PHRASE_LENGTH)) return `Each phrase has at most ${MAX_PHRASE_LENGTH} characters.`;
  return "";
}

function validatePatterns(value, values) {
  if (!isContent(values.effect)) return "";
  const patterns = linesOf(value);
  if (patterns.length > MAX_PATTERNS) return `At most ${MAX_PATTERNS} patterns.`;
  return patterns.some((p) => p.length > MAX_PATTERN_LENGTH) ? `Each pattern has at most ${MAX_PATTERN_LENGTH} characters.` : "";
}

function validateInteger(value, values) {
  if (values.effect !== "allow" || value === null) return "";
  return Number.isInteger(value) ? "" : "Use a whole number.";
}

/** The fields of the rule form, filled from `rule` when editing. */
function ruleFields(context, rule = null) {
  const effect = rule ? rule.effect : "allow";
  const subjectType = rule ? rule.subjectType : "organization";
  const content = (rule && rule.content) || { where: "both", phrases: [], patterns: [], detectors: [] };
  const budget = rule && rule.budget;
  const fields = [
    { label: "Effect", name: "effect", type: "select", required: true, value: effect, options: [...ACCESS_EFFECTS, ...CONTENT_EFFECTS].map((e) => ({ value: e, label: EFFECT_LABELS[e] })) },
    { label: "Applies to", name: "subjectType", type: "select", required: true, value: subjectType, options: Object.entries(SUBJECT_LABELS).map(([value, label]) => ({ value, label })) },
    {
      label: "System or key",
      name: "subjectId",
      type: "select",
      value: rule ? rule.subjectId : "",
      options: subjectOptions(subjectType, context, rule && rule.subjectId),
      validate: (value, values) => (values.subjectType !== "organization" && !value ? `Choose the ${values.subjectType === "key" ? "API key" : "system"} (create one first if the list is empty).` : ""),
    },
    ...modelFields(context.catalogue, rule ? rule.models : [], {
      hint: "Pick the models from the catalogue (Ctrl or ⌘ + click for several). Content rules apply to every model when none is picked.",
      validate: validateModels,
    }),
    {
      label: "Budget (USD)",
      name: "budgetAmount",
      type: "number",
      min: 0,
      max: MAX_BUDGET_USD,
      step: "any",
      value: budget ? budget.amountMicros / 1_000_000 : "",
      hint: "Optional. The most this rule's subject may spend per period; 0 means no spend at all.",
    },
    { label: "Budget period", name: "budgetPeriod", type: "select", value: budget ? budget.period : "month", options: [{ value: "month", label: "Per calendar month (UTC)" }, { value: "day", label: "Per day (UTC)" }] },
    { label: "Requests per minute (RPM)", name: "rpm", type: "number", min: 0, max: MAX_RATE, step: 1, value: rule ? rule.rpm : "", validate: validateInteger, hint: "Optional per-key limit replacing the plan's; 0 means no per-key limit." },
    { label: "Tokens per minute (TPM)", name: "tpm", type: "number", min: 0, max: MAX_RATE, step: 1, value: rule ? rule.tpm : "", validate: validateInteger, hint: "Optional per-key limit replacing the plan's; 0 means no per-key limit." },
    { label: "Look in", name: "where", type: "select", value: content.where, options: Object.entries(WHERE_LABELS).map(([value, label]) => ({ value, label })) },
    {
      label: "Phrases",
      name: "phrases",
      type: "textarea",
      rows: 4,
      value: content.phrases.join("\n"),
      hint: "One per line. Literal text, matched at word boundaries, ignoring case.",
      validate: (value, values) => validateTerms(values),
    },
    {
      label: "Patterns",
      name: "patterns",
      type: "textarea",
      rows: 3,
      class: "mono-field",
      value: content.patterns.join("\n"),
      hint: "One RE2 regular expression per line, case-sensitive unless it starts with (?i). Patterns that need backtracking are refused.",
      validate: validatePatterns,
    },
    ...Object.entries(DETECTORS).map(([name, label]) => ({ label, name: `detector_${name}`, type: "checkbox", value: content.detectors.includes(name) })),
    { label: "Description", name: "description", maxlength: MAX_DESCRIPTION_LENGTH, value: rule ? rule.description : "", hint: "Optional, one line: why the rule exists." },
  ];
  return fields;
}

/** Move the field wrappers named into a <fieldset> with a legend, in place. */
function group(formElement, names, legend, className) {
  const wrappers = formElement.fields.filter((w) => names.includes(w.fieldName));
  const fieldset = h("fieldset", { class: ["rule-group", className] }, h("legend", {}, legend));
  wrappers[0].before(fieldset);
  fieldset.append(...wrappers);
  return fieldset;
}

/** Show the parts of the rule form that fit its effect and subject (hidden parts are disabled, so not checked). */
function wireRuleForm(formElement, context) {
  const byName = Object.fromEntries(formElement.fields.filter((w) => w.fieldName).map((w) => [w.fieldName, w]));
  const detectorNames = Object.keys(DETECTORS).map((d) => `detector_${d}`);
  const limits = group(formElement, ["budgetAmount", "budgetPeriod", "rpm", "tpm"], "Budget and rate limits (allow rules only)", "rule-limits");
  const content = group(formElement, ["where", "phrases", "patterns", ...detectorNames], "Content to look for", "rule-content");
  const detectors = group(formElement, detectorNames, "Detectors", "rule-detectors");
  content.append(detectors);
  const subject = byName.subjectId;
  const update = () => {
    const effect = byName.effect.control.value;
    limits.hidden = limits.disabled = effect !== "allow";
    content.hidden = content.disabled = !isContent(effect);
    const type = byName.subjectType.control.value;
    subject.hidden = type === "organization";
    subject.control.disabled = type === "organization";
    subject.querySelector("label").firstChild.textContent = type === "key" ? "API key" : "System";
  };
  byName.subjectType.control.addEventListener("change", () => {
    const type = byName.subjectType.control.value;
    const options = subjectOptions(type, context, null);
    subject.control.replaceChildren(
      h("option", { value: "" }, options.length ? "Choose…" : type === "key" ? "No API keys yet" : "No systems yet"),
      ...options.map((o) => h("option", { value: o.value }, o.label)),
    );
    update();
  });
  byName.effect.control.addEventListener("change", update);
  update();
}

function numberOrNull(value) {
  return value === null || value === undefined || value === "" || Number.isNaN(value) ? null : value;
}

/** The API body of the form: every field, so a PATCH also clears what no longer fits the effect. */
function ruleBody(values) {
  const effect = values.effect;
  const body = {
    effect,
    subjectType: values.subjectType,
    subjectId: values.subjectType === "organization" ? null : values.subjectId,
    models: modelsOf(values),
    description: values.description,
    budget: null,
    rpm: null,
    tpm: null,
    content: null,
  };
  if (isContent(effect)) {
    if (body.models.length === 0) body.models = ["*"];
    body.content = {
      where: values.where,
      phrases: linesOf(values.phrases),
      patterns: linesOf(values.patterns),
      detectors: Object.keys(DETECTORS).filter((d) => values[`detector_${d}`]),
    };
  } else if (effect === "allow") {
    const amount = numberOrNull(values.budgetAmount);
    if (amount !== null) body.budget = { amountMicros: Math.round(amount * 1_000_000), period: values.budgetPeriod };
    body.rpm = numberOrNull(values.rpm);
    body.tpm = numberOrNull(values.tpm);
  }
  return body;
}

function subjectText(rule, context) {
  if (rule.subjectType === "organization") return "Organization";
  if (rule.subjectType === "system") {
    const system = context.systems.find((s) => s.id === rule.subjectId);
    return ["System ", system ? system.name : code(rule.subjectId)];
  }
  const key = context.apiKeys.find((k) => k.id === rule.subjectId);
  return ["Key ", key ? key.alias : code(rule.subjectId), key && key.status !== "active" ? ` (${key.status})` : null];
}

function modelsText(rule) {
  return h("span", { class: "model-list" }, rule.models.map((m, i) => [i ? ", " : null, h("code", {}, m)]));
}

function rateText(value) {
  return value === 0 ? "no per-key limit" : formatNumber(value);
}

function termsText(content) {
  const parts = [];
  if (content.phrases.length) parts.push(`${content.phrases.length} phrase${content.phrases.length === 1 ? "" : "s"}`);
  if (content.patterns.length) parts.push(`${content.patterns.length} pattern${content.patterns.length === 1 ? "" : "s"}`);
  if (content.detectors.length) parts.push(`detectors: ${content.detectors.join(", ")}`);
  return parts.join("; ");
}

function ruleName(rule, context) {
  const subject = subjectText(rule, context);
  const flat = (Array.isArray(subject) ? subject : [subject]).map((p) => (p instanceof Node ? p.textContent : p ?? "")).join("");
  return `${rule.effect} rule for ${flat}`;
}

function editRule(rule, context, redraw) {
  return openFormDialog({
    title: `Edit ${ruleName(rule, context)}`,
    fields: ruleFields(context, rule),
    setup: (formElement) => wireRuleForm(formElement, context),
    onSubmit: async (values) => {
      await api("PATCH", `/policy-rules/${encodeURIComponent(rule.id)}`, ruleBody(values));
      await redraw();
      announce("success", "The rule was saved. It applies from the next request.");
    },
  });
}

async function deleteRule(rule, context, redraw) {
  const ok = await confirmDialog(`Delete the ${ruleName(rule, context)}? It stops applying from the next request.`, { title: "Delete rule", confirmLabel: "Delete" });
  if (!ok) return;
  await api("DELETE", `/policy-rules/${encodeURIComponent(rule.id)}`);
  await redraw();
  announce("success", "The rule was deleted.");
}

function actionsColumn(context, redraw) {
  return {
    label: "Actions",
    render: (rule) =>
      h(
        "div",
        { class: "row-actions" },
        actionButton("Edit", () => editRule(rule, context, redraw), { ariaLabel: `Edit ${ruleName(rule, context)} ${rule.id}` }),
        actionButton("Delete", () => deleteRule(rule, context, redraw), { danger: true, ariaLabel: `Delete ${ruleName(rule, context)} ${rule.id}` }),
      ),
  };
}

/** The models of a rule, with its description beneath. */
function modelsCell(rule) {
  return [modelsText(rule), rule.description ? h("p", { class: "rule-description muted" }, rule.description) : null];
}

function limitsText(rule) {
  if (rule.effect !== "allow") return h("span", { class: "muted" }, "—");
  const budget = rule.budget ? `${formatMoney(rule.budget.amountMicros)} per ${rule.budget.period}` : null;
  const rates = [];
  if (rule.rpm !== null && rule.rpm !== undefined) rates.push(`RPM: ${rateText(rule.rpm)}`);
  if (rule.tpm !== null && rule.tpm !== undefined) rates.push(`TPM: ${rateText(rule.tpm)}`);
  if (!budget && rates.length === 0) return h("span", { class: "muted" }, "plan limits");
  return h("span", { class: "rule-limits-text" }, budget ? h("span", {}, budget) : null, rates.map((rate) => h("span", {}, rate)));
}

/** The rule's effect, and beneath it its id, which errors and the audit log name (`pol_…`; they link here
with `?rule=`). */
const effectColumn = { label: "Effect and id", class: "admin-wrap", render: (r) => [badge(r.effect), h("span", { class: "rule-id" }, code(r.id))] };

/** Give each rule's row an anchor and mark the one the address names; the marked row, if any. */
function markRows(slot, rules, wanted) {
  let marked = null;
  slot.querySelectorAll("tbody tr").forEach((row, index) => {
    const rule = rules[index];
    if (!rule) return;
    row.id = `rule-${rule.id}`;
    if (rule.id === wanted) {
      row.classList.add("rule-marked");
      row.setAttribute("aria-current", "true");
      row.tabIndex = -1;
      marked = row;
    }
  });
  return marked;
}

function accessTable(rules, context, manage, redraw) {
  const columns = [
    effectColumn,
    { label: "Applies to", class: "admin-wrap", render: (r) => subjectText(r, context) },
    { label: "Models", class: "wrap", render: modelsCell },
    { label: "Budget and rate limits", class: "admin-wrap", render: limitsText },
  ];
  if (manage) columns.push(actionsColumn(context, redraw));
  return stackedTable(columns, rules, { empty: "No access rules: every model is enabled for every key, within the plan's limits.", label: "Access rules" });
}

function contentTable(rules, context, manage, redraw) {
  const columns = [
    effectColumn,
    { label: "Applies to", class: "admin-wrap", render: (r) => subjectText(r, context) },
    { label: "Models", class: "wrap", render: modelsCell },
    { label: "Looks in", render: (r) => WHERE_LABELS[r.content.where] || r.content.where },
    { label: "Looks for", class: "wrap", render: (r) => termsText(r.content) },
  ];
  if (manage) columns.push(actionsColumn(context, redraw));
  return stackedTable(columns, rules, { empty: "No content rules: prompts and answers pass unscanned.", label: "Content rules" });
}

function precedence() {
  return section(
    "How rules combine",
    h(
      "ol",
      { class: "precedence" },
      h("li", {}, "Rules apply to a request through its API key: the organization's rules, the rules of the key's system and the key's own rules all count. A rule matches when one of its model patterns matches the requested model."),
      h("li", {}, h("strong", {}, "Deny wins. "), "If a matching deny rule applies, the request is refused (403), whatever allow rules say."),
      h("li", {}, h("strong", {}, "Allow rules make a list. "), "As soon as any allow rule applies to a key, only the models matched by some allow rule are enabled for it; other models answer “model not found” (404). Without any allow rule every model is enabled."),
      h("li", {}, h("strong", {}, "Every budget must have room. "), "Each matching rule with a budget counts its own spend per UTC day or month; a request whose cost does not fit in every one of them is refused (402). A budget of 0 allows no spend."),
      h("li", {}, h("strong", {}, "The most specific rate limit wins. "), "Among matching rules with RPM or TPM, the key's rule beats the system's, which beats the organization's; it replaces the plan's per-key limit (0: no per-key limit; the plan's organization-wide limits still apply). Without one, the plan's limits apply."),
      h("li", {}, h("strong", {}, "Content rules come after access and add up. "), "A request refused by an access rule is never scanned. Every matching content rule applies; when several match, the strongest action wins: block over redact over flag. Every match is recorded in the audit log."),
      h("li", {}, "A change applies from the very next request."),
    ),
  );
}

async function render(main, params = {}) {
  loading(main);
  const wanted = params.rule || null;
  let marked = null;
  const manage = canManage();
  const accessSlot = h("div", {});
  const contentSlot = h("div", {});
  let context = { systems: [], apiKeys: [], catalogue: { models: [] } };

  async function redraw() {
    const [rules, overview, catalogue] = await Promise.all([api("GET", "/policy-rules"), api("GET", "/overview"), loadCatalogue()]);
    context = { systems: overview.systems || [], apiKeys: overview.apiKeys || [], catalogue };
    const all = rules.policyRules;
    const access = all.filter((r) => !isContent(r.effect));
    const contentRules = all.filter((r) => isContent(r.effect));
    accessSlot.replaceChildren(accessTable(access, context, manage, redraw));
    contentSlot.replaceChildren(contentTable(contentRules, context, manage, redraw));
    marked = markRows(accessSlot, access, wanted) || markRows(contentSlot, contentRules, wanted);
  }

  await redraw();
  const parts = [];
  if (manage) {
    const createSlot = h("div", {});
    const drawCreateForm = () => {
      const createForm = form(
        ruleFields(context),
        async (values) => {
          await api("POST", "/policy-rules", ruleBody(values));
          await redraw();
          drawCreateForm();
          announce("success", "The rule was created. It applies from the next request.");
        },
        { submitLabel: "Create rule", busyLabel: "Creating…", label: "Create a rule" },
      );
      wireRuleForm(createForm, context);
      createSlot.replaceChildren(createForm);
    };
    drawCreateForm();
    // Open at first, when there is no rule to look at yet.
    const none = accessSlot.querySelector("table") === null && contentSlot.querySelector("table") === null;
    parts.push(h("details", { class: "card create-rule", open: none }, h("summary", {}, "Create a rule"), createSlot));
  } else {
    parts.push(h("p", { class: "muted" }, "Only owners and admins change rules."));
  }
  if (wanted && !marked) parts.unshift(notice("warning", `No rule ${wanted} exists in your organization: it may have been deleted (the audit log keeps its history).`));
  parts.push(section("Access rules, budgets and rate limits", accessSlot), section("Content rules", contentSlot), precedence());
  main.replaceChildren(...parts);
  if (marked) {
    marked.scrollIntoView({ block: "center" });
    marked.focus({ preventScroll: true });
  }
}

page("/rules", { title: "Policy rules", render });

// Building blocks of every page: an element builder that never parses HTML, labelled fields, forms that
// validate before sending, tables, notices, a confirmation <dialog>, a copy button and formatting.

import { ApiError } from "./api.js";

const PROPERTIES = new Set(["value", "checked", "selected", "disabled", "hidden", "indeterminate"]);
let idCounter = 0;

/** A unique element id with a readable prefix. */
export function uid(prefix = "id") {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

function appendChildren(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false || child === true) continue;
    if (Array.isArray(child)) appendChildren(element, child);
    else if (child instanceof Node) element.append(child);
    else element.append(document.createTextNode(String(child)));
  }
}

/** Set attributes on an element: `on<event>` functions become listeners, booleans toggle, null skips. */
export function setAttributes(element, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "class" || name === "className") {
      element.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (PROPERTIES.has(name) && name in element) {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  return element;
}

/** Replace an element's content with children as `h()` takes them (null and false skipped, arrays flattened). */
export function show(element, ...children) {
  element.replaceChildren();
  appendChildren(element, children);
  return element;
}

/** `h("p", {class: "x"}, "text", child)`: an element whose text is always text (textContent), never markup. */
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attrs);
  appendChildren(element, children);
  return element;
}

/** The same for SVG elements. */
export function svg(tag, attrs, ...children) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    element.setAttribute(name, String(value));
  }
  appendChildren(element, children);
  return element;
}

function optionList(options, value) {
  return (options || []).map((option) => {
    const item = typeof option === "object" ? option : { value: option, label: option };
    const selected = Array.isArray(value) ? value.map(String).includes(String(item.value)) : String(item.value) === String(value ?? "");
    return h("option", { value: item.value, selected }, item.label ?? item.value);
  });
}

/**
 * A labelled form field: `field({label, name, type, required, value, hint, options, ...})`.
 * type: any input type, "select" (with options [{value, label}] or strings), "textarea" or "checkbox".
 * Other keys (placeholder, autocomplete, min, max, minlength, maxlength, pattern, step, list, multiple)
 * become attributes; `validate(value, values)` may return a message. The wrapper's `.control` is the input.
 */
export function field(spec) {
  const { label, name, type = "text", required, value, hint, options, validate, id: givenId, class: extraClass, ...rest } = spec;
  const id = givenId || uid(`field-${name}`);
  const hintId = hint ? `${id}-hint` : null;
  const errorId = `${id}-error`;
  const described = [hintId, errorId].filter(Boolean).join(" ");
  const common = { id, name, required: Boolean(required), "aria-describedby": described, ...rest };
  let control;
  if (type === "select") {
    control = h("select", common, optionList(options, value));
  } else if (type === "textarea") {
    control = h("textarea", common);
    control.value = value ?? "";
  } else if (type === "checkbox") {
    control = h("input", { type: "checkbox", ...common, checked: Boolean(value) });
  } else {
    control = h("input", { type, ...common });
    if (value !== undefined && value !== null) control.value = String(value);
  }
  // A required field's label ends in a visible asterisk. It is hidden from assistive technology, which
  // hears "required" from the control's `required` attribute, so the accessible name stays the field's name.
  const labelElement = h("label", { for: id }, label, required ? h("span", { class: "required-mark", "aria-hidden": "true" }, " *") : null);
  const wrapper = h(
    "div",
    { class: ["field", type === "checkbox" ? "field-checkbox" : null, extraClass] },
    type === "checkbox" ? [control, labelElement] : [labelElement, control],
    hint ? h("p", { class: "hint", id: hintId }, hint) : null,
    h("p", { class: "field-error", id: errorId, hidden: true }),
  );
  wrapper.control = control;
  wrapper.validate = validate || null;
  wrapper.fieldName = name;
  return wrapper;
}

function controlValue(control) {
  if (control.type === "checkbox") return control.checked;
  if (control.type === "number") return control.value === "" ? null : Number(control.value);
  if (control.tagName === "SELECT" && control.multiple) return [...control.selectedOptions].map((o) => o.value);
  return control.value;
}

function setFieldError(wrapper, message) {
  const error = wrapper.querySelector(".field-error");
  error.textContent = message || "";
  error.hidden = !message;
  if (message) wrapper.control.setAttribute("aria-invalid", "true");
  else wrapper.control.removeAttribute("aria-invalid");
}

/** The message of any error, as a user can read it. */
// A policy rule id as the API writes it (`pol_` and hex): wherever an error names one, it links to the rule.
const RULE_ID = /\bpol_[0-9a-f]{8,64}\b/g;

/** The rules page's address of a rule: the page scrolls to it and marks it. */
export function ruleHref(ruleId) {
  return `#/rules?rule=${encodeURIComponent(ruleId)}`;
}

/** `text` as nodes, every rule id in it a link to its rule (`ruleHref`); no markup from the text. */
export function withRuleLinks(text) {
  const source = String(text);
  const parts = [];
  let last = 0;
  for (const match of source.matchAll(RULE_ID)) {
    parts.push(source.slice(last, match.index), h("a", { href: ruleHref(match[0]), class: "rule-link" }, match[0]));
    last = match.index + match[0].length;
  }
  parts.push(source.slice(last));
  return parts.filter((part) => part !== "");
}

export function errorText(exc) {
  if (exc instanceof ApiError) return exc.message;
  if (exc && exc.message) return exc.message;
  return String(exc);
}

/**
 * A form of fields (specs for `field()` or ready elements) that validates before calling
 * `await onSubmit(values, formElement)`; an error it throws is shown above the button.
 * options: submitLabel, busyLabel, class, resetOnSuccess, extra (nodes placed before the button row).
 */
export function form(fields, onSubmit, options = {}) {
  const { submitLabel = "Save", busyLabel = "Working…", resetOnSuccess = false, extra = null, secondary = null } = options;
  const wrappers = fields.map((item) => (item instanceof Node ? item : field(item)));
  const errorBox = h("div", { class: "form-error", role: "alert", hidden: true });
  // What the asterisk means, said once per form that has one.
  const anyRequired = wrappers.some((wrapper) => wrapper.control && wrapper.control.required);
  const requiredNote = anyRequired ? h("p", { class: "hint required-note", "aria-hidden": "true" }, h("span", { class: "required-mark" }, "*"), " required") : null;
  const submit = h("button", { type: "submit", class: "button primary" }, submitLabel);
  const element = h(
    "form",
    { class: ["form", options.class], novalidate: true, "aria-label": options.label || null },
    requiredNote,
    wrappers,
    extra,
    errorBox,
    h("div", { class: "form-actions" }, submit, secondary),
  );
  const inputs = () => wrappers.filter((w) => w.control);

  element.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorBox.hidden = true;
    errorBox.textContent = "";
    const values = {};
    for (const wrapper of inputs()) values[wrapper.fieldName] = controlValue(wrapper.control);
    let firstInvalid = null;
    for (const wrapper of inputs()) {
      const control = wrapper.control;
      if (typeof control.value === "string" && control.type !== "password" && control.type !== "checkbox" && control.value !== control.value.trim() && control.tagName !== "SELECT") {
        control.value = control.value.trim();
        values[wrapper.fieldName] = controlValue(control);
      }
      let message = control.checkValidity() ? "" : control.validationMessage;
      if (!message && wrapper.validate) message = wrapper.validate(values[wrapper.fieldName], values) || "";
      setFieldError(wrapper, message);
      if (message && !firstInvalid) firstInvalid = control;
    }
    if (firstInvalid) {
      firstInvalid.focus();
      return;
    }
    submit.disabled = true;
    const label = submit.textContent;
    submit.textContent = busyLabel;
    element.setAttribute("aria-busy", "true");
    try {
      await onSubmit(values, element);
      if (resetOnSuccess) element.reset();
    } catch (exc) {
      errorBox.replaceChildren(...withRuleLinks(errorText(exc)));
      errorBox.hidden = false;
    } finally {
      submit.disabled = false;
      submit.textContent = label;
      element.removeAttribute("aria-busy");
    }
  });
  element.fields = wrappers;
  element.showError = (message) => {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  };
  return element;
}

/**
 * A table: columns are strings (the row key and the heading) or {label, key, render(row), numeric, class};
 * rows are objects. No rows → the empty state. options: empty, caption, footer (one row of cells), label.
 */
export function table(columns, rows, options = {}) {
  if (!rows || rows.length === 0) return emptyState(options.empty || "Nothing here yet.");
  const specs = columns.map((column) => (typeof column === "string" ? { label: column, key: column } : column));
  const cell = (tag, spec, content) => h(tag, { class: [spec.numeric ? "numeric" : null, spec.class] }, content);
  const value = (spec, row) => (spec.render ? spec.render(row) : row[spec.key] ?? "");
  const element = h(
    "table",
    { class: "data-table" },
    options.caption ? h("caption", {}, options.caption) : null,
    h("thead", {}, h("tr", {}, specs.map((spec) => h("th", { scope: "col", class: spec.numeric ? "numeric" : null }, spec.label)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, specs.map((spec, index) => cell(index === 0 && options.rowHeaders ? "th" : "td", spec, value(spec, row)))))),
    options.footer ? h("tfoot", {}, h("tr", {}, specs.map((spec, index) => cell(index === 0 ? "th" : "td", spec, options.footer[index] ?? "")))) : null,
  );
  if (options.rowHeaders) element.querySelectorAll("tbody th").forEach((th) => th.setAttribute("scope", "row"));
  // A focusable region, so keyboard users can scroll a wide table sideways.
  return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": `${options.label || options.caption || "Data"} (table)` }, element);
}

/**
 * `table()` whose rows become stacked cards on a phone's width: each cell carries its column's heading
 * (shown by the stylesheet), and explicit ARIA roles keep it a table for assistive technology (CSS
 * `display: block` would otherwise drop the table semantics).
 */
export function stackedTable(columns, rows, options = {}) {
  const wrap = table(columns, rows, options);
  const element = wrap.querySelector("table");
  if (!element) return wrap; // the empty state
  wrap.classList.add("stacked");
  element.setAttribute("role", "table");
  const headings = [...element.querySelectorAll("thead th")].map((th) => th.textContent);
  element.querySelectorAll("tr").forEach((tr) => tr.setAttribute("role", "row"));
  element.querySelectorAll("thead th").forEach((th) => th.setAttribute("role", "columnheader"));
  element.querySelectorAll("thead, tbody").forEach((part) => part.setAttribute("role", "rowgroup"));
  for (const row of element.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, index) => {
      cell.setAttribute("role", "cell");
      cell.dataset.label = headings[index] || "";
    });
  }
  return wrap;
}

/** Show the loading state in a page container. */
export function loading(main, text = "Loading…") {
  main.replaceChildren(h("p", { class: "loading", role: "status" }, text));
  return main;
}

/** A short text for "nothing to show". */
export function emptyState(text, ...more) {
  return h("div", { class: "empty-state" }, h("p", {}, text), ...more);
}

/** A notice box: kind is "info", "success", "warning" or "error"; content is text or nodes. */
export function notice(kind, ...content) {
  const linked = content.map((part) => (typeof part === "string" ? withRuleLinks(part) : part));
  return h("div", { class: ["notice", `notice-${kind}`], role: kind === "error" ? "alert" : null }, ...linked);
}

/** Announce a short message in the page's live region (it stays until the next navigation). */
export function announce(kind, text) {
  const region = document.getElementById("notices");
  if (!region) return;
  region.replaceChildren(notice(kind, h("span", { class: "notice-text" }, withRuleLinks(text)), h("button", { type: "button", class: "link-button dismiss", "aria-label": "Dismiss message", onclick: () => region.replaceChildren() }, "×")));
}

let pendingFlash = null;

/** Announce a message once the next page has rendered (navigation clears the live region). */
export function flash(kind, text) {
  pendingFlash = { kind, text };
}

/** Show the message `flash()` kept, if any (the router calls this after each render). */
export function showPendingFlash() {
  if (!pendingFlash) return;
  announce(pendingFlash.kind, pendingFlash.text);
  pendingFlash = null;
}

/** Ask for confirmation in a modal <dialog>; resolves true when confirmed, false on cancel or Escape. */
export function confirmDialog(text, options = {}) {
  const { confirmLabel = "Confirm", cancelLabel = "Cancel", title = "Please confirm", danger = true } = options;
  return new Promise((resolve) => {
    const titleId = uid("dialog-title");
    const textId = uid("dialog-text");
    const cancel = h("button", { type: "button", class: "button" }, cancelLabel);
    const confirm = h("button", { type: "button", class: ["button", danger ? "danger" : "primary"] }, confirmLabel);
    const dialog = h(
      "dialog",
      { class: "confirm-dialog", "aria-labelledby": titleId, "aria-describedby": textId },
      h("h2", { id: titleId }, title),
      h("p", { id: textId }, text),
      h("div", { class: "form-actions" }, cancel, confirm),
    );
    let answer = false;
    cancel.addEventListener("click", () => dialog.close());
    confirm.addEventListener("click", () => {
      answer = true;
      dialog.close();
    });
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  });
}

async function writeClipboard(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // Plain http on a non-local address has no Clipboard API; the old selection way still works there.
  const area = h("textarea", { class: "offscreen", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("copy failed");
}

/** A button that copies `text` to the clipboard and says so. */
export function copyButton(text, label = "Copy") {
  const button = h("button", { type: "button", class: "button copy-button" }, label);
  button.addEventListener("click", async () => {
    try {
      await writeClipboard(typeof text === "function" ? text() : text);
      button.textContent = "Copied";
      announce("success", "Copied to the clipboard.");
      setTimeout(() => {
        button.textContent = label;
      }, 2000);
    } catch {
      announce("error", "Copying failed: select the text and copy it by hand.");
    }
  });
  return button;
}

/** Money as the API gives it (integer micro-units of the currency) → "$1,234.56"; small amounts keep more digits. */
export function formatMoney(micros, currency = "USD") {
  if (micros === null || micros === undefined || micros === "") return "—";
  const amount = Number(micros) / 1_000_000;
  // Cents for every amount of a cent or more; below a cent two significant digits ($0.00005, $0.0012), so a
  // tiny amount never reads as $0.00 and a normal one never carries six decimals.
  const small = amount !== 0 && Math.abs(amount) < 0.01;
  const digits = small ? { maximumSignificantDigits: 2 } : { minimumFractionDigits: 2, maximumFractionDigits: 2 };
  try {
    return new Intl.NumberFormat("en-US", { style: "currency", currency: currency || "USD", ...digits }).format(amount);
  } catch {
    return `${small ? Number(amount.toPrecision(2)) : amount.toFixed(2)} ${currency}`;
  }
}

/** A count with thousands separators. */
export function formatNumber(value) {
  if (value === null || value === undefined) return "—";
  return new Intl.NumberFormat("en-US").format(value);
}

/** A timestamp (ISO string or epoch seconds) in the browser's time zone; "—" for none. */
export function formatDate(value, withTime = true) {
  if (value === null || value === undefined || value === "") return "—";
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return new Intl.DateTimeFormat("en-GB", withTime ? { dateStyle: "medium", timeStyle: "short" } : { dateStyle: "medium" }).format(date);
}

/** A status word as a badge (class `badge-<status>`). */
export function badge(status) {
  return h("span", { class: ["badge", `badge-${String(status).replace(/[^a-z0-9_-]/gi, "")}`] }, String(status));
}

/** A section with a heading (h2) and content. */
export function section(title, ...content) {
  const id = uid("section");
  return h("section", { class: "card", "aria-labelledby": id }, h("h2", { id }, title), ...content);
}

const MIN_PASSWORD_LENGTH = 10;

/** The spec of a field where the user chooses a password (the policy's minimum length, never the e-mail). */
export function newPasswordField(label = "New password", name = "newPassword") {
  return {
    label,
    name,
    type: "password",
    required: true,
    autocomplete: "new-password",
    minlength: MIN_PASSWORD_LENGTH,
    hint: `At least ${MIN_PASSWORD_LENGTH} characters, not your e-mail address.`,
  };
}

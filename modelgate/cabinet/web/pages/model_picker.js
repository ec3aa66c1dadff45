// The model catalogue (GET /api/models) as forms use it: a picker of the models the organization may use,
// and a field for other patterns, each checked to match some model (the API refuses one that matches none).

import { api } from "../api.js";

/** The catalogue: `{models, plan, currency}`. */
export function loadCatalogue() {
  return api("GET", "/models");
}

/** A model name pattern (`*`, `?`, `[abc]`, case-sensitive) as a RegExp, like the API's fnmatch. */
export function globRegExp(pattern) {
  let out = "";
  for (let i = 0; i < pattern.length; i += 1) {
    const ch = pattern[i];
    if (ch === "*") out += ".*";
    else if (ch === "?") out += ".";
    else if (ch === "[") {
      const end = pattern.indexOf("]", i + 2);
      if (end === -1) out += "\\[";
      else {
        let set = pattern.slice(i + 1, end).replace(/\\/g, "\\\\");
        if (set.startsWith("!")) set = `^${set.slice(1)}`;
        out += `[${set}]`;
        i = end;
      }
    } else out += ch.replace(/[.+^${}()|\\\]]/g, "\\$&");
  }
  return new RegExp(`^${out}$`, "s");
}

/** The first pattern that matches none of the catalogue's models, or null. */
export function unmatchedPattern(patterns, catalogue) {
  const names = catalogue.models.map((model) => model.id);
  return patterns.find((pattern) => !names.some((name) => globRegExp(pattern).test(name))) || null;
}

function patternsOf(text) {
  return String(text || "").split(/[\s,]+/).map((item) => item.trim()).filter(Boolean);
}

/** The models a form's values name: the picked ones and the other patterns, without repeats. */
export function modelsOf(values) {
  return [...new Set([...(values.pickedModels || []), ...patternsOf(values.modelPatterns)])];
}

/**
 * Two field specs: `pickedModels`, a list to pick from (every model, or some), and `modelPatterns`, other
 * patterns such as `gpt-4*`. `current` fills them from a rule's models; `required` asks for at least one
 * (or `validate(value, values)` checks the picked models instead).
 */
export function modelFields(catalogue, current = [], { required = false, hint = "", validate = null } = {}) {
  const ids = new Set(catalogue.models.map((model) => model.id));
  const picked = current.filter((pattern) => pattern === "*" || ids.has(pattern));
  const other = current.filter((pattern) => !picked.includes(pattern));
  const options = [
    { value: "*", label: "Every model (*)" },
    ...catalogue.models.map((model) => ({ value: model.id, label: `${model.id} — ${model.kinds.join(", ")}` })),
  ];
  return [
    {
      label: "Models",
      name: "pickedModels",
      type: "select",
      multiple: true,
      size: Math.min(options.length, 6),
      options,
      value: picked,
      hint: hint || "Pick one or more (Ctrl or ⌘ + click); the list is the model catalogue.",
      validate: validate || ((value, values) => (required && modelsOf(values).length === 0 ? "Pick at least one model, or Every model." : "")),
    },
    {
      label: "Other model patterns",
      name: "modelPatterns",
      value: other.join(", "),
      placeholder: "mock-*",
      autocomplete: "off",
      hint: "Optional, separated by commas: * matches any run of characters, ? one character; case-sensitive. Each must match a model of the catalogue.",
      validate: (value) => {
        const missing = unmatchedPattern(patternsOf(value), catalogue);
        return missing ? `"${missing}" matches no model of the catalogue.` : "";
      },
    },
  ];
}

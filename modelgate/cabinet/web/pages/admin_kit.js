// Pieces the admin pages share (members, systems, rules, audit, SSO): who may manage, a form in a
// modal <dialog>, a button that runs an API call and reports its error, and list parsing for text areas.

import { session } from "../session.js";
import { announce, errorText, form, h, uid } from "../ui.js";

/** The roles that manage the organization (the API's owner/admin checks). */
export const MANAGER_ROLES = ["owner", "admin"];

/** Whether the signed-in user may change things on the admin pages. */
export function canManage() {
  return MANAGER_ROLES.includes(session.role);
}

/**
 * A form in a modal dialog: `openFormDialog({title, intro, fields, submitLabel, onSubmit})`.
 * The dialog closes when `await onSubmit(values)` succeeds; an error it throws stays in the form.
 * Escape or Cancel closes it without sending. Resolves true when saved, false when cancelled.
 * `setup(formElement)` may wire the form (show and hide fields) before it is shown.
 */
export function openFormDialog({ title, intro = null, fields, submitLabel = "Save", busyLabel = "Saving…", onSubmit, extra = null, setup = null }) {
  return new Promise((resolve) => {
    const titleId = uid("dialog-title");
    let saved = false;
    const cancel = h("button", { type: "button", class: "button" }, "Cancel");
    const dialogForm = form(
      fields,
      async (values, element) => {
        await onSubmit(values, element);
        saved = true;
        dialog.close();
      },
      { submitLabel, busyLabel, secondary: cancel, extra, label: title },
    );
    const dialog = h(
      "dialog",
      { class: "confirm-dialog form-dialog", "aria-labelledby": titleId },
      h("h2", { id: titleId }, title),
      intro ? h("p", { class: "muted" }, intro) : null,
      dialogForm,
    );
    cancel.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(saved);
    });
    if (setup) setup(dialogForm);
    document.body.append(dialog);
    dialog.showModal();
    const first = [...dialogForm.querySelectorAll("input, select, textarea")].find((control) => !control.disabled && control.offsetParent !== null);
    if (first) first.focus();
  });
}

/**
 * A button that runs `await action()`; while it runs the button is disabled, and an error is announced
 * as readable text at the top of the page. `ariaLabel` names the row it acts on for screen readers.
 * Keyboard users keep their place: the focus comes back to the button, or, when the action redrew the
 * list the button was in, goes to the heading of its section.
 */
export function actionButton(label, action, { danger = false, ariaLabel = null } = {}) {
  const button = h("button", { type: "button", class: ["button", "small", danger ? "danger" : null], "aria-label": ariaLabel }, label);
  button.addEventListener("click", async () => {
    const home = button.closest("section");
    button.disabled = true;
    try {
      await action();
    } catch (exc) {
      announce("error", errorText(exc));
      document.getElementById("main")?.scrollIntoView({ block: "start" });
    } finally {
      button.disabled = false;
      if (!button.isConnected) focusHeading(home);
      // A disabled button loses the focus (a dialog closing cannot give it back): return it.
      else if (!document.activeElement || document.activeElement === document.body) button.focus();
    }
  });
  return button;
}

function focusHeading(container) {
  const heading = container && container.isConnected ? container.querySelector("h2") : null;
  if (!heading) return;
  heading.setAttribute("tabindex", "-1");
  heading.focus();
}

/** The non-empty lines of a text area, trimmed. */
export function linesOf(text) {
  return String(text || "")
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter(Boolean);
}

/** The items of a list typed with commas, spaces or new lines between them. */
export function itemsOf(text) {
  return String(text || "")
    .split(/[\s,]+/)
    .map((item) => item.trim())
    .filter(Boolean);
}

/** A value in a <code> element (long ids wrap), or a dash for none. */
export function code(value) {
  return value === null || value === undefined || value === "" ? "—" : h("code", { class: "admin-code" }, String(value));
}

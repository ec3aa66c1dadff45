// The signed-in user's own account: whether its address is verified (with a new link on request), the
// password (change it with the current one; every other session ends) and moving to another address.

import { api } from "../api.js";
import { page } from "../router.js";
import { loadSession, session } from "../session.js";
import { announce, form, h, newPasswordField, notice, section } from "../ui.js";

function sentText(answer) {
  return answer.delivery === "email"
    ? `A link was sent to ${answer.email}. Follow it to confirm.`
    : `A link for ${answer.email} was made. This gateway sends no e-mail: ask your operator for it.`;
}

function addressSection() {
  const user = session.user;
  const status = h("div", { "aria-live": "polite" });
  const parts = [h("p", {}, "Your address: ", h("strong", {}, user.email))];
  if (user.emailVerified) {
    parts.push(notice("success", "Verified: a link sent to this address was followed."));
  } else {
    parts.push(
      notice("info", "Not verified yet. Until it is, whoever proves this address (by a link sent to it) can take it over."),
      form([], async () => show(status, await api("POST", "/auth/verify-email/send")), { submitLabel: "Send a verification link", busyLabel: "Sending…", label: "Send a verification link" }),
    );
  }
  function show(target, answer) {
    target.replaceChildren(notice("success", sentText(answer)));
  }
  const needsPassword = user.passwordSet !== false;
  const fields = [{ label: "New e-mail", name: "newEmail", type: "email", required: true, autocomplete: "email", maxlength: 320 }];
  if (needsPassword) fields.push({ label: "Current password", name: "currentPassword", type: "password", required: true, autocomplete: "current-password" });
  const changeForm = form(
    fields,
    async (values, element) => {
      const answer = await api("POST", "/auth/email", values);
      element.reset();
      show(status, answer);
    },
    { submitLabel: "Change address", busyLabel: "Sending…", label: "Change your address" },
  );
  return section("E-mail address", ...parts, h("h3", {}, "Move to another address"), h("p", { class: "muted" }, "A link goes to the new address; your account moves there when it is followed."), changeForm, status);
}

function passwordSection() {
  const first = session.user.passwordSet === false;
  const fields = [];
  if (!first) fields.push({ label: "Current password", name: "currentPassword", type: "password", required: true, autocomplete: "current-password" });
  fields.push(newPasswordField());
  const passwordForm = form(
    fields,
    async (values, element) => {
      const answer = await api("POST", "/auth/password", values);
      element.reset();
      announce("success", `Password ${first ? "set" : "changed"}. ${answer.endedSessions} other session(s) ended.`);
      await loadSession();
    },
    { submitLabel: first ? "Set password" : "Change password", busyLabel: "Saving…", label: first ? "Set a password" : "Change your password" },
  );
  return section(first ? "Set a password" : "Change password", h("p", { class: "muted" }, "Every other session of your account ends; this one stays."), passwordForm);
}

async function render(main) {
  await loadSession();
  if (session.kind !== "session") {
    main.replaceChildren(notice("info", "A management key has no account of its own."));
    return;
  }
  main.replaceChildren(addressSection(), passwordSection());
}

page("/account", { title: "Your account", navLabel: "Account", render });

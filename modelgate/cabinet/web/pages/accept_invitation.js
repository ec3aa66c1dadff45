// Accept an invitation to an organization: the token comes in the link (#/accept-invitation?token=…).

import { api } from "../api.js";
import { href, navigate, page } from "../router.js";
import { startSession } from "../session.js";
import { errorText, flash, form, formatDate, h, notice, show } from "../ui.js";

const ROLE_LABELS = { owner: "an owner", admin: "an admin", member: "a member" };

/** What the invitation offers (organization, role, who invited), or a notice saying why it cannot be used. */
async function offer(token) {
  try {
    const details = await api("POST", "/invitations/details", { token });
    const org = (details.organization && details.organization.legalName) || "an organization";
    return h(
      "section",
      { class: "card narrow", "aria-label": "Invitation" },
      h("p", {}, details.invitedBy ? `${details.invitedBy} invited ` : "You are invited, as ", h("strong", {}, details.email), details.invitedBy ? " to join " : ", to join ", h("strong", {}, org), ` as ${ROLE_LABELS[details.role] || details.role}.`),
      h("p", { class: "muted" }, `The invitation expires ${formatDate(details.expiresAt)}.`),
    );
  } catch (exc) {
    return notice("error", errorText(exc));
  }
}

const MIN_PASSWORD_LENGTH = 10;

async function render(main, params) {
  const fields = [];
  if (!params.token) {
    fields.push({ label: "Invitation token", name: "token", required: true, hint: "The token from your invitation link." });
  }
  fields.push({
    label: "Choose a password",
    name: "password",
    type: "password",
    autocomplete: "new-password",
    minlength: MIN_PASSWORD_LENGTH,
    hint: `Optional, at least ${MIN_PASSWORD_LENGTH} characters. Leave it empty if you sign in with single sign-on or already have a password.`,
  });
  const acceptForm = form(
    fields,
    async (values) => {
      const body = { token: params.token || values.token };
      if (values.password) body.password = values.password;
      const answer = await api("POST", "/invitations/accept", body);
      await startSession(answer);
      flash(
        "success",
        answer.passwordSet === false
          ? `Welcome, ${answer.email}. You joined without a password: until you set one, you sign in through single sign-on.`
          : `Welcome, ${answer.email}. You are now a member of the organization.`,
      );
      navigate("/overview");
    },
    { submitLabel: "Accept invitation", busyLabel: "Accepting…" },
  );
  show(main,
    params.token ? await offer(params.token) : h("p", {}, "You have been invited to an organization on modelgate. Accept to join it and sign in."),
    h("div", { class: "card narrow" }, acceptForm),
    h("p", {}, "Already a member? ", h("a", { href: href("/login") }, "Sign in"), "."),
  );
}

page("/accept-invitation", { title: "Accept invitation", public: true, nav: false, render });

// Accept an invitation to an organization: the token comes in the link (#/accept-invitation?token=…).

import { api } from "../api.js";
import { href, navigate, page } from "../router.js";
import { startSession } from "../session.js";
import { flash, form, h, show } from "../ui.js";

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
    h("p", {}, "You have been invited to an organization on modelgate. Accept to join it and sign in."),
    h("div", { class: "card narrow" }, acceptForm),
    h("p", {}, "Already a member? ", h("a", { href: href("/login") }, "Sign in"), "."),
  );
}

page("/accept-invitation", { title: "Accept invitation", public: true, nav: false, render });

// A link sent to an address (#/verify-email?token=…): confirming it verifies the account's address, moves
// the account to a new address, or finishes a registration that waited for its address.

import { api } from "../api.js";
import { href, navigate, page } from "../router.js";
import { startSession } from "../session.js";
import { flash, form, h, notice, show } from "../ui.js";

async function render(main, params) {
  if (!params.token) {
    show(main, notice("error", "This page needs the link from your e-mail."));
    return;
  }
  // A button, not an automatic call: the link works once, and only the person who opens it should use it.
  const confirmForm = form(
    [],
    async () => {
      const answer = await api("POST", "/auth/verify-email", { token: params.token });
      if (answer.token) {
        await startSession(answer);
        flash("success", `${answer.email} is confirmed and your organization is registered.`);
      } else {
        flash("success", `${answer.email} is confirmed as your account's address.`);
      }
      navigate(answer.token ? "/overview" : "/account");
    },
    { submitLabel: "Confirm address", busyLabel: "Confirming…" },
  );
  show(main,
    h("p", {}, "Confirm that this e-mail address is yours."),
    h("div", { class: "card narrow" }, confirmForm),
    h("p", {}, h("a", { href: href("/login") }, "Sign in"), " instead."),
  );
}

page("/verify-email", { title: "Confirm e-mail address", public: true, nav: false, render });

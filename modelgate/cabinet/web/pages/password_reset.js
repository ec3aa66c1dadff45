// Forgotten password: ask for a reset link (#/forgot-password), then choose a new password with the link's
// token (#/reset-password?token=…). The link works once and for a short time; every session of the account
// ends when the password is reset.

import { api } from "../api.js";
import { href, navigate, page } from "../router.js";
import { flash, form, h, newPasswordField, notice, show } from "../ui.js";

function deliveryText(delivery) {
  return delivery === "email"
    ? "If this address has an account, a reset link is on its way to it. Check your mailbox."
    : "If this address has an account, a reset link was made. This gateway sends no e-mail: ask your operator for the link.";
}

async function renderForgot(main) {
  const status = h("div", { "aria-live": "polite" });
  const askForm = form(
    [{ label: "E-mail", name: "email", type: "email", required: true, autocomplete: "username", maxlength: 320 }],
    async (values) => {
      const answer = await api("POST", "/auth/password-reset", { email: values.email });
      show(status, notice("success", deliveryText(answer.delivery)));
    },
    { submitLabel: "Send reset link", busyLabel: "Sending…" },
  );
  show(main,
    h("p", {}, "Type the address of your account: we send it a link to choose a new password."),
    h("div", { class: "card narrow" }, askForm),
    status,
    h("p", {}, h("a", { href: href("/login") }, "Back to sign-in"), "."),
  );
}

async function renderReset(main, params) {
  if (!params.token) {
    show(main, notice("error", "This page needs the link from your reset e-mail."), h("p", {}, h("a", { href: href("/forgot-password") }, "Ask for a new link"), "."));
    return;
  }
  const resetForm = form(
    [newPasswordField()],
    async (values) => {
      const answer = await api("POST", "/auth/password-reset/confirm", { token: params.token, newPassword: values.newPassword });
      flash("success", `The password of ${answer.email} is reset. Every session of the account has ended: sign in with the new password.`);
      navigate("/login");
    },
    { submitLabel: "Set new password", busyLabel: "Saving…" },
  );
  show(main, h("div", { class: "card narrow" }, resetForm), h("p", {}, h("a", { href: href("/forgot-password") }, "Ask for a new link"), "."));
}

page("/forgot-password", { title: "Forgot password", public: true, nav: false, render: renderForgot });
page("/reset-password", { title: "Reset password", public: true, nav: false, render: renderReset });

// Sign in: e-mail and password, or one of the organization's single sign-on providers.

import { api } from "../api.js";
import { href, navigate, page, pageAt } from "../router.js";
import { signInOptions, startSession } from "../session.js";
import { form, h, notice, section, show } from "../ui.js";

/** Where to go after signing in: the page the user wanted (`next`), else the overview. */
export function afterSignIn(params) {
  const next = params && params.next;
  if (next && next.startsWith("/") && pageAt(next) && !pageAt(next).public) navigate(next);
  else navigate("/overview");
}

function ssoSection(providers) {
  if (!providers || providers.length === 0) return null;
  return section(
    "Single sign-on",
    h("p", { class: "muted" }, "Sign in with your company's identity provider."),
    h(
      "div",
      { class: "sso-buttons" },
      providers.map((provider) =>
        // A link, not a button: it leaves the cabinet for the provider's login page.
        h("a", { class: "button", href: `/api/auth/oidc/${encodeURIComponent(provider.id)}/login` }, `Sign in with ${provider.name || provider.id}`),
      ),
    ),
  );
}

async function render(main, params) {
  const options = await signInOptions();
  const passwordForm = form(
    [
      { label: "E-mail", name: "email", type: "email", required: true, autocomplete: "username", maxlength: 320 },
      { label: "Password", name: "password", type: "password", required: true, autocomplete: "current-password" },
    ],
    async (values) => {
      const answer = await api("POST", "/auth/login", { email: values.email, password: values.password });
      await startSession(answer);
      afterSignIn(params);
    },
    { submitLabel: "Sign in", busyLabel: "Signing in…" },
  );
  const registration = options ? options.registration : "open";
  show(main,
    params.expired ? notice("info", "Your session has ended. Sign in again to continue.") : null,
    h("div", { class: "card narrow" }, passwordForm),
    ssoSection(options && options.providers),
    registration === "closed"
      ? null
      : h("p", {}, "New to modelgate? ", h("a", { href: href("/register") }, "Register your organization"), "."),
  );
}

page("/login", { title: "Sign in", public: true, render });

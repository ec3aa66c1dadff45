// Sign in: e-mail and password, or one of the organization's single sign-on providers.

import { api } from "../api.js";
import { href, navigate, page, pageAt } from "../router.js";
import { session, signedIn, signInOptions, startSession } from "../session.js";
import { form, h, notice, show } from "../ui.js";

/** Where to go after signing in: the page the user wanted (`next`), else the overview. */
export function afterSignIn(params) {
  const next = params && params.next;
  if (next && next.startsWith("/") && pageAt(next) && !pageAt(next).public) navigate(next);
  else navigate("/overview");
}

const EMAIL_SHAPE = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const LOOKUP_DELAY_MS = 350;

/** The SSO providers for an e-mail's domain (the gateway names a provider only to its own domains). */
async function providersFor(email) {
  try {
    const options = await api("GET", "/auth/sign-in-options", undefined, { query: { email } });
    return (options && options.providers) || [];
  } catch {
    return [];
  }
}

function ssoLinks(providers) {
  if (providers.length === 0) return [];
  return [
    h("h2", {}, "Single sign-on"),
    h("p", { class: "muted" }, "Your organization signs you in with its identity provider:"),
    h(
      "div",
      { class: "sso-buttons" },
      providers.map((provider) =>
        // A link, not a button: it leaves the cabinet for the provider's login page.
        h("a", { class: "button", href: provider.loginUrl || `/api/auth/oidc/${encodeURIComponent(provider.id)}/login` }, `Sign in with ${provider.name || provider.id}`),
      ),
    ),
  ];
}

/** Show the SSO providers of the typed e-mail's domain below the form, looked up as the user types. */
function watchEmail(emailInput, area, hint) {
  let timer = null;
  let asked = "";
  const lookUp = async () => {
    const email = emailInput.value.trim();
    if (email === asked) return;
    asked = email;
    const providers = EMAIL_SHAPE.test(email) ? await providersFor(email) : [];
    if (asked !== email) return;
    show(area, ssoLinks(providers));
    area.hidden = providers.length === 0;
    hint.hidden = providers.length > 0;
  };
  emailInput.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(lookUp, LOOKUP_DELAY_MS);
  });
  emailInput.addEventListener("change", lookUp);
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
  const ssoArea = h("section", { class: "card narrow", "aria-live": "polite", hidden: true });
  const ssoHint = h("p", { class: "muted" }, "Single sign-on: type your e-mail address and your organization's identity provider shows up here.");
  watchEmail(passwordForm.querySelector("input[name=email]"), ssoArea, ssoHint);
  show(main,
    params.expired ? notice("info", "Your session has ended. Sign in again to continue.") : null,
    signedIn() ? notice("info", h("span", {}, `You are signed in as ${session.user.email}. `, h("a", { href: href("/overview") }, "Go to the overview"), " or sign in as someone else.")) : null,
    h("div", { class: "card narrow" }, passwordForm),
    h("p", {}, h("a", { href: href("/forgot-password") }, "Forgot your password?")),
    ssoArea,
    ssoHint,
    registration === "closed"
      ? null
      : h("p", {}, "New to modelgate? ", h("a", { href: href("/register") }, "Register your organization"), "."),
  );
}

page("/login", { title: "Sign in", public: true, render });

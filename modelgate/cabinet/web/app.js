// The cabinet app: the layout (header, role-aware nav, footer), the SSO return, the session and the pages.

import { api } from "./api.js";
import { currentRoute, href, navPages, onNavigate, startRouter } from "./router.js";
import { dropSession, loadSession, onSessionChange, session, signedIn, signInOptions, signOut, startSession } from "./session.js";
import { errorText, h, notice, show } from "./ui.js";

import "./pages/register.js";
import "./pages/login.js";
import "./pages/accept_invitation.js";
import "./pages/password_reset.js";
import "./pages/verify_email.js";
import "./pages/account.js";
import "./pages/overview.js";
import "./pages/keys.js";
import "./pages/models.js";
import "./pages/usage.js";
import "./pages/requests.js";
import "./pages/members.js";
import "./pages/systems.js";
import "./pages/rules.js";
import "./pages/invoices.js";
import "./pages/alerts.js";
import "./pages/audit.js";
import "./pages/sso.js";

const ROLE_NAMES = { owner: "Owner", admin: "Admin", member: "Member" };

function byId(id) {
  return document.getElementById(id);
}

function drawAccount() {
  const account = byId("account");
  if (!signedIn()) {
    account.hidden = true;
    return;
  }
  byId("account-org").textContent = (session.organization && session.organization.legalName) || "";
  byId("account-role").textContent = `${session.user.email} · ${ROLE_NAMES[session.role] || session.role}`;
  account.hidden = false;
}

function drawNav(path) {
  const list = byId("nav-list");
  show(list,
    ...navPages().map((entry) =>
      h("li", {}, h("a", { href: href(entry.path), "aria-current": entry.path === path ? "page" : null }, entry.navLabel || entry.title)),
    ),
  );
  const actions = byId("nav-actions");
  show(actions,
    signedIn() ? h("button", { type: "button", class: "button nav-signout", onclick: () => signOut() }, "Sign out") : null,
  );
}

function setMenuOpen(open) {
  byId("menu-button").setAttribute("aria-expanded", String(open));
  byId("site-nav").classList.toggle("open", open);
}

function wireLayout() {
  byId("skip-link").addEventListener("click", (event) => {
    // The hash is the route: move focus without touching it.
    event.preventDefault();
    byId("main").focus();
  });
  byId("menu-button").addEventListener("click", () => {
    setMenuOpen(byId("menu-button").getAttribute("aria-expanded") !== "true");
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && byId("site-nav").classList.contains("open")) {
      setMenuOpen(false);
      byId("menu-button").focus();
    }
  });
  onNavigate(({ path }) => {
    setMenuOpen(false);
    drawNav(path);
  });
  onSessionChange(() => {
    drawAccount();
    drawNav(currentRoute().path);
  });
  window.addEventListener("modelgate:unauthorized", () => {
    if (!signedIn()) return;
    dropSession();
    const { path } = currentRoute();
    location.hash = href("/login", { next: path, expired: "1" });
  });
}

async function showVersion() {
  let version = null;
  const options = await signInOptions();
  if (options && options.version) version = options.version;
  if (!version) {
    try {
      const health = await fetch("/healthz", { credentials: "same-origin" }).then((r) => r.json());
      version = health.version || null;
    } catch {
      version = null;
    }
  }
  if (version) byId("footer-version").textContent = version;
}

const SSO_ERRORS = {
  idp_error: "the identity provider refused the sign-in",
  no_account: "there is no account for your e-mail address",
  email_not_verified: "the identity provider has not verified your e-mail address",
  email_missing: "the identity provider did not tell us your e-mail address",
  state_mismatch: "the sign-in was started in another browser",
  invalid_state: "the sign-in took too long or was already used",
  provider_unavailable: "the identity provider is not available",
};

/** The SSO flow returns to the cabinet with ?code= (or ?error=): redeem the code for a session. */
async function finishSso() {
  const url = new URL(location.href);
  const code = url.searchParams.get("code");
  const error = url.searchParams.get("error");
  if (!code && !error) return null;
  // The code is single-use: take it out of the address bar (and history) before anything else.
  history.replaceState(null, "", `${url.pathname}${code ? "#/overview" : "#/login"}`);
  if (error) {
    const reason = SSO_ERRORS[error] || error.replace(/_/g, " ");
    return notice("error", `Single sign-on failed: ${reason}. Try again or sign in with your password.`);
  }
  try {
    const answer = await api("POST", "/auth/oidc/exchange", { code });
    await startSession(answer);
    return null;
  } catch (exc) {
    history.replaceState(null, "", `${url.pathname}#/login`);
    return notice("error", `Single sign-on failed: ${errorText(exc)}`);
  }
}

async function main() {
  wireLayout();
  showVersion();
  let problem = await finishSso();
  if (!signedIn()) {
    try {
      await loadSession();
    } catch (exc) {
      problem = notice("error", `The cabinet could not load your session: ${errorText(exc)}`);
    }
  }
  await startRouter();
  if (problem) byId("notices").replaceChildren(problem);
}

main();

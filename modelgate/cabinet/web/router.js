// Hash routing: pages register with `page()` at import; `#/keys?x=1` renders the keys page with {x: "1"}.
// A page a role may not use is absent from the nav and answers "not available for your role".

import { session, signedIn } from "./session.js";
import { h, notice, showPendingFlash } from "./ui.js";

const pages = new Map();
// The nav lists pages in this order; pages not named here follow in the order they registered.
const NAV_ORDER = ["/overview", "/keys", "/models", "/usage", "/requests", "/members", "/systems", "/rules", "/invoices", "/alerts", "/audit", "/sso", "/account"];
const SIGNED_OUT_NAV = ["/login", "/register"];
const navListeners = new Set();
let renderCount = 0;
// Set by the first navigation after the page loaded (focus moves to the heading only from then on).
let navigated = false;

function normalize(path) {
  let clean = String(path || "").replace(/^#/, "");
  if (!clean.startsWith("/")) clean = `/${clean}`;
  return clean.length > 1 ? clean.replace(/\/+$/, "") : clean;
}

/**
 * Register a page: `page("/keys", {title, roles?, render: async (main, params) => {}})`.
 * Optional: `public: true` (needs no session), `nav: false` (not listed), `navLabel` (shorter nav text).
 */
export function page(path, options) {
  const route = normalize(path);
  pages.set(route, { path: route, roles: null, public: false, nav: true, ...options });
}

/** The registered page of a path, or undefined. */
export function pageAt(path) {
  return pages.get(normalize(path));
}

/** Whether the signed-in user may open a page. */
export function allowed(entry) {
  if (entry.public) return true;
  if (!signedIn()) return false;
  return !entry.roles || entry.roles.includes(session.role);
}

/** The current route: {path, params} from location.hash. */
export function currentRoute() {
  const raw = location.hash.replace(/^#/, "");
  const [path, query = ""] = raw.split("?", 2);
  const params = Object.fromEntries(new URLSearchParams(query));
  return { path: normalize(path || "/"), params };
}

/** A `#/path?query` link target. */
export function href(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") query.set(name, String(value));
  }
  const search = query.toString();
  return `#${normalize(path)}${search ? `?${search}` : ""}`;
}

/** Go to a page; re-renders even when the hash does not change. */
export function navigate(path, params) {
  const target = href(path, params);
  navigated = true;
  if (location.hash === target) render();
  else location.hash = target;
}

/** Replace the current page's query in the address bar without rendering again (for filters). */
export function replaceParams(params) {
  history.replaceState(null, "", href(currentRoute().path, params));
}

/** The pages the nav lists for the current session, in nav order. */
export function navPages() {
  const order = signedIn() ? NAV_ORDER : SIGNED_OUT_NAV;
  const listed = [...pages.values()].filter((entry) => entry.nav && allowed(entry));
  const visible = signedIn() ? listed.filter((entry) => !entry.public) : listed.filter((entry) => entry.public);
  const rank = (entry) => {
    const at = order.indexOf(entry.path);
    return at === -1 ? order.length : at;
  };
  return visible.sort((a, b) => rank(a) - rank(b));
}

/** Call `fn(route)` after each navigation (the app redraws the nav). */
export function onNavigate(fn) {
  navListeners.add(fn);
}

function show(title, ...content) {
  const container = h("div", { class: "page", id: "page" }, ...content);
  document.getElementById("page").replaceWith(container);
  setTitle(title);
  return container;
}

/** Set the page heading and the document title. */
export function setTitle(title) {
  document.getElementById("page-title").textContent = title;
  document.title = `${title} · modelgate`;
}

/** The landing page: the overview when signed in, else sign-in. */
export function homePath() {
  return signedIn() ? "/overview" : "/login";
}

/** Render the page of the current hash. */
export async function render() {
  const count = ++renderCount;
  const { path, params } = currentRoute();
  if (path === "/") {
    history.replaceState(null, "", href(homePath()));
    return render();
  }
  const entry = pages.get(path);
  for (const fn of navListeners) fn({ path, params });
  document.getElementById("notices").replaceChildren();
  let container;
  if (!entry) {
    container = show("Page not found", h("p", {}, "There is no page at this address. "), h("p", {}, h("a", { href: href(homePath()) }, "Go to the start page")));
  } else if (!entry.public && !signedIn()) {
    // Sign in first, then come back here.
    history.replaceState(null, "", href("/login", { next: path }));
    return render();
  } else if (!allowed(entry)) {
    container = show(entry.title, notice("info", `This page is not available for your role (${session.role}).`));
  } else {
    container = show(entry.title);
    focusTitle();
    try {
      // A fresh container per render: a slow page that finishes after the user moved on writes nowhere visible.
      await entry.render(container, params);
    } catch (exc) {
      if (count === renderCount) container.replaceChildren(failure(exc));
    }
  }
  if (count === renderCount) showPendingFlash();
  if (!entry || !allowed(entry)) focusTitle();
}

/** A page that could not load: what went wrong, and a Retry button that renders it again. */
function failure(exc) {
  const message = exc && exc.message ? exc.message : String(exc);
  return notice(
    "error",
    h("p", { class: "notice-text" }, `This page could not be loaded: ${message}`),
    h("button", { type: "button", class: "button retry-button", onclick: () => render() }, "Retry"),
  );
}

/**
 * Move focus to the new page's heading, so screen readers announce it and Tab continues in the page (a page
 * may then focus a control itself). Not on the first page shown: there the skip link stays the first stop.
 */
function focusTitle() {
  if (navigated) document.getElementById("page-title").focus({ preventScroll: true });
}

/** Start routing: render now and on every hash change. */
export function startRouter() {
  window.addEventListener("hashchange", () => {
    navigated = true;
    render();
  });
  return render();
}

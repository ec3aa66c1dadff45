// Who is signed in: filled from GET /api/auth/session (the cookie authenticates), emptied on sign-out.

import { api, setCsrf } from "./api.js";

/** The signed-in user, organization and role; all null when nobody is signed in. */
export const session = { user: null, organization: null, role: null, csrfToken: null, kind: null };

const listeners = new Set();

/** Call `fn(session)` whenever the session changes (sign-in, sign-out, reload). */
export function onSessionChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function changed() {
  for (const fn of listeners) fn(session);
}

function clear() {
  session.user = null;
  session.organization = null;
  session.role = null;
  session.kind = null;
  session.csrfToken = null;
  setCsrf(null);
}

/** Whether somebody is signed in. */
export function signedIn() {
  return session.user !== null;
}

/** Read the session from the server; null (and an empty session) when not signed in. */
export async function loadSession() {
  let answer;
  try {
    answer = await api("GET", "/auth/session");
  } catch (exc) {
    if (exc.status === 401) {
      clear();
      changed();
      return null;
    }
    throw exc;
  }
  session.user = answer.user || null;
  session.organization = answer.organization || null;
  session.role = (answer.user && answer.user.role) || null;
  session.kind = answer.kind || null;
  // Login answers carry the token too; the session answer has it only when the cookie authenticated.
  if (answer.csrfToken) session.csrfToken = answer.csrfToken;
  setCsrf(session.csrfToken);
  changed();
  return session;
}

/** After login, register, invitation or SSO exchange: keep the CSRF token and load the session. */
export async function startSession(authAnswer) {
  if (authAnswer && authAnswer.csrfToken) {
    session.csrfToken = authAnswer.csrfToken;
    setCsrf(authAnswer.csrfToken);
  }
  return loadSession();
}

/** Forget the session locally (the server has ended it or it expired). */
export function dropSession() {
  clear();
  changed();
}

let signInOptionsPromise = null;

/**
 * The public sign-in options `{version, registration, providers: [{id, name}]}` from
 * GET /api/auth/sign-in-options, asked once; null when the server does not offer them.
 */
export function signInOptions() {
  if (!signInOptionsPromise) {
    signInOptionsPromise = api("GET", "/auth/sign-in-options").catch(() => null);
  }
  return signInOptionsPromise;
}

/** End the session on the server (which clears the cookie) and here, then go to the sign-in page. */
export async function signOut() {
  try {
    await api("POST", "/auth/logout");
  } catch {
    // Already ended or expired: signing out locally is what the user asked for.
  }
  dropSession();
  location.hash = "#/login";
}

// The cabinet API client: every page talks to /api through `api()` (the same endpoints scripts use).
// The session lives in the HttpOnly cookie; state-changing requests carry the CSRF token kept here, in memory.

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
// A read that fails on the way (no answer, or a gateway/proxy that is briefly unavailable) is tried again after
// these pauses; a change (POST, PATCH, DELETE) never is, since it may have been applied: the page shows the
// error with a Retry button instead (router.js).
const RETRY_DELAYS_MS = [300, 1000];
const RETRY_STATUSES = new Set([0, 502, 503, 504]);
const MAX_RETRY_AFTER_MS = 5000;

let csrfToken = null;

/** An API answer that is not a success: `status` (0 when the server was not reached) and a readable message. */
export class ApiError extends Error {
  constructor(status, message, body = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
  }
}

/** Remember the CSRF token of the session (null forgets it). */
export function setCsrf(token) {
  csrfToken = token || null;
}

/** The CSRF token in use, or null. */
export function csrf() {
  return csrfToken;
}

/** "/members" and "/api/members" both name /api/members; the query drops null, undefined and "" values. */
export function apiUrl(path, query) {
  const url = new URL(path.startsWith("/api/") ? path : `/api${path.startsWith("/") ? "" : "/"}${path}`, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  return url.pathname + url.search;
}

function errorMessage(status, body, statusText) {
  if (body && typeof body === "object") {
    if (typeof body.error === "string" && body.error) return body.error;
    if (body.error && typeof body.error.message === "string" && body.error.message) return body.error.message;
    if (typeof body.message === "string" && body.message) return body.message;
  }
  if (status === 0) return "The server cannot be reached. Check your connection and try again.";
  return `The request failed (${status}${statusText ? ` ${statusText}` : ""}).`;
}

function pause(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** How long to wait before trying a failed read again: its Retry-After when short, else the backoff step. */
function retryDelay(exc, attempt) {
  const seconds = exc.retryAfter;
  if (Number.isFinite(seconds) && seconds >= 0 && seconds * 1000 <= MAX_RETRY_AFTER_MS) return Math.max(seconds * 1000, RETRY_DELAYS_MS[attempt]);
  return RETRY_DELAYS_MS[attempt];
}

/**
 * Call the cabinet API: `api("POST", "/organization/api-keys", {alias})` → the parsed JSON (null when empty).
 * Throws ApiError with the message of the error body. A GET that finds no server or a 502/503/504 is tried
 * again twice, after 0.3 s and 1 s.
 */
export async function api(method, path, body, options = {}) {
  method = method.toUpperCase();
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await callOnce(method, path, body, options);
    } catch (exc) {
      const retry = SAFE_METHODS.has(method) && exc instanceof ApiError && RETRY_STATUSES.has(exc.status) && attempt < RETRY_DELAYS_MS.length;
      if (!retry) throw exc;
      await pause(retryDelay(exc, attempt));
    }
  }
}

async function callOnce(method, path, body, { query } = {}) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined && body !== null) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (!SAFE_METHODS.has(method) && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  const url = apiUrl(path, query);
  let response;
  try {
    response = await fetch(url, init);
  } catch (exc) {
    throw new ApiError(0, errorMessage(0), null);
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = null;
    }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, errorMessage(response.status, parsed, response.statusText), parsed);
    const retryAfter = response.headers.get("Retry-After");
    if (retryAfter !== null && retryAfter.trim() !== "") error.retryAfter = Number(retryAfter);
    if (response.status === 401 && !url.startsWith("/api/auth/")) {
      // The session ended (expired, signed out elsewhere): the app sends the user to sign in.
      window.dispatchEvent(new CustomEvent("modelgate:unauthorized", { detail: error }));
    }
    throw error;
  }
  if (text && parsed === null) throw new ApiError(response.status, "The server answered something that is not JSON.");
  return parsed;
}

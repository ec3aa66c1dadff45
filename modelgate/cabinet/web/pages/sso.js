// Single sign-on providers (owner/admin): the organization's OpenID Connect identity providers — add one
// (the client secret is write-only), discover its endpoints (sign-in works once discovered), edit, delete.

import { api } from "../api.js";
import { page } from "../router.js";
import { announce, badge, confirmDialog, form, formatDate, h, loading, section, stackedTable } from "../ui.js";
import { MANAGER_ROLES, actionButton, code, itemsOf, openFormDialog } from "./admin_kit.js";
import { domainSections } from "./sso_domains.js";

const AUTH_METHODS = [
  { value: "client_secret_basic", label: "client_secret_basic (HTTP Basic)" },
  { value: "client_secret_post", label: "client_secret_post (in the form body)" },
];
const ROLES = [
  { value: "member", label: "Member" },
  { value: "admin", label: "Admin" },
];
const DEFAULT_SCOPES = "openid email profile";
const CALLBACK_PATH = "/api/auth/oidc/callback";
// The API's bounds and checks (cabinet/oidc/provider_input.py).
const MAX_URL_LENGTH = 500;
const MAX_CLIENT_ID_LENGTH = 255;
const MAX_SECRET_LENGTH = 1024;
const MAX_LIST_ITEMS = 50;
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]{1,100}$/;
const DOMAIN = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$/;

function validateIssuer(value) {
  let url;
  try {
    url = new URL(value);
  } catch {
    return "Enter the issuer's full URL, e.g. https://login.example.com/realms/acme.";
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return "The issuer must be an https:// URL.";
  return url.search ? "The issuer must not contain a query." : "";
}

function validateScopes(value) {
  const scopes = itemsOf(value);
  if (!scopes.includes("openid")) return "The scopes must include openid.";
  if (scopes.length > MAX_LIST_ITEMS) return `At most ${MAX_LIST_ITEMS} scopes.`;
  const bad = scopes.find((s) => !SCOPE_TOKEN.test(s));
  return bad ? `Not a valid scope: ${bad}` : "";
}

function validateDomains(value) {
  const domains = itemsOf(value).map((d) => d.toLowerCase());
  if (domains.length === 0) return "Name at least one e-mail domain (example.com).";
  if (domains.length > MAX_LIST_ITEMS) return `At most ${MAX_LIST_ITEMS} domains.`;
  const bad = domains.find((d) => !DOMAIN.test(d));
  return bad ? `Not a valid domain: ${bad}` : "";
}

function providerFields(provider = null) {
  const p = provider || {};
  return [
    { label: "Name", name: "name", required: true, maxlength: 200, value: p.name || "", autocomplete: "off", hint: "Shown on the sign-in button, e.g. “Acme Keycloak”." },
    { label: "Issuer URL", name: "issuer", type: "url", required: true, maxlength: MAX_URL_LENGTH, value: p.issuer || "", autocomplete: "off", validate: validateIssuer, hint: "The provider's issuer; its discovery document is at /.well-known/openid-configuration below it." },
    { label: "Client id", name: "clientId", required: true, maxlength: MAX_CLIENT_ID_LENGTH, value: p.clientId || "", autocomplete: "off" },
    {
      label: "Client secret",
      name: "clientSecret",
      type: "password",
      required: !provider,
      maxlength: MAX_SECRET_LENGTH,
      autocomplete: "new-password",
      hint: provider ? "Leave empty to keep the stored secret. It is never shown again." : "Write-only: stored for the token endpoint, never shown again.",
    },
    { label: "Token endpoint authentication", name: "tokenAuthMethod", type: "select", value: p.tokenAuthMethod || "client_secret_basic", options: AUTH_METHODS },
    { label: "Scopes", name: "scopes", required: true, value: p.scopes ? p.scopes.join(" ") : DEFAULT_SCOPES, validate: validateScopes, autocomplete: "off", hint: "Separated by spaces; must include openid." },
    { label: "Allowed domains", name: "allowedDomains", required: true, value: p.allowedDomains ? p.allowedDomains.join(", ") : "", validate: validateDomains, autocomplete: "off", hint: "Only e-mail addresses in these domains may sign in (comma-separated, e.g. example.com), once your organization verified them under Sign-in domains." },
    { label: "Role of users it creates", name: "defaultRole", type: "select", value: p.defaultRole || "member", options: ROLES },
    { label: "Create unknown users on their first sign-in", name: "autoProvision", type: "checkbox", value: Boolean(p.autoProvision) },
    { label: "Assume PKCE S256 when the discovery document does not list it (Entra ID)", name: "assumePkceS256", type: "checkbox", value: Boolean(p.assumePkceS256) },
  ];
}

/** The API fields of the form; with `provider`, only those that changed (an empty secret keeps the stored one). */
function providerBody(values, provider = null) {
  const body = {
    name: values.name,
    issuer: values.issuer,
    clientId: values.clientId,
    tokenAuthMethod: values.tokenAuthMethod,
    scopes: itemsOf(values.scopes),
    allowedDomains: itemsOf(values.allowedDomains).map((d) => d.toLowerCase()),
    defaultRole: values.defaultRole,
    autoProvision: values.autoProvision,
    assumePkceS256: values.assumePkceS256,
  };
  if (values.clientSecret) body.clientSecret = values.clientSecret;
  if (!provider) return body;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  return Object.fromEntries(Object.entries(body).filter(([name, value]) => name === "clientSecret" || !same(value, provider[name])));
}

function discoveryPanel(result) {
  const rows = [
    ["Issuer", result.issuer],
    ["Authorization endpoint", result.authorizationEndpoint],
    ["Token endpoint", result.tokenEndpoint],
    ["JWKS", result.jwksUri],
    ["Userinfo endpoint", result.userinfoEndpoint],
    ["Signing algorithms", (result.idTokenSigningAlgs || []).join(", ")],
    ["Signing keys", String(result.signingKeys)],
    ["Redirect URI", result.redirectUri || "none: the gateway operator must set server.public_url"],
  ];
  return h(
    "section",
    { class: "card", "aria-label": "Discovery result" },
    h("h2", {}, "Discovery succeeded"),
    h("p", {}, "Sign-in through this provider works now. Register the redirect URI below at the provider if you have not yet."),
    h("dl", { class: "facts" }, rows.map(([label, value]) => [h("dt", {}, label), h("dd", {}, code(value))])),
  );
}

function statusCell(p) {
  if (p.discovered) return h("span", { class: "sso-status" }, badge("active"), h("span", { class: "muted" }, `discovered ${formatDate(p.discoveredAt, false)}`));
  return h("span", { class: "sso-status" }, badge("pending"), h("span", { class: "muted" }, "not discovered yet"));
}

function nameCell(p) {
  return [p.name, h("span", { class: "sso-sub muted" }, "client ", code(p.clientId))];
}

function audienceCell(p) {
  const joining = p.autoProvision ? `others join as ${p.defaultRole}` : "existing users only";
  return [p.allowedDomains.join(", "), h("span", { class: "sso-sub muted" }, joining)];
}

function providersTable(providers, handlers) {
  return stackedTable(
    [
      { label: "Name", class: "wrap", render: nameCell },
      { label: "Issuer", class: "wrap", render: (p) => code(p.issuer) },
      { label: "Who may sign in", class: "wrap", render: audienceCell },
      { label: "Status", render: statusCell },
      {
        label: "Actions",
        render: (p) =>
          h(
            "div",
            { class: "row-actions" },
            actionButton(p.discovered ? "Discover again" : "Discover", () => handlers.discover(p), { ariaLabel: `${p.discovered ? "Discover again" : "Discover"}: ${p.name}` }),
            actionButton("Edit", () => handlers.edit(p), { ariaLabel: `Edit ${p.name}` }),
            actionButton("Delete", () => handlers.remove(p), { danger: true, ariaLabel: `Delete ${p.name}` }),
          ),
      },
    ],
    providers,
    { empty: "No identity providers yet. Add one so members sign in with your company account.", label: "Identity providers" },
  );
}

async function render(main) {
  loading(main);
  const listSlot = h("div", {});
  const resultSlot = h("div", {});

  const handlers = {
    async discover(provider) {
      resultSlot.replaceChildren(h("p", { class: "loading", role: "status" }, `Discovering ${provider.name}…`));
      try {
        const result = await api("POST", `/auth/oidc/providers/${encodeURIComponent(provider.id)}/discover`);
        resultSlot.replaceChildren(discoveryPanel(result));
      } catch (exc) {
        resultSlot.replaceChildren();
        throw exc;
      }
      await redraw();
    },
    edit(provider) {
      return openFormDialog({
        title: `Edit ${provider.name}`,
        intro: "A new issuer drops the discovered endpoints: discover again afterwards.",
        fields: providerFields(provider),
        onSubmit: async (values) => {
          const body = providerBody(values, provider);
          if (Object.keys(body).length === 0) return;
          await api("PATCH", `/auth/oidc/providers/${encodeURIComponent(provider.id)}`, body);
          await redraw();
          announce("success", `${values.name} was saved.`);
        },
      });
    },
    async remove(provider) {
      const ok = await confirmDialog(`Delete the identity provider ${provider.name}? Nobody can sign in through it any more; sign-ins under way fail.`, {
        title: "Delete identity provider",
        confirmLabel: "Delete",
      });
      if (!ok) return;
      await api("DELETE", `/auth/oidc/providers/${encodeURIComponent(provider.id)}`);
      resultSlot.replaceChildren();
      await redraw();
      announce("success", `${provider.name} was deleted.`);
    },
  };

  async function redraw() {
    const answer = await api("GET", "/auth/oidc/providers");
    listSlot.replaceChildren(providersTable(answer.providers, handlers));
  }

  await redraw();
  const createSlot = h("div", {});
  const drawCreateForm = () => {
    createSlot.replaceChildren(
      form(
        providerFields(),
        async (values) => {
          const created = await api("POST", "/auth/oidc/providers", providerBody(values));
          await redraw();
          drawCreateForm();
          announce("success", `${created.name} was added. Discover it to enable sign-in.`);
        },
        { submitLabel: "Add provider", busyLabel: "Adding…", label: "Add an identity provider" },
      ),
    );
  };
  drawCreateForm();
  const domains = await domainSections();
  main.replaceChildren(
    h(
      "p",
      { class: "muted" },
      "Members sign in with an OpenID Connect provider (Keycloak, Entra ID, Google, Okta…). Register this redirect URI at the provider: ",
      code(`${location.origin}${CALLBACK_PATH}`),
      ". A provider is used for sign-in once its endpoints are discovered; delete it to stop sign-ins through it.",
    ),
    h(
      "p",
      { class: "muted sso-public-url" },
      "The redirect URI is the gateway's ",
      code("server.public_url"),
      " followed by ",
      code(CALLBACK_PATH),
      ". Your gateway operator must set ",
      code("server.public_url"),
      " in the gateway's config to the address members open the cabinet at (here: ",
      code(location.origin),
      "); until it is set, single sign-on is refused and discovery shows no redirect URI.",
    ),
    section("Identity providers", listSlot),
    resultSlot,
    section("Add an identity provider", createSlot),
    ...domains,
  );
}

page("/sso", { title: "Single sign-on", roles: MANAGER_ROLES, render });

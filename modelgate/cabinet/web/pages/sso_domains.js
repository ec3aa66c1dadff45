// Sign-in domains of the SSO page (owner/admin): the e-mail domains the organization proved it controls. An
// identity provider is offered on the sign-in page, and its sign-ins are accepted, only for these domains.
// A domain is proved by a DNS TXT record (shown here after the claim) or approved by the operator.

import { api } from "../api.js";
import { announce, badge, confirmDialog, form, formatDate, h, section, stackedTable } from "../ui.js";
import { actionButton, code } from "./admin_kit.js";

// The API's check (cabinet/oidc/domains.py); public mail domains are refused by the API with its reason.
const DOMAIN = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,62}$/;

function validateDomain(value) {
  return DOMAIN.test(value.trim().toLowerCase().replace(/\.$/, "")) ? "" : "Enter a domain name such as example.com.";
}

function statusCell(d) {
  if (d.status === "verified") {
    const by = d.verifiedBy === "operator" ? "approved by the operator" : "proved by DNS";
    return h("span", { class: "sso-status" }, badge("verified"), h("span", { class: "muted" }, `${by} ${formatDate(d.verifiedAt, false)}`));
  }
  return h("span", { class: "sso-status" }, badge("pending"), h("span", { class: "muted" }, "waiting for its TXT record"));
}

function recordCell(d) {
  if (d.status === "verified") return h("span", { class: "muted" }, "—");
  return [h("span", { class: "sso-sub" }, "TXT at ", code(d.txtName)), h("span", { class: "sso-sub" }, "value ", code(d.txtValue))];
}

function domainsTable(domains, handlers) {
  return stackedTable(
    [
      { label: "Domain", class: "wrap", render: (d) => code(d.domain) },
      { label: "Status", render: statusCell },
      { label: "DNS record to publish", class: "wrap", render: recordCell },
      {
        label: "Actions",
        render: (d) =>
          h(
            "div",
            { class: "row-actions" },
            d.status === "verified" ? null : actionButton("Verify", () => handlers.verify(d), { ariaLabel: `Verify ${d.domain}` }),
            actionButton("Release", () => handlers.release(d), { danger: true, ariaLabel: `Release ${d.domain}` }),
          ),
      },
    ],
    domains,
    { empty: "No sign-in domains yet. Claim your company's e-mail domain, then publish its TXT record.", label: "Sign-in domains" },
  );
}

/** The "Sign-in domains" section and the "Claim a domain" form of the SSO page. */
export async function domainSections() {
  const listSlot = h("div", {});
  const handlers = {
    async verify(d) {
      const verified = await api("POST", `/auth/oidc/domains/${encodeURIComponent(d.domain)}/verify`);
      await redraw();
      announce("success", `${verified.domain} is verified: its providers are offered to its addresses.`);
    },
    async release(d) {
      const ok = await confirmDialog(`Release ${d.domain}? Your identity providers are no longer offered or accepted for its addresses.`, {
        title: "Release sign-in domain",
        confirmLabel: "Release",
      });
      if (!ok) return;
      await api("DELETE", `/auth/oidc/domains/${encodeURIComponent(d.domain)}`);
      await redraw();
      announce("success", `${d.domain} was released.`);
    },
  };

  async function redraw() {
    const answer = await api("GET", "/auth/oidc/domains");
    listSlot.replaceChildren(domainsTable(answer.domains, handlers));
  }

  await redraw();
  const claimForm = form(
    [{ label: "Domain", name: "domain", required: true, maxlength: 253, autocomplete: "off", validate: validateDomain, hint: "Your organization's e-mail domain, e.g. example.com. Public mail domains (gmail.com, outlook.com…) cannot be claimed." }],
    async (values) => {
      const claimed = await api("POST", "/auth/oidc/domains", { domain: values.domain.trim() });
      await redraw();
      announce("success", `${claimed.domain} was claimed. Publish its TXT record, then verify it.`);
    },
    { submitLabel: "Claim domain", busyLabel: "Claiming…", label: "Claim a domain", resetOnSuccess: true },
  );
  return [
    section(
      "Sign-in domains",
      h(
        "p",
        { class: "muted" },
        "Your providers are offered on the sign-in page, and their sign-ins accepted, only for e-mail domains your organization proved. Publish the TXT record shown at ",
        code("_modelgate.<domain>"),
        " (or at the domain itself), then verify; or ask the operator to approve the domain. A domain belongs to one organization at a time.",
      ),
      listSlot,
    ),
    section("Claim a domain", claimForm),
  ];
}

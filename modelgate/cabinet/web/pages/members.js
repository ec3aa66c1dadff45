// Members and invitations: who belongs to the organization and with which role; owners and admins invite
// (the link goes to the invited address only), revoke pending invitations, change roles and remove members.

import { api } from "../api.js";
import { page, render as renderPage } from "../router.js";
import { loadSession, session } from "../session.js";
import { announce, badge, confirmDialog, flash, form, formatDate, h, loading, section, stackedTable } from "../ui.js";
import { actionButton, canManage, openFormDialog } from "./admin_kit.js";

const ROLE_LABELS = { owner: "Owner", admin: "Admin", member: "Member" };
const ROLE_HINT = "Owners and admins manage keys, members, systems, rules and single sign-on; members see the organization and its usage.";

/** The roles the signed-in user may give: only an owner grants (or takes away) the owner role. */
function grantableRoles() {
  const roles = session.role === "owner" ? ["member", "admin", "owner"] : ["member", "admin"];
  return roles.map((role) => ({ value: role, label: ROLE_LABELS[role] }));
}

// The link goes to the invited address only (so accepting proves it): never to the inviter.
function createdPanel(invitation) {
  const how =
    invitation.delivery === "email"
      ? `An e-mail with the invitation link is on its way to ${invitation.email}.`
      : `This gateway sends no e-mail: the operator has the invitation link for ${invitation.email} and passes it on.`;
  return h(
    "section",
    { class: "card", id: "invitation-sent", "aria-label": "New invitation", tabindex: "-1" },
    h("h2", {}, `Invitation for ${invitation.email}`),
    h("p", {}, `${how} It expires ${formatDate(invitation.expiresAt)}.`),
  );
}

function inviteForm(onCreated) {
  return form(
    [
      { label: "E-mail", name: "email", type: "email", required: true, autocomplete: "off", maxlength: 320 },
      { label: "Role", name: "role", type: "select", required: true, options: grantableRoles(), value: "member", hint: ROLE_HINT },
    ],
    async (values, element) => {
      const invitation = await api("POST", "/invitations", { email: values.email, role: values.role });
      element.reset();
      await onCreated(invitation);
    },
    { submitLabel: "Invite", busyLabel: "Inviting…", label: "Invite a member" },
  );
}

function changeRole(member, redraw) {
  return openFormDialog({
    title: `Change the role of ${member.email}`,
    fields: [{ label: "Role", name: "role", type: "select", required: true, options: grantableRoles(), value: member.role, hint: ROLE_HINT }],
    submitLabel: "Change role",
    onSubmit: async (values) => {
      const updated = await api("PATCH", `/members/${encodeURIComponent(member.id)}`, { role: values.role });
      if (session.user && member.id === session.user.id) {
        // Your own role changed: the nav and this page's controls follow it.
        await loadSession();
        flash("success", `You are now ${ROLE_LABELS[updated.role] || updated.role}.`);
        renderPage();
        return;
      }
      await redraw();
      announce("success", `${updated.email} is now ${ROLE_LABELS[updated.role] || updated.role}.`);
    },
  });
}

async function removeMember(member, redraw) {
  const yourself = session.user && member.id === session.user.id;
  const text = yourself
    ? "Remove yourself from the organization? You will be signed out and lose access at once."
    : `Remove ${member.email} from the organization? Their sessions end at once; API keys they own stay until revoked.`;
  if (!(await confirmDialog(text, { title: "Remove member", confirmLabel: "Remove" }))) return;
  await api("DELETE", `/members/${encodeURIComponent(member.id)}`);
  await redraw();
  announce("success", `${member.email} was removed.`);
}

function memberActions(member, redraw) {
  // Only an owner manages owners; the API refuses the rest, so the controls are not offered.
  if (member.role === "owner" && session.role !== "owner") return h("span", { class: "muted" }, "—");
  return h(
    "div",
    { class: "row-actions" },
    actionButton("Change role", () => changeRole(member, redraw), { ariaLabel: `Change role of ${member.email}` }),
    actionButton("Remove", () => removeMember(member, redraw), { danger: true, ariaLabel: `Remove ${member.email}` }),
  );
}

function membersTable(members, manage, redraw) {
  const me = session.user && session.user.id;
  const columns = [
    { label: "E-mail", render: (m) => [m.email, m.id === me ? h("span", { class: "muted" }, " (you)") : null] },
    { label: "Role", render: (m) => badge(m.role) },
    { label: "Member since", render: (m) => formatDate(m.createdAt, false) },
  ];
  if (manage) columns.push({ label: "Actions", render: (m) => memberActions(m, redraw) });
  return stackedTable(columns, members, { empty: "No members yet.", label: "Members" });
}

async function revokeInvitation(invitation, redraw) {
  const ok = await confirmDialog(`Revoke the invitation for ${invitation.email}? Its link stops working.`, {
    title: "Revoke invitation",
    confirmLabel: "Revoke",
  });
  if (!ok) return;
  await api("POST", `/invitations/${encodeURIComponent(invitation.id)}/revoke`);
  await redraw();
  announce("success", `The invitation for ${invitation.email} was revoked.`);
}

function invitationsBlock(invitations, redraw) {
  const pending = invitations.filter((i) => i.status === "pending");
  // Accepted invitations are members now (listed above); the rest ended without one.
  const past = invitations.filter((i) => i.status === "revoked" || i.status === "expired");
  const pendingTable = stackedTable(
    [
      { label: "E-mail", key: "email" },
      { label: "Role", render: (i) => badge(i.role) },
      { label: "Sent", render: (i) => formatDate(i.createdAt) },
      { label: "Expires", render: (i) => formatDate(i.expiresAt) },
      {
        label: "Actions",
        render: (i) => actionButton("Revoke", () => revokeInvitation(i, redraw), { danger: true, ariaLabel: `Revoke the invitation for ${i.email}` }),
      },
    ],
    pending,
    { empty: "No pending invitations.", label: "Pending invitations" },
  );
  const history =
    past.length === 0
      ? null
      : h(
          "details",
          { class: "table-alternative" },
          h("summary", {}, `Revoked and expired invitations (${past.length})`),
          stackedTable(
            [
              { label: "E-mail", key: "email" },
              { label: "Role", render: (i) => badge(i.role) },
              { label: "Status", render: (i) => badge(i.status) },
              { label: "Sent", render: (i) => formatDate(i.createdAt) },
            ],
            past,
            { label: "Revoked and expired invitations" },
          ),
        );
  return [pendingTable, history];
}

async function render(main) {
  loading(main);
  const manage = canManage();
  const created = h("div", { class: "created-slot" });
  const membersSlot = h("div", {});
  const invitationsSlot = h("div", {});

  async function redraw() {
    const [members, invitations] = await Promise.all([
      api("GET", "/members"),
      manage ? api("GET", "/invitations") : Promise.resolve(null),
    ]);
    membersSlot.replaceChildren(membersTable(members.members, manage, redraw));
    if (invitations) invitationsSlot.replaceChildren(...invitationsBlock(invitations.invitations, redraw).filter(Boolean));
  }

  await redraw();
  const parts = [];
  if (manage) {
    parts.push(
      section(
        "Invite a member",
        h("p", { class: "muted" }, "The invitation link goes to the address you invite (by e-mail, or through the operator when the gateway sends no e-mail); it lets the person join with the role you choose."),
        inviteForm(async (invitation) => {
          created.replaceChildren(createdPanel(invitation));
          await redraw();
          created.querySelector("#invitation-sent")?.scrollIntoView({ block: "nearest" });
        }),
      ),
      created,
    );
  } else {
    parts.push(h("p", { class: "muted" }, "Only owners and admins invite members and change roles."));
  }
  parts.push(section("Members", membersSlot));
  if (manage) parts.push(section("Pending invitations", invitationsSlot));
  main.replaceChildren(...parts);
}

page("/members", { title: "Members", render });

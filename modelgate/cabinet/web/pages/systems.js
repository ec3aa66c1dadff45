// Systems: the information systems or agents an organization links its API keys and policy rules to.
// Everyone sees the list; owners and admins create, rename, describe and delete them.

import { api } from "../api.js";
import { page } from "../router.js";
import { announce, confirmDialog, form, formatDate, h, loading, section, stackedTable } from "../ui.js";
import { actionButton, canManage, code, openFormDialog } from "./admin_kit.js";

const MAX_NAME_LENGTH = 200;
const MAX_DESCRIPTION_LENGTH = 2000;

function systemFields(system = null) {
  return [
    { label: "Name", name: "name", required: true, maxlength: MAX_NAME_LENGTH, value: system ? system.name : "", autocomplete: "off" },
    {
      label: "Description",
      name: "description",
      maxlength: MAX_DESCRIPTION_LENGTH,
      value: system ? system.description : "",
      hint: "Optional, one line: what the system does, who runs it.",
    },
  ];
}

function editSystem(system, redraw) {
  return openFormDialog({
    title: `Edit system ${system.name}`,
    fields: systemFields(system),
    onSubmit: async (values) => {
      const body = {};
      if (values.name !== system.name) body.name = values.name;
      if (values.description !== system.description) body.description = values.description;
      if (Object.keys(body).length === 0) return;
      const updated = await api("PATCH", `/systems/${encodeURIComponent(system.id)}`, body);
      await redraw();
      announce("success", `System ${updated.name} was saved.`);
    },
  });
}

async function deleteSystem(system, redraw) {
  const ok = await confirmDialog(
    `Delete the system ${system.name}? Keys and rules must no longer use it: the gateway refuses while active keys or policy rules name it.`,
    { title: "Delete system", confirmLabel: "Delete" },
  );
  if (!ok) return;
  await api("DELETE", `/systems/${encodeURIComponent(system.id)}`);
  await redraw();
  announce("success", `System ${system.name} was deleted.`);
}

function systemsTable(systems, manage, redraw) {
  const columns = [
    { label: "Name", key: "name" },
    { label: "Description", class: "wrap", render: (s) => s.description || h("span", { class: "muted" }, "—") },
    { label: "Id", render: (s) => code(s.id) },
    { label: "Created", render: (s) => formatDate(s.createdAt, false) },
  ];
  if (manage) {
    columns.push({
      label: "Actions",
      render: (s) =>
        h(
          "div",
          { class: "row-actions" },
          actionButton("Edit", () => editSystem(s, redraw), { ariaLabel: `Edit system ${s.name}` }),
          actionButton("Delete", () => deleteSystem(s, redraw), { danger: true, ariaLabel: `Delete system ${s.name}` }),
        ),
    });
  }
  return stackedTable(columns, systems, {
    empty: manage ? "No systems yet. Create one to group API keys and give them their own rules." : "No systems yet.",
    label: "Systems",
  });
}

async function render(main) {
  loading(main);
  const manage = canManage();
  const listSlot = h("div", {});

  async function redraw() {
    const answer = await api("GET", "/systems");
    listSlot.replaceChildren(systemsTable(answer.systems, manage, redraw));
  }

  await redraw();
  const intro = h(
    "p",
    { class: "muted" },
    "A system is an application or agent that uses the gateway. Link API keys to it (on the API keys page) and give it policy rules: its own models, budget and rate limits.",
  );
  const parts = [intro];
  if (manage) {
    const createForm = form(
      systemFields(),
      async (values, element) => {
        const created = await api("POST", "/systems", { name: values.name, description: values.description });
        element.reset();
        await redraw();
        announce("success", `System ${created.name} was created.`);
      },
      { submitLabel: "Create system", busyLabel: "Creating…", label: "Create a system" },
    );
    parts.push(section("Create a system", createForm));
  }
  parts.push(section("Systems", listSlot));
  main.replaceChildren(...parts);
}

page("/systems", { title: "Systems", render });

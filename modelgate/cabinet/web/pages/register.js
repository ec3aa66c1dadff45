// Register an organization: its legal name, the owner's e-mail and password, and a plan.

import { api } from "../api.js";
import { href, page } from "../router.js";
import { signInOptions, startSession } from "../session.js";
import { afterSignIn } from "./login.js";
import { flash, form, formatMoney, h, notice, show } from "../ui.js";

const MIN_PASSWORD_LENGTH = 10;
const DEFAULT_PLAN = "free";

function planLabel(plan, currency) {
  const name = plan.name && plan.name !== plan.code ? `${plan.name} (${plan.code})` : plan.code;
  const fee = typeof plan.monthlyFeeMicros === "number" ? plan.monthlyFeeMicros : typeof plan.monthlyFee === "number" ? Math.round(plan.monthlyFee * 1_000_000) : null;
  if (fee === null) return name;
  return fee === 0 ? `${name}: no monthly fee` : `${name}: ${formatMoney(fee, currency)} per month`;
}

function planField(options) {
  const plans = options && Array.isArray(options.plans) ? options.plans : null;
  if (plans && plans.length > 0) {
    return {
      label: "Plan",
      name: "planCode",
      type: "select",
      required: true,
      options: plans.map((plan) => ({ value: plan.code, label: planLabel(plan, options.currency) })),
      value: plans[0].code,
    };
  }
  return {
    label: "Plan code",
    name: "planCode",
    required: true,
    value: DEFAULT_PLAN,
    maxlength: 100,
    hint: `The code of the plan your operator offers; "${DEFAULT_PLAN}" is the default.`,
  };
}

async function render(main, params) {
  const options = await signInOptions();
  // An operator's registration invitation link: #/register?invitation=<token>.
  const invitation = params.invitation || params.invitationToken || "";
  const mode = options ? options.registration : "open";
  if (mode === "closed") {
    show(main,
      notice("info", "Registration is closed on this gateway. Ask an owner or admin of your organization for an invitation."),
      h("p", {}, h("a", { href: href("/login") }, "Sign in")),
    );
    return;
  }
  const fields = [
    { label: "Organization legal name", name: "legalName", required: true, autocomplete: "organization", maxlength: 200 },
    { label: "Your e-mail", name: "email", type: "email", required: true, autocomplete: "username", maxlength: 320 },
    {
      label: "Password",
      name: "password",
      type: "password",
      required: true,
      autocomplete: "new-password",
      minlength: MIN_PASSWORD_LENGTH,
      hint: `At least ${MIN_PASSWORD_LENGTH} characters, not your e-mail address.`,
      validate: (value, values) => (value.trim().toLowerCase() === values.email.trim().toLowerCase() ? "The password must not be your e-mail address." : null),
    },
    planField(options),
  ];
  if (mode === "invite_only" || invitation) {
    fields.push({
      label: "Registration invitation",
      name: "invitationToken",
      required: mode === "invite_only",
      value: invitation,
      hint: "The invitation token your operator gave you; it brings its own plan.",
    });
  }
  const registerForm = form(
    fields,
    async (values) => {
      const body = { legalName: values.legalName, email: values.email, password: values.password, planCode: values.planCode };
      if (values.invitationToken) body.invitationToken = values.invitationToken;
      const answer = await api("POST", "/auth/register", body);
      if (!answer.token) {
        // An unverified account holds the address: the registration waits for the link sent to it.
        show(main, notice("info", waitingText(answer)));
        return;
      }
      await startSession(answer);
      flash("info", `Welcome. ${waitingText({ email: answer.email, delivery: options && options.emailDelivery }, true)}`);
      afterSignIn({});
    },
    { submitLabel: "Create organization", busyLabel: "Creating…" },
  );
  show(main,
    h("p", {}, "Create your organization and its owner account. Your first invoice opens with the plan; the API works once it is paid."),
    h("div", { class: "card narrow" }, registerForm),
    h("p", {}, "Already registered? ", h("a", { href: href("/login") }, "Sign in"), "."),
  );
}

function waitingText(answer, registered = false) {
  const where = answer.delivery === "email" ? `We sent a link to ${answer.email}` : `This gateway sends no e-mail: your operator has a link for ${answer.email}`;
  return registered
    ? `${where}: follow it to verify your address (until then, whoever proves the address can take it over).`
    : `${where}: follow it to finish registering.`;
}

page("/register", { title: "Register", public: true, render });

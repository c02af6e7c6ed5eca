// An OpenID Connect provider for the sign-in tests: node's oidc-provider (a certified
// implementation), with a login form that checks passwords and groups per person.
//
//   PORT=…  CLIENT_ID=…  CLIENT_SECRET=…  REDIRECT_URIS=a,b  USERS_FILE=users.json
//   node provider.mjs   (from a folder whose node_modules holds oidc-provider: tests/accounts/idp.py)
//
// users.json: [{"sub", "username", "password", "email", "groups": [...]}], read again at
// every sign-in (a test moves someone between groups by rewriting it).
// ROGUE=1: ID tokens are signed with a key that the JWKS endpoint does not publish.
// Every authorization request is printed as a line "AUTHORIZE {json of its parameters}".
import { readFileSync } from "node:fs";
import { generateKeyPair, exportJWK } from "jose";
import Provider from "oidc-provider";

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const users = () => JSON.parse(readFileSync(process.env.USERS_FILE, "utf8"));

async function rsaKey(kid) {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const secret = { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" };
  const known = { ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" };
  return { secret, known };
}

const signing = await rsaKey("signing");
const published = process.env.ROGUE === "1" ? await rsaKey("signing") : signing;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.CLIENT_ID,
      client_secret: process.env.CLIENT_SECRET,
      redirect_uris: process.env.REDIRECT_URIS.split(","),
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
      id_token_signed_response_alg: "RS256",
      require_auth_time: true,
    },
  ],
  pkce: { required: () => true },
  scopes: ["openid", "email", "profile", "groups"],
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name", "preferred_username"],
    groups: ["groups"],
  },
  conformIdTokenClaims: false,
  jwks: { keys: [signing.secret] },
  cookies: { keys: ["airlock-test-provider"] },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  findAccount: async (ctx, sub) => {
    const person = users().find((user) => user.sub === sub);
    if (!person) return undefined;
    return {
      accountId: sub,
      claims: async () => ({
        sub,
        email: person.email,
        email_verified: true,
        name: person.username,
        preferred_username: person.username,
        groups: person.groups,
      }),
    };
  },
});

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const form = (uid, error = "") => `<!doctype html><title>Test IdP</title>
<h1>Test identity provider</h1>${error ? `<p id="idp-error">${escape(error)}</p>` : ""}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>Username <input id="idp-username" name="username"></label>
<label>Password <input id="idp-password" name="password" type="password"></label>
<button id="idp-submit" type="submit">Sign in</button></form>`;

async function body(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return new URLSearchParams(text);
}

async function grantConsent(interaction) {
  const { prompt: { details }, params, session: { accountId } } = interaction;
  const grant = interaction.grantId
    ? await provider.Grant.find(interaction.grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  if (details.missingOIDCScope) grant.addOIDCScope(details.missingOIDCScope.join(" "));
  if (details.missingOIDCClaims) grant.addOIDCClaims(details.missingOIDCClaims);
  return grant.save();
}

provider.use(async (ctx, next) => {
  if (ctx.path === "/auth") {
    console.log(`AUTHORIZE ${JSON.stringify(Object.fromEntries(new URLSearchParams(ctx.querystring)))}`);
  }
  if (ctx.path === "/jwks") {
    ctx.body = { keys: [published.known] };
    return;
  }
  const match = ctx.path.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (!match) return next();
  const interaction = await provider.interactionDetails(ctx.req, ctx.res);
  if (interaction.prompt.name === "consent") {
    const grantId = await grantConsent(interaction);
    ctx.respond = false;
    return provider.interactionFinished(ctx.req, ctx.res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }
  if (ctx.method === "GET") {
    ctx.type = "html";
    ctx.body = form(match[1]);
    return;
  }
  const posted = await body(ctx.req);
  const person = users().find(
    (user) => user.username === posted.get("username") && user.password === posted.get("password"),
  );
  if (!person) {
    ctx.type = "html";
    ctx.status = 401;
    ctx.body = form(match[1], "wrong username or password");
    return;
  }
  ctx.respond = false;
  return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: person.sub } }, { mergeWithLastSubmission: false });
});

provider.listen(port, "127.0.0.1", () => console.log(`READY ${issuer}`));

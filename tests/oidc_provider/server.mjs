// A real OpenID provider (panva/oidc-provider) on loopback for modelgate's single sign-on tests.
//
//   node server.mjs --port 0 --redirect-uri http://127.0.0.1:8080/api/auth/oidc/callback \
//                   [--client-id modelgate] [--client-secret s3cret]
//
// Prints "ready <issuer>" once it listens (port 0 picks a free port). Two confidential clients use the one
// redirect URI: <client-id> authenticates with client_secret_basic, <client-id>-post with client_secret_post;
// both need PKCE and get RS256-signed ID tokens. The login name picks the account (see ACCOUNTS; any e-mail
// address also works, as a verified account). devInteractions serve the built-in login and consent pages.
// POST /__test/rotate-keys replaces the signing key (new kid) to test key rotation.

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    'redirect-uri': { type: 'string' },
    'client-id': { type: 'string', default: 'modelgate' },
    'client-secret': { type: 'string', default: 'modelgate-test-secret' },
  },
});
if (!args['redirect-uri']) {
  console.error('--redirect-uri is required');
  process.exit(2);
}

const ACCOUNTS = {
  alice: { email: 'alice@allowed.test', email_verified: true, name: 'Alice Verified' },
  unverified: { email: 'unverified@allowed.test', email_verified: false, name: 'Una Verified-Not' },
  outsider: { email: 'outsider@elsewhere.test', email_verified: true, name: 'Otto Outsider' },
};

function accountFor(login) {
  if (Object.hasOwn(ACCOUNTS, login)) return ACCOUNTS[login];
  if (/^[^@\s]+@[^@\s]+$/.test(login)) return { email: login.toLowerCase(), email_verified: true, name: login };
  return undefined;
}

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

function buildProvider(issuer, key) {
  const client = {
    client_secret: args['client-secret'],
    redirect_uris: [args['redirect-uri']],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    id_token_signed_response_alg: 'RS256',
  };
  const provider = new Provider(issuer, {
    clients: [
      { ...client, client_id: args['client-id'], token_endpoint_auth_method: 'client_secret_basic' },
      { ...client, client_id: `${args['client-id']}-post`, token_endpoint_auth_method: 'client_secret_post' },
    ],
    jwks: { keys: [key] },
    pkce: { required: () => true },
    scopes: ['openid', 'email', 'profile'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    features: { devInteractions: { enabled: true } },
    cookies: { keys: ['modelgate-test-cookie-key'] },
    async findAccount(ctx, id) {
      const account = accountFor(id);
      if (!account) return undefined;
      return { accountId: id, claims: async () => ({ sub: id, ...account }) };
    },
  });
  provider.on('server_error', (ctx, err) => console.error('server_error', err));
  return provider;
}

let current = null;
let handler = null;

const server = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/__test/rotate-keys') {
    const key = signingKey();
    current = buildProvider(current.issuer, key);
    handler = current.callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: key.kid }));
    return;
  }
  handler(req, res);
});

server.listen(Number(args.port), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  current = buildProvider(issuer, signingKey());
  handler = current.callback();
  console.log(`ready ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}

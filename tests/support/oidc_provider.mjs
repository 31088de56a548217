// A loopback OpenID provider for the OAUTHBEARER tests: node-oidc-provider (an OpenID
// Certified implementation), configured from a JSON file, issuing client-credentials
// access tokens as signed JWTs (resource indicators, RFC 8707 / RFC 9068).
//
//   node oidc_provider.mjs CONFIG.json
//
// CONFIG: {"issuer", "port", "jwks_file", "audience", "scope", "ttl_seconds",
//          "clients": [{"client_id", "client_secret"}], "tls_pem"}
// With "tls_pem" (a PEM file holding the server's key and certificate chain) it serves
// HTTPS, as a real provider does; else plain HTTP.
// The JWKS file holds the private signing keys; the first RS256 key signs. On SIGHUP the
// file is read again and a new provider takes over on the same socket: that is how a test
// rotates the signing key (new key first, old key still published). Prints one line,
// "listening <port>", once it serves, and "keys <kid,...>" after each (re)load.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function build() {
  const jwks = JSON.parse(fs.readFileSync(config.jwks_file, 'utf8'));
  const provider = new Provider(config.issuer, {
    clients: config.clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      scope: config.scope,
    })),
    jwks,
    scopes: [config.scope],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => config.audience,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: config.scope,
          audience: config.audience,
          accessTokenTTL: config.ttl_seconds,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
  });
  provider.proxy = false;
  process.stdout.write(`keys ${jwks.keys.map((k) => k.kid).join(',')}\n`);
  return provider.callback();
}

let handler = build();
const serve = (req, res) => handler(req, res);
const server = config.tls_pem
  ? https.createServer({ key: fs.readFileSync(config.tls_pem), cert: fs.readFileSync(config.tls_pem) }, serve)
  : http.createServer(serve);
server.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on('SIGHUP', () => {
  try {
    handler = build();
  } catch (err) {
    process.stderr.write(`reload failed: ${err}\n`);
  }
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));

"""Identity providers for the OAUTHBEARER tests, on loopback.

- :class:`OidcProvider`: node-oidc-provider (npm ``oidc-provider``, an OpenID Certified
  implementation), run by ``tests/support/oidc_provider.mjs``. The package is installed
  with npm on first use into ``~/.cache/tokensvc/npm/oidc-provider-<version>`` (under a
  file lock, so parallel workers install it once). It issues client-credentials access
  tokens as RS256 JWTs and rotates its signing key on :meth:`OidcProvider.rotate_key`.
- :class:`FileIssuer`: a "Kubernetes-like" issuer: an EC key generated here, its public
  JWKS in a file, and service-account tokens minted with joserfc.

Keys are generated per test run; nothing here is a secret of anything else.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from tests.support.wait import wait_for
from tokensvc import devcerts

OIDC_PROVIDER_VERSION = "9.13.3"
LAUNCHER = Path(__file__).with_name("oidc_provider.mjs")
INSTALL_TIMEOUT_S = 300


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tokensvc" / "npm" / f"oidc-provider-{OIDC_PROVIDER_VERSION}"


def install_oidc_provider() -> Path:
    """The directory holding ``node_modules/oidc-provider`` (npm install on first use)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("the OAUTHBEARER tests need Node.js and npm (apt-get install nodejs npm)")
    target = _cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "node_modules" / "oidc-provider" / "package.json").exists():
            subprocess.run(
                ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund",
                 "--no-save", "--loglevel=error", f"oidc-provider@{OIDC_PROVIDER_VERSION}"],
                check=True, timeout=INSTALL_TIMEOUT_S, capture_output=True)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rsa_signing_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": "RS256", "use": "sig"})


class OidcProvider:
    """A running node-oidc-provider with one confidential client per ``clients`` entry,
    on HTTPS (a CA of its own: :attr:`ca`) unless ``tls`` is False."""

    def __init__(self, directory: Path, *, clients: dict[str, str], audience: str,
                 scope: str = "kafka", ttl_seconds: int = 60, tls: bool = True) -> None:
        self.directory = directory
        self.port = _free_port()
        certs = devcerts.generate(directory / "provider-tls") if tls else None
        self.ca: Path | None = certs.ca if certs is not None else None
        self._context = ssl.create_default_context(cafile=str(self.ca)) if self.ca else None
        self.issuer = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.jwks_url = f"{self.issuer}/jwks"
        self.token_url = f"{self.issuer}/token"
        self.audience = audience
        self.scope = scope
        self.clients = dict(clients)
        self.keys = [rsa_signing_key("oidc-1")]
        self._jwks_file = directory / "provider-jwks.json"
        self._write_keys()
        config = {"issuer": self.issuer, "port": self.port, "jwks_file": str(self._jwks_file),
                  "audience": audience, "scope": scope, "ttl_seconds": ttl_seconds,
                  "clients": [{"client_id": c, "client_secret": s} for c, s in clients.items()],
                  "tls_pem": str(certs.broker) if certs is not None else None}
        config_file = directory / "provider.json"
        config_file.write_text(json.dumps(config))
        home = install_oidc_provider()
        launcher = home / LAUNCHER.name
        shutil.copyfile(LAUNCHER, launcher)  # resolves oidc-provider from its node_modules
        self.log = directory / "provider.log"
        self._log = open(self.log, "w")  # noqa: SIM115 -- the provider's stdout until close()
        self.process = subprocess.Popen(["node", str(launcher), str(config_file)],
                                        stdout=self._log, stderr=subprocess.STDOUT, cwd=home)
        wait_for(lambda: f"listening {self.port}" in self.log.read_text()
                 or self.process.poll() is not None, 30, "OpenID provider start")
        if self.process.poll() is not None:
            raise RuntimeError(f"the OpenID provider did not start: {self.log.read_text()}")

    def _write_keys(self) -> None:
        tmp = self._jwks_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": [k.as_dict(private=True) for k in self.keys]}))
        os.replace(tmp, self._jwks_file)

    @property
    def signing_kid(self) -> str:
        return str(self.keys[0].kid)

    def rotate_key(self) -> str:
        """A new signing key, first in the set; the old one stays published. Returns the
        new ``kid`` once the provider signs with it."""
        new = rsa_signing_key(f"oidc-{len(self.keys) + 1}")
        self.keys.insert(0, new)
        self._write_keys()
        reloads = self.log.read_text().count("keys ")
        self.process.send_signal(signal.SIGHUP)
        wait_for(lambda: self.log.read_text().count("keys ") > reloads, 15,
                 "reload of the OpenID provider's keys")
        return str(new.kid)

    def token(self, client_id: str) -> dict[str, Any]:
        """A client-credentials grant for ``client_id``: the token endpoint's JSON."""
        secret = self.clients[client_id]
        basic = b64encode(f"{client_id}:{secret}".encode()).decode()
        data = urllib.parse.urlencode({"grant_type": "client_credentials",
                                       "scope": self.scope}).encode()
        request = urllib.request.Request(self.token_url, data=data,
                                         headers={"Authorization": f"Basic {basic}"})
        with urllib.request.urlopen(request, timeout=10, context=self._context) as response:
            return json.load(response)

    def access_token(self, client_id: str) -> str:
        return str(self.token(client_id)["access_token"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()


class FileIssuer:
    """A Kubernetes-like issuer: ES256 service-account tokens, public JWKS in a file."""

    def __init__(self, directory: Path, issuer: str = "https://kubernetes.default.svc.cluster.local",
                 audience: str = "tokensvc") -> None:
        self.issuer = issuer
        self.audience = audience
        self.key = ECKey.generate_key("P-256", parameters={"kid": "k8s-1", "alg": "ES256", "use": "sig"})
        self.jwks_file = directory / "k8s-jwks.json"
        self.jwks_file.write_text(json.dumps({"keys": [self.key.as_dict(private=False)]}))

    def service_account_token(self, namespace: str, name: str, *, lifetime_s: int = 600,
                              now: float | None = None, **overrides: Any) -> str:
        """A projected service-account token as the kubelet writes it; ``overrides``
        replace or (value None) remove claims."""
        issued = int(now if now is not None else time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer, "aud": [self.audience],
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "iat": issued, "nbf": issued, "exp": issued + lifetime_s,
            "jti": os.urandom(8).hex(),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name}},
        }
        for claim, value in overrides.items():
            if value is None:
                claims.pop(claim, None)
            else:
                claims[claim] = value
        return jwt.encode({"alg": "ES256", "kid": str(self.key.kid)}, claims, self.key)

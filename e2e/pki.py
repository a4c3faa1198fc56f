"""Certificates, keys, tokens and kubeconfigs of the local control plane.

openssl (the CLI) makes the keys, so the harness needs no crypto library. Every
credential lives in the stack's run directory and dies with it.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import yaml

# Names the API server's serving certificate must answer to: loopback for us, the
# in-cluster names for anything that reads the kube-root-ca.crt ConfigMap.
_SERVING_SANS = (
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
    "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_pki(pki: Path) -> None:
    """A CA, the API server's serving certificate, and the service-account signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-days", "30", "-subj", "/CN=hybrid-scaler-e2e-ca", cwd=pki)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key",
             "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=pki)
    (pki / "san.ext").write_text(f"subjectAltName={_SERVING_SANS}\n")
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "30",
             "-extfile", "san.ext", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


# Static token users. Components get their own identities so the API server's
# bootstrap RBAC roles apply to them as in a real cluster; kwok plays every
# kubelet at once, which no single node identity allows, so it is an admin.
TOKEN_USERS = {
    "admin": ("admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", ""),
    "kube-scheduler": ("system:kube-scheduler", ""),
    "kwok": ("kwok", "system:masters"),
}


def make_tokens(path: Path) -> dict[str, str]:
    """Write the API server's --token-auth-file; returns the token of each identity."""
    tokens = {who: secrets.token_hex(24) for who in TOKEN_USERS}
    lines = []
    for who, (user, groups) in TOKEN_USERS.items():
        lines.append(f'{tokens[who]},{user},{user}' + (f',"{groups}"' if groups else ""))
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return tokens


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str,
                     namespace: str = "default") -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                 "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@e2e",
                      "context": {"cluster": "e2e", "user": user, "namespace": namespace}}],
        "current-context": f"{user}@e2e",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)

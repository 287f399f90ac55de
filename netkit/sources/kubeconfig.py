"""Where the API server is and how to prove who we are: a kubeconfig or in-cluster settings, parsed into
one frozen `ApiConfig` (pure: no file is read here; netkit.sources.apiclient does the IO).

What is read is what client-go's clientcmd reads for kube-proxy and CoreDNS:

| kubeconfig                                   | ApiConfig                                                  |
|----------------------------------------------|------------------------------------------------------------|
| `current-context`, or `--context NAME`       | which context's cluster and user                           |
| cluster `server`                             | `server` (`--master URL` overrides it)                     |
| `certificate-authority(-data)`               | `tls.ca_file` / `tls.ca_data` (the data wins, as in client-go) |
| `insecure-skip-tls-verify`, `tls-server-name`| `tls.insecure`, `tls.server_name`                          |
| user `token`, `tokenFile`                    | a bearer token; a file is re-read as the kubelet rotates it |
| `client-certificate(-data)`, `client-key(-data)` | `tls.cert_*`, `tls.key_*`                              |
| `username`/`password`                        | basic auth                                                 |
| `exec` (client.authentication.k8s.io v1, v1beta1) | `Credentials.exec`: a credential plugin               |

Relative paths are resolved against the kubeconfig's directory (an exec `command` only when it contains
a `/`; a bare name is looked up in PATH). `proxy-url` and `auth-provider` are refused with one clear error:
netkit does not speak to proxies, and client-go's in-tree auth providers are gone (exec replaces them).
KUBECONFIG and ~/.kube/config are not read: like kube-proxy, netkit takes `--kubeconfig` or the pod's
service account, nothing else.

In-cluster (rest.InClusterConfig): `https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT` (an IPv6
host bracketed), the service account's `token` (re-read as it is rotated) and `ca.crt`.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from netkit.errors import NetkitError

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")


class ApiConfigError(NetkitError):
    """The API settings cannot be used: one line naming the file (or in-cluster config) and the field."""


@dataclass(frozen=True, slots=True)
class Tls:
    """How to check the server and which client certificate to show. Data fields hold PEM bytes."""

    ca_file: str = ""
    ca_data: bytes = b""
    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    cert_data: bytes = b""
    key_file: str = ""
    key_data: bytes = b""

    @property
    def has_client_cert(self) -> bool:
        return bool(self.cert_file or self.cert_data)


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """A credential plugin (client.authentication.k8s.io ExecConfig)."""

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False
    install_hint: str = ""
    cluster_extension: Any = None  # the cluster's extensions["client.authentication.k8s.io/exec"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """Who we are. At most one of token (or token_file), basic auth and exec is used, in that order
    (client-go: a token refuses basic auth; exec adds nothing to a request that already has one)."""

    token: str = ""
    token_file: str = ""
    username: str = ""
    password: str = ""
    exec: ExecPlugin | None = None


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Everything needed to reach the API server. `source` names it in errors and logs."""

    server: str
    tls: Tls = field(default_factory=Tls)
    credentials: Credentials = field(default_factory=Credentials)
    source: str = ""

    def with_master(self, master: str) -> ApiConfig:
        """`--master URL`: the server replaced, credentials and TLS kept (as kube-proxy's flag)."""
        try:
            return replace(self, server=server_url(master, self.tls))
        except ValueError as exc:
            raise ApiConfigError(f"--master {exc}") from None


# --- kubeconfig -----------------------------------------------------------------------------------


def parse_kubeconfig(doc: object, *, base_dir: str, context: str = "", source: str = "") -> ApiConfig:
    """The ApiConfig of `doc` (a loaded kubeconfig) for `context` (empty: its current-context).
    Relative paths are resolved against `base_dir`. Raises ApiConfigError prefixed with `source`."""
    try:
        return _parse(doc, base_dir, context, source)
    except _Invalid as exc:
        raise ApiConfigError(f"{source}: {exc}" if source else str(exc)) from None


class _Invalid(Exception):
    pass


def _parse(doc: object, base_dir: str, context: str, source: str) -> ApiConfig:
    if not isinstance(doc, dict):
        raise _Invalid("not a kubeconfig (expected a mapping with clusters, users and contexts)")
    name = context or _str(doc, "current-context", "")
    if not name:
        raise _Invalid("no current-context (give --context NAME)")
    ctx = _named(doc, "contexts", "context", name, f"context {name!r}")
    cluster_name, user_name = _str(ctx, "cluster", f"context {name!r}"), _str(ctx, "user", f"context {name!r}")
    if not cluster_name:
        raise _Invalid(f"context {name!r} names no cluster")
    cluster = _named(doc, "clusters", "cluster", cluster_name, f"cluster {cluster_name!r}")
    user = _named(doc, "users", "user", user_name, f"user {user_name!r}") if user_name else {}
    tls, server = _cluster(cluster, cluster_name, base_dir)
    tls, creds = _user(user, user_name, base_dir, tls, cluster)
    return ApiConfig(server, tls, creds, source)


def _named(doc: Mapping[str, Any], key: str, inner: str, name: str, what: str) -> Mapping[str, Any]:
    entries = doc.get(key) or []
    if not isinstance(entries, list):
        raise _Invalid(f"{key}: expected a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(inner) or {}
            if not isinstance(body, dict):
                raise _Invalid(f"{what}: expected a mapping")
            return body
    raise _Invalid(f"{what} not found in {key}")


def _cluster(cluster: Mapping[str, Any], name: str, base_dir: str) -> tuple[Tls, str]:
    what = f"cluster {name!r}"
    if cluster.get("proxy-url"):
        raise _Invalid(f"{what}: proxy-url is not supported (netkit connects to the server directly)")
    tls = Tls(ca_file=_path(cluster, "certificate-authority", what, base_dir),
              ca_data=_data(cluster, "certificate-authority-data", what),
              insecure=_bool(cluster, "insecure-skip-tls-verify", what),
              server_name=_str(cluster, "tls-server-name", what))
    if tls.insecure and (tls.ca_file or tls.ca_data):
        raise _Invalid(f"{what}: insecure-skip-tls-verify with a certificate authority is not allowed "
                       "(client-go refuses it too)")
    server = _str(cluster, "server", what)
    if not server:
        raise _Invalid(f"{what} has no server")
    try:
        return tls, server_url(server, tls)
    except ValueError as exc:
        raise _Invalid(f"{what}: server {exc}") from None


def _user(user: Mapping[str, Any], name: str, base_dir: str, tls: Tls,
          cluster: Mapping[str, Any]) -> tuple[Tls, Credentials]:
    what = f"user {name!r}"
    if user.get("auth-provider"):
        raise _Invalid(f"{what}: auth-provider is not supported (use an exec credential plugin)")
    tls = replace(tls, cert_file=_path(user, "client-certificate", what, base_dir),
                  cert_data=_data(user, "client-certificate-data", what),
                  key_file=_path(user, "client-key", what, base_dir), key_data=_data(user, "client-key-data", what))
    if tls.has_client_cert != bool(tls.key_file or tls.key_data):
        raise _Invalid(f"{what}: a client certificate needs its key and a key its certificate")
    creds = Credentials(token=_str(user, "token", what), token_file=_path(user, "tokenFile", what, base_dir),
                        username=_str(user, "username", what), password=_str(user, "password", what))
    if (creds.token or creds.token_file) and (creds.username or creds.password):
        raise _Invalid(f"{what}: both a token and username/password; only one is allowed")
    exec_doc = user.get("exec")
    if exec_doc:
        creds = replace(creds, exec=_exec(exec_doc, what, base_dir, cluster))
    return tls, creds


def _exec(doc: object, what: str, base_dir: str, cluster: Mapping[str, Any]) -> ExecPlugin:
    what = f"{what}: exec"
    if not isinstance(doc, dict):
        raise _Invalid(f"{what}: expected a mapping")
    command, version = _str(doc, "command", what), _str(doc, "apiVersion", what)
    if not command:
        raise _Invalid(f"{what}: no command")
    if version not in EXEC_API_VERSIONS:
        raise _Invalid(f"{what}: apiVersion {version!r} is not one of {', '.join(EXEC_API_VERSIONS)}")
    if "/" in command and not posixpath.isabs(command):
        command = posixpath.normpath(posixpath.join(base_dir, command))
    mode = _str(doc, "interactiveMode", what) or ("" if version.endswith("/v1") else "IfAvailable")
    if mode not in EXEC_INTERACTIVE_MODES:
        raise _Invalid(f"{what}: interactiveMode {mode!r} is not one of {', '.join(EXEC_INTERACTIVE_MODES)}"
                       + (" (client.authentication.k8s.io/v1 requires it)" if not mode else ""))
    if mode == "Always":
        raise _Invalid(f"{what}: interactiveMode Always needs a terminal, which a daemon does not have")
    args = doc.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _Invalid(f"{what}: args: expected a list of strings")
    return ExecPlugin(command, version, tuple(args), _env(doc.get("env"), what), mode,
                      _bool(doc, "provideClusterInfo", what), _str(doc, "installHint", what), _exec_extension(cluster))


def _exec_extension(cluster: Mapping[str, Any]) -> Any:
    """The cluster's per-plugin config, passed in KUBERNETES_EXEC_INFO's `cluster.config`."""
    extensions = cluster.get("extensions") or []
    for e in extensions if isinstance(extensions, list) else []:
        if isinstance(e, dict) and e.get("name") == "client.authentication.k8s.io/exec":
            return e.get("extension")
    return None


def _env(entries: object, what: str) -> tuple[tuple[str, str], ...]:
    if not entries:
        return ()
    if not isinstance(entries, list):
        raise _Invalid(f"{what}: env: expected a list of name/value")
    out = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"] \
                or not isinstance(e.get("value", ""), str):
            raise _Invalid(f"{what}: env: each entry needs a name and a string value")
        out.append((e["name"], e.get("value", "")))
    return tuple(out)


def _str(doc: Mapping[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{what}: {key}: expected a string")
    return value


def _bool(doc: Mapping[str, Any], key: str, what: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise _Invalid(f"{what}: {key}: expected true or false")
    return value


def _path(doc: Mapping[str, Any], key: str, what: str, base_dir: str) -> str:
    value = _str(doc, key, what)
    return posixpath.normpath(posixpath.join(base_dir, value)) if value else ""


def _data(doc: Mapping[str, Any], key: str, what: str) -> bytes:
    value = _str(doc, key, what)
    try:
        return base64.b64decode(value, validate=True) if value else b""
    except (binascii.Error, ValueError):
        raise _Invalid(f"{what}: {key}: not base64") from None


def server_url(server: str, tls: Tls) -> str:
    """`server` as a URL without a trailing slash; a bare host:port gets https when TLS settings are
    given, else http (client-go's DefaultServerURL). ValueError for anything else."""
    server = server.strip().rstrip("/")
    if "://" not in server:
        secure = tls.ca_file or tls.ca_data or tls.insecure or tls.has_client_cert
        server = ("https://" if secure else "http://") + server
    if not server.startswith(("http://", "https://")) or not server.split("://", 1)[1]:
        raise ValueError(f"{server!r}: expected an http:// or https:// URL")
    return server


# --- in-cluster -----------------------------------------------------------------------------------


def in_cluster_config(env: Mapping[str, str], secret_dir: str = SERVICE_ACCOUNT_DIR,
                      *, ca: bool = True) -> ApiConfig:
    """The pod's API settings from its environment and service account directory (`ca`: whether
    ca.crt exists; without it the system's authorities are used, as client-go does after logging).
    Raises ApiConfigError outside a pod."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ApiConfigError("not running in a cluster: give --kubeconfig FILE or --master URL "
                             "(or -f DIR to run from manifests)")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    tls = Tls(ca_file=posixpath.join(secret_dir, "ca.crt") if ca else "")
    return ApiConfig(f"https://{host}:{port}", tls, Credentials(token_file=posixpath.join(secret_dir, "token")),
                     "in-cluster config")


# --- exec credential plugins ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecCredential:
    """What a plugin printed: a bearer token or a client certificate (PEM), valid until `expiry`
    (None: until the server answers 401)."""

    token: str = ""
    cert: tuple[bytes, bytes] | None = None
    expiry: datetime | None = None


def exec_info(plugin: ExecPlugin, config: ApiConfig) -> str:
    """KUBERNETES_EXEC_INFO for `plugin`: never interactive (a daemon has no terminal); the cluster
    only with provideClusterInfo."""
    spec: dict[str, Any] = {"interactive": False}
    if plugin.provide_cluster_info:
        cluster: dict[str, Any] = {"server": config.server}
        if config.tls.server_name:
            cluster["tls-server-name"] = config.tls.server_name
        if config.tls.insecure:
            cluster["insecure-skip-tls-verify"] = True
        if config.tls.ca_data:
            cluster["certificate-authority-data"] = base64.b64encode(config.tls.ca_data).decode()
        if plugin.cluster_extension is not None:
            cluster["config"] = plugin.cluster_extension
        spec["cluster"] = cluster
    return json.dumps({"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec})


def parse_exec_credential(text: str | bytes, api_version: str) -> ExecCredential:
    """The plugin's stdout; ValueError saying what is wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError("its output is not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ValueError("its output is not an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise ValueError(f"it returned apiVersion {doc.get('apiVersion')!r}, configured {api_version!r}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise ValueError("its ExecCredential has no status")
    token, cert, key = (status.get(k) or "" for k in ("token", "clientCertificateData", "clientKeyData"))
    if not all(isinstance(v, str) for v in (token, cert, key)) or bool(cert) != bool(key) or not (token or cert):
        raise ValueError("its status has neither a token nor a clientCertificateData/clientKeyData pair")
    return ExecCredential(token, (cert.encode(), key.encode()) if cert else None, _expiry(status))


def _expiry(status: Mapping[str, Any]) -> datetime | None:
    stamp = status.get("expirationTimestamp")
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expirationTimestamp {stamp!r} is not an RFC 3339 time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)

"""The IO edge to the API server: files read, TLS set up, credentials kept fresh, GETs sent over aiohttp.

Theory of operation. `load_config` turns the command line (`--kubeconfig`, `--context`, `--master`) or
the pod's environment into a `netkit.sources.kubeconfig.ApiConfig`; `open_client` reads what it names
(certificates, the token file, the exec plugin's path) and returns an `ApiClient`, or raises
`ApiConfigError` with one line naming the file and the field. After that nothing is fatal: a credential
that cannot be had raises the reflector's `ApiUnavailable` and is tried again after its backoff.

Credentials follow client-go (rest/transport, plugin/pkg/client/auth/exec):
- a `tokenFile` (and the service account's token) is read at start and again at most once a minute,
  since the kubelet rotates it; a failed re-read keeps the last token and logs it;
- an exec plugin runs with its `env` and KUBERNETES_EXEC_INFO, its stderr passed through; its
  credential is kept until its expirationTimestamp, and the plugin runs again when the server answers
  401 to that credential. A client certificate it returns replaces the connection pool (open streams
  reconnect with it, as client-go closes its connections on rotation).

Why netkit's own client: the official `kubernetes` package's import (its sync client, urllib3,
requests, pydantic) cost the daemon ~20 MiB and 0.3-0.4 s of CPU at every start, most of the node
image's Python, and 26 s in the TCG test VM; netkit sends a handful of GETs (docs/sources.md).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import aiohttp
import yaml

from netkit import __version__, yamlload
from netkit.sources.kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    ApiConfig,
    ApiConfigError,
    ExecCredential,
    ExecPlugin,
    Tls,
    exec_info,
    in_cluster_config,
    parse_exec_credential,
    parse_kubeconfig,
    server_url,
)
from netkit.sources.reflector import ApiUnavailable

log = logging.getLogger(__name__)

USER_AGENT = f"netkit/{__version__}"
TOKEN_REREAD = 60.0  # client-go's cachingTokenSource period for a token file
DEFAULT_TIMEOUT = 300.0  # a request given no timeout


# --- configuration --------------------------------------------------------------------------------


def load_config(kubeconfig: str = "", context: str = "", master: str = "", *,
                env: Mapping[str, str] | None = None, secret_dir: str = SERVICE_ACCOUNT_DIR) -> ApiConfig:
    """kube-proxy's choice: `--kubeconfig` (with `--master` overriding its server), else `--master`
    alone (no credentials), else the pod's in-cluster config."""
    if kubeconfig:
        config = _read_kubeconfig(kubeconfig, context)
        return config.with_master(master) if master else config
    if master:
        try:
            return ApiConfig(server_url(master, Tls()), source=f"--master {master}")
        except ValueError as exc:
            raise ApiConfigError(f"--master {exc}") from None
    config = in_cluster_config(os.environ if env is None else env, secret_dir,
                               ca=Path(secret_dir, "ca.crt").is_file())
    if not config.tls.ca_file:
        log.warning("in-cluster config: %s/ca.crt is missing: the system's certificate authorities are used",
                    secret_dir)
    return config


def _read_kubeconfig(path: str, context: str) -> ApiConfig:
    source = f"--kubeconfig {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ApiConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ApiConfigError(f"{source}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        doc = yamlload.safe_load(text)
    except yaml.YAMLError as exc:
        raise ApiConfigError(f"{source}: not YAML: {str(exc).splitlines()[0]}") from None
    return parse_kubeconfig(doc, base_dir=os.path.dirname(os.path.abspath(path)), context=context, source=source)


def open_client(config: ApiConfig, *, clock: Callable[[], float] = time.monotonic) -> ApiClient:
    """A client for `config`, its files read now (ApiConfigError names the one that cannot be used).
    An http:// server needs no TLS: its settings are not read (as the official clients do)."""
    tls = ssl_context(config) if config.server.startswith("https://") else False
    return ApiClient(config, _auth(config, clock), tls)


# --- TLS ------------------------------------------------------------------------------------------


def ssl_context(config: ApiConfig, cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
    """The server checked against the given authority (data over file, as client-go; an empty one
    means the system's, as client-go's empty pool does), else the system's; the client certificate of
    the config, or `cert` (PEM certificate and key) from an exec plugin."""
    tls = config.tls
    try:
        ca = tls.ca_data or (Path(tls.ca_file).read_bytes() if tls.ca_file else b"")
        ctx = ssl.create_default_context(cadata=ca.decode("ascii", "replace") if ca.strip() else None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ApiConfigError(f"{config.source}: certificate-authority {tls.ca_file or '(data)'}: "
                             f"{_reason(exc)}") from None
    if tls.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert is None and tls.has_client_cert:
        try:
            cert = (tls.cert_data or Path(tls.cert_file).read_bytes(), tls.key_data or Path(tls.key_file).read_bytes())
        except OSError as exc:
            raise ApiConfigError(f"{config.source}: client certificate: {_reason(exc)}") from None
    if cert is not None:
        _load_cert_chain(ctx, cert, config.source)
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert: tuple[bytes, bytes], source: str) -> None:
    """`ssl` loads a certificate only from files: written to a private directory, loaded, removed."""
    with tempfile.TemporaryDirectory(prefix="netkit-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        for path, data in ((cert_path, cert[0]), (key_path, cert[1])):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as exc:
            raise ApiConfigError(f"{source}: client certificate and key: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):  # OpenSSL's words, without the C source line
        return re.sub(r"^\[[^]]*\] | \(_ssl\.c:\d+\)$", "", str(exc.args[1] if len(exc.args) > 1 else exc))
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror.lower()}" if exc.filename else exc.strerror.lower()
    return str(exc) or type(exc).__name__


# --- credentials ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Credential:
    """What one request carries: an Authorization header value and/or a client certificate."""

    authorization: str = ""
    cert: tuple[bytes, bytes] | None = None


class Auth(Protocol):
    async def credential(self) -> Credential: ...

    def refused(self, used: Credential) -> None:
        """The server answered 401 to `used`."""


class StaticAuth:
    """A token or basic auth from the kubeconfig, or nothing."""

    def __init__(self, credential: Credential) -> None:
        self._credential = credential

    async def credential(self) -> Credential:
        return self._credential

    def refused(self, used: Credential) -> None:
        pass


class FileTokenAuth:
    """A bearer token read from `path` at most once every TOKEN_REREAD seconds."""

    def __init__(self, path: str, token: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self._token, self._clock = path, token, clock
        self._read_at = clock()

    async def credential(self) -> Credential:
        now = self._clock()
        if now - self._read_at >= TOKEN_REREAD:
            self._read_at = now
            try:
                self._token = read_token(self.path)
            except (OSError, ValueError) as exc:
                log.warning("cannot re-read the token file %s: %s; keeping the last token", self.path, _reason(exc))
        return Credential(f"Bearer {self._token}")

    def refused(self, used: Credential) -> None:
        pass


def read_token(path: str) -> str:
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError("the file is empty")
    return token


class ExecAuth:
    """A credential plugin's token or certificate, kept until it expires or is refused."""

    def __init__(self, plugin: ExecPlugin, config: ApiConfig,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.plugin, self._info, self._now = plugin, exec_info(plugin, config), now
        self._cached: tuple[Credential, datetime | None] | None = None
        self._lock = asyncio.Lock()

    async def credential(self) -> Credential:
        async with self._lock:  # reflectors starting together run the plugin once
            if self._cached is not None:
                cred, expiry = self._cached
                if expiry is None or self._now() < expiry:
                    return cred
            got = await self._run()
            cred = Credential(f"Bearer {got.token}" if got.token else "", got.cert)
            self._cached = (cred, got.expiry)
            return cred

    def refused(self, used: Credential) -> None:
        if self._cached is not None and self._cached[0] == used:
            self._cached = None

    async def _run(self) -> ExecCredential:
        p = self.plugin
        env = {**os.environ, **dict(p.env), "KUBERNETES_EXEC_INFO": self._info}
        try:
            proc = await asyncio.create_subprocess_exec(p.command, *p.args, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE)
            out, _ = await proc.communicate()
        except OSError as exc:
            raise ApiUnavailable(f"exec plugin {p.command}: {_reason(exc)}{_hint(p)}") from exc
        if proc.returncode:
            raise ApiUnavailable(f"exec plugin {p.command}: exit status {proc.returncode}")
        try:
            return parse_exec_credential(out, p.api_version)
        except ValueError as exc:
            raise ApiUnavailable(f"exec plugin {p.command}: {exc}") from None


def _hint(plugin: ExecPlugin) -> str:
    return f" ({plugin.install_hint.strip()})" if plugin.install_hint.strip() else ""


def _auth(config: ApiConfig, clock: Callable[[], float]) -> Auth:
    """client-go's order: a token (file) or basic auth; an exec plugin only when neither is given."""
    c = config.credentials
    if c.token_file:
        try:
            return FileTokenAuth(c.token_file, read_token(c.token_file), clock)
        except (OSError, ValueError) as exc:
            raise ApiConfigError(f"{config.source}: token file {c.token_file}: {_reason(exc)}") from None
    if c.token:
        return StaticAuth(Credential(f"Bearer {c.token}"))
    if c.username or c.password:
        basic = base64.b64encode(f"{c.username}:{c.password}".encode()).decode()
        return StaticAuth(Credential(f"Basic {basic}"))
    if c.exec is not None:
        if shutil.which(c.exec.command) is None:
            raise ApiConfigError(f"{config.source}: exec plugin {c.exec.command}: not found or not executable"
                                 f"{_hint(c.exec)}")
        return ExecAuth(c.exec, config)
    return StaticAuth(Credential())


# --- requests -------------------------------------------------------------------------------------


class ApiClient:
    """GETs to one API server. The connection pool is made on the first request (inside the loop)."""

    def __init__(self, config: ApiConfig, auth: Auth, ssl_ctx: ssl.SSLContext | bool) -> None:
        self.config, self.auth = config, auth
        self._ssl = ssl_ctx
        self._cert: tuple[bytes, bytes] | None = None  # the exec plugin's certificate the pool uses
        self._session: aiohttp.ClientSession | None = None

    async def get(self, path: str, params: Sequence[tuple[str, str]] = (),
                  timeout: float | None = None) -> aiohttp.ClientResponse:
        """GET `path` (with the server's own path prefix), unread: the caller reads and closes it."""
        cred = await self.auth.credential()
        session = await self._session_for(cred.cert)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if cred.authorization:
            headers["Authorization"] = cred.authorization
        resp = await session.get(self.config.server + path, params=list(params), headers=headers,
                                 timeout=aiohttp.ClientTimeout(total=timeout or DEFAULT_TIMEOUT),
                                 server_hostname=self.config.tls.server_name or None)
        if resp.status == 401:
            self.auth.refused(cred)
        return resp

    async def _session_for(self, cert: tuple[bytes, bytes] | None) -> aiohttp.ClientSession:
        if cert is not None and cert != self._cert and self._ssl is not False:
            try:
                self._ssl = ssl_context(self.config, cert)
            except ApiConfigError as exc:  # the plugin's certificate, not the configuration: retried
                raise ApiUnavailable(f"exec plugin: {exc}") from None
            self._cert = cert
            await self.close()
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

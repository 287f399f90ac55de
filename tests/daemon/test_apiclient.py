"""netkit.sources.apiclient against a real HTTPS server on loopback: the authority checked, client
certificates and bearer tokens sent, a token file re-read, exec plugins run, cached and re-run."""

from __future__ import annotations

import base64
import json
import logging
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from netkit.sources.apiclient import load_config, open_client
from netkit.sources.kube import ApiSettings, connect
from netkit.sources.kubeconfig import ApiConfigError
from netkit.sources.reflector import ApiUnavailable

from .conftest import run

V1 = "client.authentication.k8s.io/v1"


@asynccontextmanager
async def https_server(ca: trustme.CA, *names: str, refuse: str = "") -> AsyncIterator[str]:
    """An HTTPS server on 127.0.0.1 with a certificate of `ca` for `names`; it answers every GET with
    the Authorization header and the client certificate's common name, or 401 to `refuse`."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is checked when one is shown

    async def handle(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if refuse and auth == refuse:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(rdn[0] for rdn in (peer or {}).get("subject", ()))
        return web.json_response({"auth": auth, "cn": subject.get("commonName", ""), "path": request.path,
                                  "agent": request.headers.get("User-Agent", "")})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock, ssl_context=ctx)
    await site.start()
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


def write_kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


async def get_json(kubeconfig: str) -> dict[str, Any]:
    api = await connect(ApiSettings(kubeconfig=kubeconfig))
    try:
        async with await api.get("/api/v1/nodes") as resp:
            assert resp.status == 200
            body: dict[str, Any] = await resp.json()
            return body
    finally:
        await api.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_authority_is_checked_and_the_client_certificate_and_token_are_sent(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("kube-proxy.example", common_name="system:kube-proxy")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.crt"))
    client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
    files = {"certificate-authority": "ca.crt"}, {"client-certificate": "client.crt", "client-key": "client.key",
                                                  "token": "secret"}
    data = ({"certificate-authority-data": b64(ca.cert_pem.bytes())},
            {"client-certificate-data": b64(client.cert_chain_pems[0].bytes()),
             "client-key-data": b64(client.private_key_pem.bytes())})

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1") as url:
            # relative file paths against the kubeconfig's directory, and the same as data
            got = await get_json(write_kubeconfig(tmp_path / "files.conf", url, *files))
            assert got == {"auth": "Bearer secret", "cn": "system:kube-proxy", "path": "/api/v1/nodes",
                           "agent": "netkit/0.1.0"}
            got = await get_json(write_kubeconfig(tmp_path / "data.conf", url, *data))
            assert (got["auth"], got["cn"]) == ("", "system:kube-proxy")
            # another authority's server is refused; insecure-skip-tls-verify accepts it
            other = {"certificate-authority-data": b64(trustme.CA().cert_pem.bytes())}
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await get_json(write_kubeconfig(tmp_path / "other.conf", url, other, {"token": "t"}))
            insecure = write_kubeconfig(tmp_path / "insecure.conf", url, {"insecure-skip-tls-verify": True},
                                        {"username": "u", "password": "p"})
            assert (await get_json(insecure))["auth"] == "Basic " + b64(b"u:p")

    run(scenario())


def test_tls_server_name_checks_the_certificate_against_that_name(tmp_path: Path) -> None:
    ca = trustme.CA()
    cluster = {"certificate-authority-data": b64(ca.cert_pem.bytes())}

    async def scenario() -> None:
        async with https_server(ca, "kubernetes.default.svc") as url:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await get_json(write_kubeconfig(tmp_path / "a.conf", url, cluster, {}))
            named = write_kubeconfig(tmp_path / "b.conf", url, {**cluster, "tls-server-name": "kubernetes.default.svc"},
                                     {})
            assert (await get_json(named))["auth"] == ""

    run(scenario())


def test_in_cluster_the_service_account_token_and_authority_are_used(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    (tmp_path / "token").write_text("sa-token\n")

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1") as url:
            env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": url.rsplit(":", 1)[1]}
            api = await connect(ApiSettings(), env=env, secret_dir=str(tmp_path))
            try:
                async with await api.get("/version") as resp:
                    assert (await resp.json())["auth"] == "Bearer sa-token"
            finally:
                await api.close()

    run(scenario())


def test_a_token_file_is_reread_at_most_once_a_minute_and_kept_when_it_goes(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    now = [1000.0]
    conf = write_kubeconfig(tmp_path / "conf", "http://127.0.0.1:1", {}, {"tokenFile": "token"})
    client = open_client(load_config(conf), clock=lambda: now[0])

    def bearer() -> str:
        return run(client.auth.credential()).authorization

    assert bearer() == "Bearer one"
    token.write_text("two")
    now[0] += 59
    assert bearer() == "Bearer one"  # not yet a minute
    now[0] += 1
    assert bearer() == "Bearer two"
    token.unlink()
    now[0] += 60
    with caplog.at_level(logging.WARNING):
        assert bearer() == "Bearer two"
    assert "cannot re-read the token file" in caplog.text


def test_a_missing_token_file_or_exec_command_is_a_config_error(tmp_path: Path) -> None:
    conf = write_kubeconfig(tmp_path / "conf", "http://127.0.0.1:1", {}, {"tokenFile": "gone"})
    with pytest.raises(ApiConfigError, match=f"^--kubeconfig {conf}: token file {tmp_path}/gone: "):
        run(connect(ApiSettings(kubeconfig=conf)))
    conf = write_kubeconfig(tmp_path / "conf", "http://127.0.0.1:1", {},
                            {"exec": {"apiVersion": V1, "command": "no-such-plugin", "interactiveMode": "Never",
                                      "installHint": "apt-get install no-such-plugin"}})
    with pytest.raises(ApiConfigError, match=r"exec plugin no-such-plugin: not found .*\(apt-get install"):
        run(connect(ApiSettings(kubeconfig=conf)))


PLUGIN = f"""#!{sys.executable}
import json, os, pathlib
count = pathlib.Path(os.environ["COUNT_FILE"])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
pathlib.Path(os.environ["COUNT_FILE"] + ".info").write_text(json.dumps(info))
status = {{"token": f"tok-{{n}}"}}
if os.environ.get("EXPIRY"):
    status["expirationTimestamp"] = os.environ["EXPIRY"]
if os.environ.get("CERT"):
    status = {{"clientCertificateData": pathlib.Path(os.environ["CERT"]).read_text(),
              "clientKeyData": pathlib.Path(os.environ["KEY"]).read_text()}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(tmp_path: Path, server: str, cluster: dict[str, Any], **env: str) -> str:
    (tmp_path / "bin").mkdir(exist_ok=True)
    plugin = tmp_path / "bin" / "creds"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    env = {"COUNT_FILE": str(tmp_path / "runs"), **env}
    user = {"exec": {"apiVersion": V1, "command": "./bin/creds", "interactiveMode": "Never", "provideClusterInfo": True,
                     "env": [{"name": k, "value": v} for k, v in env.items()]}}
    return write_kubeconfig(tmp_path / "exec.conf", server, cluster, user)


def _stamp(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("hours", "runs"), [(None, 1), (1, 1), (-1, 3)], ids=["no-expiry", "valid", "expired"])
def test_an_exec_credential_is_kept_until_it_expires(tmp_path: Path, hours: int | None, runs: int) -> None:
    expiry = "" if hours is None else _stamp(timedelta(hours=hours))
    ca = trustme.CA()
    cluster = {"certificate-authority-data": b64(ca.cert_pem.bytes())}

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1") as url:
            api = await connect(ApiSettings(kubeconfig=exec_kubeconfig(tmp_path, url, cluster, EXPIRY=expiry)))
            try:
                for _ in range(3):
                    async with await api.get("/api") as resp:
                        assert (await resp.json())["auth"] == f"Bearer tok-{runs if runs == 1 else _ + 1}"
            finally:
                await api.close()
            info = json.loads((tmp_path / "runs.info").read_text())
            assert info["spec"]["interactive"] is False and info["spec"]["cluster"]["server"] == url

    run(scenario())
    assert (tmp_path / "runs").read_text() == str(runs)


def test_a_refused_exec_credential_runs_the_plugin_again(tmp_path: Path) -> None:
    ca = trustme.CA()

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1", refuse="Bearer tok-1") as url:
            conf = exec_kubeconfig(tmp_path, url, {"certificate-authority-data": b64(ca.cert_pem.bytes())})
            api = await connect(ApiSettings(kubeconfig=conf))
            try:
                async with await api.get("/api") as resp:
                    assert resp.status == 401
                async with await api.get("/api") as resp:
                    assert (await resp.json())["auth"] == "Bearer tok-2"
                async with await api.get("/api") as resp:
                    assert (await resp.json())["auth"] == "Bearer tok-2"
            finally:
                await api.close()

    run(scenario())
    assert (tmp_path / "runs").read_text() == "2"


def test_an_exec_plugins_client_certificate_is_shown(tmp_path: Path) -> None:
    ca = trustme.CA()
    client = ca.issue_cert("node.example", common_name="system:node:a")
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    cluster = {"certificate-authority-data": b64(ca.cert_pem.bytes())}

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1") as url:
            conf = exec_kubeconfig(tmp_path, url, cluster, CERT=str(tmp_path / "c.pem"), KEY=str(tmp_path / "k.pem"))
            assert (await get_json(conf)) == {"auth": "", "cn": "system:node:a", "path": "/api/v1/nodes",
                                              "agent": "netkit/0.1.0"}

    run(scenario())


def test_a_failing_exec_plugin_is_retried_not_fatal(tmp_path: Path) -> None:
    plugin = tmp_path / "fail"
    plugin.write_text("#!/bin/sh\nexit 3\n")
    plugin.chmod(0o755)
    conf = write_kubeconfig(tmp_path / "conf", "http://127.0.0.1:1", {},
                            {"exec": {"apiVersion": V1, "command": str(plugin), "interactiveMode": "Never"}})

    async def scenario() -> None:
        api = await connect(ApiSettings(kubeconfig=conf))
        try:
            for _ in range(2):  # no failure is cached: each request runs the plugin again
                with pytest.raises(ApiUnavailable, match=f"exec plugin {plugin}: exit status 3"):
                    await api.get("/api")
        finally:
            await api.close()

    run(scenario())


def test_an_authority_file_is_read_for_https_only_and_an_empty_one_means_the_systems(tmp_path: Path) -> None:
    (tmp_path / "empty.crt").write_text("")
    (tmp_path / "bad.crt").write_text("not a certificate")
    plain = write_kubeconfig(tmp_path / "http.conf", "http://127.0.0.1:1", {"certificate-authority": "gone.crt"}, {})
    assert run(connect(ApiSettings(kubeconfig=plain))).config.server == "http://127.0.0.1:1"
    for name, error in (("gone.crt", "no such file or directory"), ("bad.crt", "does not contain a certificate$")):
        conf = write_kubeconfig(tmp_path / "https.conf", "https://127.0.0.1:1", {"certificate-authority": name}, {})
        with pytest.raises(ApiConfigError, match=f"^--kubeconfig {conf}: certificate-authority {tmp_path}/{name}: "
                                                 f".*{error}"):
            run(connect(ApiSettings(kubeconfig=conf)))
    ca = trustme.CA()

    async def scenario() -> None:
        async with https_server(ca, "127.0.0.1") as url:  # not a system authority's: refused
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await get_json(write_kubeconfig(tmp_path / "e.conf", url, {"certificate-authority": "empty.crt"}, {}))

    run(scenario())


def test_a_kubeconfig_that_is_not_yaml_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.write_text("clusters: [unclosed\n")
    with pytest.raises(ApiConfigError, match=f"^--kubeconfig {conf}: not YAML: [^\n]+$"):
        run(connect(ApiSettings(kubeconfig=str(conf))))

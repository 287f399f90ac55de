"""netkit.sources.kubeconfig: kubeconfig documents, in-cluster settings and ExecCredentials, parsed."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from netkit.sources.kubeconfig import (
    ApiConfig,
    ApiConfigError,
    Credentials,
    ExecCredential,
    ExecPlugin,
    Tls,
    exec_info,
    in_cluster_config,
    parse_exec_credential,
    parse_kubeconfig,
)

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
B64 = base64.b64encode(PEM).decode()


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "main",
            "clusters": [{"name": "prod", "cluster": {"server": "https://10.0.0.1:6443", **(cluster or {})}},
                         {"name": "other", "cluster": {"server": "https://192.0.2.9"}}],
            "users": [{"name": "admin", "user": user or {}}, {"name": "nobody", "user": {}}],
            "contexts": [{"name": "main", "context": {"cluster": "prod", "user": "admin"}},
                         {"name": "side", "context": {"cluster": "other", "user": "nobody"}},
                         {"name": "anon", "context": {"cluster": "prod"}}]}


def parse(doc: object, context: str = "") -> ApiConfig:
    return parse_kubeconfig(doc, base_dir="/etc/kube", context=context, source="--kubeconfig /etc/kube/conf")


@pytest.mark.parametrize(("doc", "context", "expected"), [
    (kubeconfig(), "", ApiConfig("https://10.0.0.1:6443", source="--kubeconfig /etc/kube/conf")),
    (kubeconfig(), "side", ApiConfig("https://192.0.2.9", source="--kubeconfig /etc/kube/conf")),
    (kubeconfig(), "anon", ApiConfig("https://10.0.0.1:6443", source="--kubeconfig /etc/kube/conf")),
    # relative paths against the kubeconfig's directory; absolute ones as written
    (kubeconfig({"certificate-authority": "pki/ca.crt", "tls-server-name": "kubernetes"},
                {"client-certificate": "/abs/cert.pem", "client-key": "../key.pem", "tokenFile": "token"}), "",
     ApiConfig("https://10.0.0.1:6443",
               Tls(ca_file="/etc/kube/pki/ca.crt", server_name="kubernetes", cert_file="/abs/cert.pem",
                   key_file="/etc/key.pem"),
               Credentials(token_file="/etc/kube/token"), "--kubeconfig /etc/kube/conf")),
    # data fields are base64 in the file, PEM here
    (kubeconfig({"certificate-authority-data": B64}, {"client-certificate-data": B64, "client-key-data": B64,
                                                      "token": "abc"}), "",
     ApiConfig("https://10.0.0.1:6443", Tls(ca_data=PEM, cert_data=PEM, key_data=PEM), Credentials(token="abc"),
               "--kubeconfig /etc/kube/conf")),
    (kubeconfig({"insecure-skip-tls-verify": True, "server": "10.0.0.1:6443/"},
                {"username": "u", "password": "p"}), "",
     ApiConfig("https://10.0.0.1:6443", Tls(insecure=True), Credentials(username="u", password="p"),
               "--kubeconfig /etc/kube/conf")),
    (kubeconfig({"server": "127.0.0.1:8080"}), "",
     ApiConfig("http://127.0.0.1:8080", source="--kubeconfig /etc/kube/conf")),
    (kubeconfig({"server": "https://rancher.example/k8s/clusters/c-1/"}), "",
     ApiConfig("https://rancher.example/k8s/clusters/c-1", source="--kubeconfig /etc/kube/conf")),
])
def test_a_kubeconfig_gives_the_contexts_cluster_and_user(doc: object, context: str, expected: ApiConfig) -> None:
    assert parse(doc, context) == expected


def test_an_exec_plugin_is_read_with_its_env_and_a_relative_command_resolved() -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./bin/creds",
                     "args": ["token", "--x"], "env": [{"name": "A", "value": "1"}], "provideClusterInfo": True,
                     "installHint": "install creds"}}
    cluster = {"extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "k"}}]}
    assert parse(kubeconfig(cluster, user)).credentials.exec == ExecPlugin(
        "/etc/kube/bin/creds", "client.authentication.k8s.io/v1beta1", ("token", "--x"), (("A", "1"),),
        "IfAvailable", True, "install creds", {"audience": "k"})
    user["exec"].update(command="aws", apiVersion="client.authentication.k8s.io/v1", interactiveMode="Never")
    plugin = parse(kubeconfig(cluster, user)).credentials.exec
    assert plugin is not None and plugin.command == "aws" and plugin.interactive_mode == "Never"


def _with(path: str, value: object) -> dict[str, Any]:
    """kubeconfig() with one field set: `path` is `cluster.KEY`, `user.KEY`, `exec.KEY` or a top-level key."""
    doc = kubeconfig()
    where, _, key = path.partition(".")
    if where == "exec":
        doc["users"][0]["user"]["exec"] = {"apiVersion": "client.authentication.k8s.io/v1", "command": "c",
                                           "interactiveMode": "Never"}
        target = doc["users"][0]["user"]["exec"]
    else:
        target = {"cluster": doc["clusters"][0]["cluster"], "user": doc["users"][0]["user"]}.get(where, doc)
        key = key or where
    if value is None:
        target.pop(key, None)
    else:
        target[key] = copy.deepcopy(value)
    return doc


@pytest.mark.parametrize(("doc", "context", "error"), [
    ("just text", "", "not a kubeconfig"),
    (_with("current-context", None), "", "no current-context (give --context NAME)"),
    (kubeconfig(), "nope", "context 'nope' not found in contexts"),
    (_with("contexts", [{"name": "main", "context": {"cluster": "gone", "user": "admin"}}]), "",
     "cluster 'gone' not found in clusters"),
    (_with("contexts", [{"name": "main", "context": {"cluster": "prod", "user": "ghost"}}]), "",
     "user 'ghost' not found in users"),
    (_with("contexts", [{"name": "main", "context": {"user": "admin"}}]), "", "context 'main' names no cluster"),
    (_with("cluster.server", None), "", "cluster 'prod' has no server"),
    (_with("cluster.server", "ftp://x"), "", "cluster 'prod': server 'ftp://x': expected an http:// or https:// URL"),
    (_with("cluster.proxy-url", "http://proxy:3128"), "", "cluster 'prod': proxy-url is not supported"),
    (_with("cluster.certificate-authority-data", "%%%"), "", "certificate-authority-data: not base64"),
    (kubeconfig({"insecure-skip-tls-verify": True, "certificate-authority": "ca"}), "",
     "insecure-skip-tls-verify with a certificate authority is not allowed"),
    (_with("cluster.insecure-skip-tls-verify", "yes"), "", "insecure-skip-tls-verify: expected true or false"),
    (_with("user.client-certificate", "c.pem"), "", "a client certificate needs its key"),
    (_with("user.client-key-data", B64), "", "a client certificate needs its key"),
    (kubeconfig(user={"token": "t", "username": "u"}), "", "both a token and username/password"),
    (_with("user.auth-provider", {"name": "oidc"}), "", "auth-provider is not supported (use an exec"),
    (_with("exec.command", None), "", "exec: no command"),
    (_with("exec.apiVersion", "client.authentication.k8s.io/v1alpha1"), "", "apiVersion 'client.authentication"),
    (_with("exec.interactiveMode", None), "", "(client.authentication.k8s.io/v1 requires it)"),
    (_with("exec.interactiveMode", "Always"), "", "interactiveMode Always needs a terminal"),
    (_with("exec.env", [{"value": "x"}]), "", "env: each entry needs a name"),
    (_with("exec.args", "one"), "", "args: expected a list of strings"),
])
def test_a_kubeconfig_that_cannot_be_used_says_where(doc: object, context: str, error: str) -> None:
    with pytest.raises(ApiConfigError) as err:
        parse(doc, context)
    assert str(err.value).startswith("--kubeconfig /etc/kube/conf: ") and error in str(err.value)
    assert "\n" not in str(err.value)


def test_master_replaces_the_server_and_keeps_credentials() -> None:
    config = parse(kubeconfig({"certificate-authority-data": B64}, {"token": "t"}))
    assert config.with_master("https://10.9.9.9:6443/") == ApiConfig(
        "https://10.9.9.9:6443", config.tls, config.credentials, config.source)
    with pytest.raises(ApiConfigError, match="^--master 'gopher://x': expected"):
        config.with_master("gopher://x")


@pytest.mark.parametrize(("env", "server"), [
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "https://10.96.0.1:443"),
    ({"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "443"}, "https://[fd00:10:96::1]:443"),
])
def test_in_cluster_settings_come_from_the_environment_and_the_service_account(env: dict[str, str],
                                                                               server: str) -> None:
    assert in_cluster_config(env, "/sa") == ApiConfig(server, Tls(ca_file="/sa/ca.crt"),
                                                      Credentials(token_file="/sa/token"), "in-cluster config")
    assert in_cluster_config(env, "/sa", ca=False).tls == Tls()


def test_outside_a_pod_the_error_says_what_to_pass() -> None:
    with pytest.raises(ApiConfigError, match="not running in a cluster: give --kubeconfig FILE or --master URL"):
        in_cluster_config({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_the_exec_info_carries_the_cluster_only_when_asked() -> None:
    config = ApiConfig("https://10.0.0.1", Tls(ca_data=PEM, server_name="kubernetes"))
    plugin = ExecPlugin("c", "client.authentication.k8s.io/v1", cluster_extension={"a": 1})
    assert json.loads(exec_info(plugin, config)) == {
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "spec": {"interactive": False}}
    with_cluster = ExecPlugin("c", "client.authentication.k8s.io/v1", provide_cluster_info=True,
                              cluster_extension={"a": 1})
    assert json.loads(exec_info(with_cluster, config))["spec"]["cluster"] == {
        "server": "https://10.0.0.1", "tls-server-name": "kubernetes", "certificate-authority-data": B64,
        "config": {"a": 1}}


V1 = "client.authentication.k8s.io/v1"


def credential(status: object, version: str = V1, kind: str = "ExecCredential") -> str:
    return json.dumps({"apiVersion": version, "kind": kind, "status": status})


@pytest.mark.parametrize(("text", "expected"), [
    (credential({"token": "t"}), ExecCredential("t")),
    (credential({"token": "t", "expirationTimestamp": "2030-01-02T03:04:05Z"}),
     ExecCredential("t", expiry=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))),
    (credential({"clientCertificateData": "C", "clientKeyData": "K"}), ExecCredential(cert=(b"C", b"K"))),
])
def test_an_exec_credential_is_read(text: str, expected: ExecCredential) -> None:
    assert parse_exec_credential(text, V1) == expected


@pytest.mark.parametrize(("text", "error"), [
    ("token", "its output is not JSON"),
    (credential({"token": "t"}, kind="Secret"), "not an ExecCredential"),
    (credential({"token": "t"}, version="client.authentication.k8s.io/v1beta1"),
     "it returned apiVersion 'client.authentication.k8s.io/v1beta1', configured"),
    (credential(None), "no status"),
    (credential({}), "neither a token nor"),
    (credential({"clientCertificateData": "C"}), "neither a token nor"),
    (credential({"token": "t", "expirationTimestamp": "soon"}), "expirationTimestamp 'soon' is not an RFC 3339"),
])
def test_a_bad_exec_credential_says_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_exec_credential(text, V1)
    assert error in str(err.value)

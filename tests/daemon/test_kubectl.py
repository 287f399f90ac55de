"""kubectl v1.32 against the test API server: apply (validated against the server's OpenAPI, unknown
fields refused), create, get, replace, delete, get -w. Also the RBAC check
helper, fed by what the netkit source itself requested."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from netkit.sources.kube import ApiSettings, KubeSource
from netkit.sources.store import Store
from netkit.testing.apiserver import TestApiServer, rbac_uncovered
from netkit.testing.apistore import resource_for_kind
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import FAST, background, run

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")

SERVICES = resource_for_kind("Service")
MANIFEST = """apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {{app: web}}
spec:
  selector: {{app: web}}
  ports:
  - {{name: http, port: {port}, targetPort: 8080}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: 8080}}]
endpoints:
- addresses: [10.244.1.1]
"""


class Kubectl:
    def __init__(self, srv: TestApiServer, tmp: Path) -> None:
        self.tmp = tmp
        self.base = ["kubectl", f"--kubeconfig={srv.write_kubeconfig(tmp / 'kubeconfig')}",
                     f"--cache-dir={tmp / 'cache'}", "--request-timeout=10s"]

    async def __call__(self, *args: str, ok: bool = True) -> str:
        """kubectl's stdout; with ok=False, a failing kubectl's stderr."""
        proc = await asyncio.create_subprocess_exec(*self.base, *args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert (proc.returncode == 0) == ok, f"kubectl {' '.join(args)}: {proc.returncode} {err.decode()}"
        return out.decode() if ok else err.decode()

    def manifest(self, port: int) -> str:
        path = self.tmp / f"web-{port}.yaml"
        path.write_text(MANIFEST.format(port=port))
        return str(path)


def test_kubectl_create_get_replace_delete(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubectl = Kubectl(srv, tmp_path)
            out = await kubectl("create", "-f", kubectl.manifest(80))
            assert "service/web created" in out and "endpointslice.discovery.k8s.io/web-1 created" in out
            assert "web" in await kubectl("get", "services")
            svc = json.loads(await kubectl("get", "service", "web", "-o", "json"))
            assert svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["clusterIP"].startswith("10.96.")
            out = await kubectl("replace", "-f", kubectl.manifest(81))
            assert "service/web replaced" in out
            svc = json.loads(await kubectl("get", "svc", "web", "-o", "json"))
            assert svc["spec"]["ports"][0]["port"] == 81
            names = await kubectl("get", "endpointslices", "-o", "name")
            assert names.split() == ["endpointslice.discovery.k8s.io/web-1"]
            out = await kubectl("delete", "-f", kubectl.manifest(81))
            assert 'service "web" deleted' in out
            assert (await kubectl("get", "services", "-o", "name")).strip() == ""
            verbs = {(a.verb, a.resource) for a in srv.audit if a.resource}
            assert {("create", "services"), ("get", "services"), ("update", "services"),
                    ("delete", "services"), ("list", "services")} <= verbs

    run(scenario())


def test_kubectl_apply_as_people_type_it_and_unknown_fields_are_refused_by_name(tmp_path: Path) -> None:
    """No --validate=false: kubectl reads /openapi/v3, sees the server takes fieldValidation and sends
    fieldValidation=Strict; a manifest with an unknown field is refused naming it, on create and on
    the patch of a second apply, and --validate=warn stores the object without the field."""
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubectl = Kubectl(srv, tmp_path)
            out = await kubectl("apply", "-f", kubectl.manifest(80))
            assert "service/web created" in out and "endpointslice.discovery.k8s.io/web-1 created" in out
            assert "fieldValidation=Strict" in srv.requests("create", "services")[0].query
            assert "unchanged" in await kubectl("apply", "-f", kubectl.manifest(80))
            out = await kubectl("apply", "-f", kubectl.manifest(81))
            assert "service/web configured" in out
            assert srv.store.get(SERVICES, "default", "web")["spec"]["ports"][0]["port"] == 81
            bad = tmp_path / "bad.yaml"
            bad.write_text(MANIFEST.format(port=82).split("---")[0].replace("  selector:", "  bogus: 1\n  selector:"))
            err = await kubectl("apply", "-f", str(bad), ok=False)
            assert 'strict decoding error: unknown field "spec.bogus"' in err
            assert srv.store.get(SERVICES, "default", "web")["spec"]["ports"][0]["port"] == 81
            await kubectl("delete", "service", "web")
            err = await kubectl("create", "-f", str(bad), ok=False)
            assert 'Service in version "v1" cannot be handled as a Service: strict decoding error: ' \
                   'unknown field "spec.bogus"' in err
            out = await kubectl("create", "--validate=warn", "-f", str(bad))
            assert "service/web created" in out
            assert "bogus" not in srv.store.get(SERVICES, "default", "web")["spec"]

    run(scenario())


def test_kubectl_get_watch_sees_a_create(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubectl = Kubectl(srv, tmp_path)
            proc = await asyncio.create_subprocess_exec(*kubectl.base, "get", "services", "-w", "-o", "name",
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            try:
                while srv.open_watches == 0:
                    await asyncio.sleep(0.02)
                await kubectl("create", "-f", kubectl.manifest(80))
                assert proc.stdout is not None
                line = await asyncio.wait_for(proc.stdout.readline(), EVENT_TIMEOUT)
                assert line.decode().strip() == "service/web"
            finally:
                proc.terminate()
                await proc.wait()

    run(scenario())


def test_rbac_check_finds_requests_a_role_does_not_allow() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            store = Store()
            async with background(KubeSource(ApiSettings(master=srv.url), store, node_name="node-a",
                                             options=FAST).run()):
                await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            role = {"rules": [
                {"apiGroups": [""], "resources": ["services", "nodes"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ]}
            assert rbac_uncovered(srv.audit, role) == []
            narrow = {"rules": role["rules"][:1]}
            assert {a.resource for a in rbac_uncovered(srv.audit, narrow)} == {"endpointslices"}
            assert {a.path for a in rbac_uncovered(srv.audit, role, include_discovery=True)} == \
                {"/apis/discovery.k8s.io/v1/"}

    run(scenario())


def test_kubectl_shows_the_registrys_refusal_as_against_kube_apiserver(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer(kubernetes_service=True) as srv:
            kubectl = Kubectl(srv, tmp_path)
            clash = tmp_path / "clash.yaml"
            clash.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: clash}\n"
                             "spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n")
            err = await kubectl("apply", "-f", str(clash), ok=False)
            assert 'The Service "clash" is invalid: spec.clusterIPs: Invalid value: []string{"10.96.0.1"}: ' \
                   "failed to allocate IP 10.96.0.1: provided IP is already allocated" in err

    run(scenario())

"""The few API calls the lab's commands make (create, get, replace, delete Pods and Nodes), over
plain HTTP to the cluster's API server on this machine's loopback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from netkit.lab.errors import LabError

JSON = dict[str, Any]


class Api:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.base, self.timeout = f"http://127.0.0.1:{port}", timeout

    def call(self, method: str, path: str, body: JSON | None = None) -> JSON:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                result: JSON = json.loads(resp.read() or b"{}")
                return result
        except urllib.error.HTTPError as exc:
            raise LabError(f"API {method} {path}: {exc.code} {exc.read().decode(errors='replace')[:200]}") from exc
        except OSError as exc:
            raise LabError(f"the cluster's API server does not answer ({self.base}): {exc}") from exc

    @staticmethod
    def path(kind: str, namespace: str = "", name: str = "") -> str:
        prefix = {"pods": "/api/v1", "nodes": "/api/v1", "services": "/api/v1",
                  "endpointslices": "/apis/discovery.k8s.io/v1"}[kind]
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"{prefix}{ns}/{kind}" + (f"/{name}" if name else "")

    def list(self, kind: str) -> list[JSON]:
        items: list[JSON] = self.call("GET", self.path(kind)).get("items") or []
        return items

    def get(self, kind: str, namespace: str, name: str) -> JSON:
        return self.call("GET", self.path(kind, namespace, name))

    def create(self, kind: str, namespace: str, obj: JSON) -> JSON:
        return self.call("POST", self.path(kind, namespace), obj)

    def replace(self, kind: str, namespace: str, obj: JSON) -> JSON:
        return self.call("PUT", self.path(kind, namespace, obj["metadata"]["name"]), obj)

    def delete(self, kind: str, namespace: str, name: str) -> JSON:
        return self.call("DELETE", self.path(kind, namespace, name))

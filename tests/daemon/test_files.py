"""The file source: a manifest directory followed with watchfiles; invalid edits keep the last good version."""

from __future__ import annotations

import asyncio
import logging
import shutil
from ipaddress import ip_address
from pathlib import Path

import pytest

from netkit.errors import Problem
from netkit.model.types import AddressType, EndpointSlice, KubeObject, Node, ObjectRef, Service
from netkit.sources.files import FileSource, keep_last_good
from netkit.sources.store import Store
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import background, eventually, run

SVC = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  clusterIP: {ip}
  ports: [{{name: http, port: {port}}}]
"""
SLICE = """apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.244.1.1]
"""


def ports(store: Store) -> dict[str, int]:
    return {s.ref.name: s.ports[0].port for s in store.objects().services}


def test_follows_creates_edits_invalid_edits_and_deletes(tmp_path: Path) -> None:
    async def scenario() -> None:
        (tmp_path / "sub").mkdir()
        (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80) + "---\n" + SLICE)
        (tmp_path / "sub" / "api.yml").write_text(SVC.format(name="api", ip="10.96.0.11", port=80))
        (tmp_path / "notes.txt").write_text("not a manifest")
        store = Store()
        source = FileSource([str(tmp_path)], store, debounce_ms=20, step_ms=10)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            assert ports(store) == {"api": 80, "web": 80}
            assert [s.ref.name for s in store.objects().slices] == ["web-1"]
            store.take_changes()

            (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=81) + "---\n" + SLICE)
            await eventually(lambda: ports(store).get("web") == 81, what="an edit")
            [change] = store.take_changes().values()
            assert change.key.kind == "Service" and change.key.ref.name == "web"  # the slice did not change

            (tmp_path / "web.yaml").write_text("kind: Service\nmetadata: [unclosed\n")  # unparseable
            await eventually(lambda: bool(store.problems), what="a problem")
            assert ports(store) == {"api": 80, "web": 81}
            assert len(store.objects().slices) == 1

            (tmp_path / "sub" / "api.yml").write_text(SVC.format(name="api", ip="10.96.0.11", port=99999))
            await eventually(lambda: tmp_path / "sub" / "api.yml" in store.problems, what="an invalid object")
            assert ports(store)["api"] == 80

            (tmp_path / "new.json").write_text(
                '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}')
            await eventually(lambda: [n.name for n in store.objects().nodes] == ["node-a"], what="a new file")

            (tmp_path / "web.yaml").unlink()
            await eventually(lambda: "web" not in ports(store), what="a delete")
            assert store.objects().slices == ()
            assert tmp_path / "web.yaml" not in store.problems

    run(scenario())


def test_a_single_file_path_is_followed(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "svc.yaml"
        path.write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
        (tmp_path / "other.yaml").write_text(SVC.format(name="other", ip="10.96.0.12", port=80))
        store = Store()
        async with background(FileSource([str(path)], store, debounce_ms=20, step_ms=10).run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            assert ports(store) == {"web": 80}
            # an editor's save: write a new file, rename it over the old one
            (tmp_path / ".svc.yaml.tmp").write_text(SVC.format(name="web", ip="10.96.0.10", port=82))
            (tmp_path / ".svc.yaml.tmp").rename(path)
            await eventually(lambda: ports(store) == {"web": 82}, what="a rename over the file")

    run(scenario())


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run(FileSource([str(tmp_path / "nope")], Store()).run())


WEB1 = Service(ObjectRef("default", "web"), cluster_ips=(ip_address("10.96.0.10"),))
WEB2 = Service(ObjectRef("default", "web"), cluster_ips=(ip_address("10.96.0.20"),))
API1 = Service(ObjectRef("prod", "api"), cluster_ips=(ip_address("10.96.0.11"),))
NODE = Node("node-a")
LEGACY = EndpointSlice(ObjectRef("default", "web-legacy-0-ipv4"), "web", AddressType.IPV4,
                       from_legacy_endpoints=True)


def problem(kind: str, name: str) -> Problem:
    return Problem("f.yaml", kind, name, "spec", "bad")


Objs = tuple[KubeObject, ...]
KEEP: list[tuple[str, Objs, Objs, tuple[Problem, ...], Objs]] = [
    ("valid edit replaces", (WEB1, API1), (WEB2,), (), (WEB2,)),
    ("unparseable keeps everything", (WEB1, API1), (), (problem("?", "?"),), (WEB1, API1)),
    ("first load unparseable gives nothing", (), (), (problem("?", "?"),), ()),
    ("invalid object keeps its previous version", (WEB1, API1), (WEB2,), (problem("Service", "prod/api"),),
     (WEB2, API1)),
    ("name without namespace means default", (WEB1,), (), (problem("Service", "web"),), (WEB1,)),
    ("invalid legacy Endpoints keeps its slices", (LEGACY,), (), (problem("Endpoints", "default/web"),), (LEGACY,)),
    ("invalid node keeps the node", (NODE,), (), (problem("Node", "node-a"),), (NODE,)),
    ("a problem about another object keeps nothing", (WEB1,), (), (problem("Service", "prod/web"),), ()),
]


@pytest.mark.parametrize("name, previous, decoded, problems, expected", KEEP, ids=[k[0] for k in KEEP])
def test_keep_last_good(name: str, previous: tuple[KubeObject, ...], decoded: tuple[KubeObject, ...],
                        problems: tuple[Problem, ...], expected: tuple[KubeObject, ...]) -> None:
    assert keep_last_good(previous, decoded, problems) == expected


def names(store: Store) -> set[str]:
    return {s.ref.name for s in store.objects().services}


def fast(paths: list[Path], store: Store, **kw: object) -> FileSource:
    return FileSource([str(p) for p in paths], store, debounce_ms=20, step_ms=10, poll_ms=50, **kw)  # type: ignore[arg-type]


def test_a_removed_directory_is_kept_and_followed_when_it_comes_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`rm -rf DIR`, then re-create it: the objects stay meanwhile (logged), later edits are applied."""
    d = tmp_path / "manifests"

    async def scenario() -> None:
        d.mkdir()
        (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
        (d / "api.yaml").write_text(SVC.format(name="api", ip="10.96.0.11", port=80))
        store = Store()
        source = fast([d], store)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            assert names(store) == {"web", "api"}
            shutil.rmtree(d)
            await eventually(lambda: d in source.gone, what="the directory seen gone")
            await asyncio.sleep(0.2)
            assert ports(store) == {"web": 80, "api": 80}, "a vanished directory keeps its objects"
            d.mkdir()
            (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=81))
            await eventually(lambda: ports(store) == {"web": 81}, what="the re-created directory read")
            assert not source.gone and source.watches >= 2
            (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=82))
            await eventually(lambda: ports(store) == {"web": 82}, what="a later edit")
            (d / "new.yaml").write_text(SVC.format(name="new", ip="10.96.0.12", port=80))
            await eventually(lambda: names(store) == {"web", "new"}, what="a later new file")

    with caplog.at_level(logging.INFO, logger="netkit.sources.files"):
        run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert any("removed or replaced; keeping the 2 objects" in m for m in messages), messages
    assert any("manifests are back; following it again" in m for m in messages), messages


def test_a_directory_replaced_at_once_is_followed(tmp_path: Path) -> None:
    """Removed and re-created between two looks (a new inode under the old name)."""
    d = tmp_path / "m"

    async def scenario() -> None:
        d.mkdir()
        (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
        store = Store()
        source = fast([d], store)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            staged = tmp_path / "staged"
            staged.mkdir()
            (staged / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=81))
            shutil.rmtree(d)
            staged.rename(d)
            await eventually(lambda: ports(store) == {"web": 81}, what="the replacement read")
            (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=82))
            await eventually(lambda: ports(store) == {"web": 82}, what="an edit in the replacement")

    run(scenario())


def test_an_emptied_directory_keeps_its_objects_until_files_come_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80) + "---\n" + SLICE)
        (tmp_path / "api.yaml").write_text(SVC.format(name="api", ip="10.96.0.11", port=80))
        store = Store()
        source = fast([tmp_path], store)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            store.take_changes()
            (tmp_path / "web.yaml").unlink()
            (tmp_path / "api.yaml").unlink()
            await eventually(lambda: tmp_path in source.gone, what="the directory seen empty")
            await asyncio.sleep(0.2)
            assert names(store) == {"web", "api"} and len(store.objects().slices) == 1
            assert store.take_changes() == {}, "nothing changed while the files were away"
            (tmp_path / "api.yaml").write_text(SVC.format(name="api", ip="10.96.0.11", port=81))
            await eventually(lambda: ports(store) == {"api": 81}, what="the files back")
            assert store.objects().slices == (), "what did not come back is gone now"

    run(scenario())


def test_a_file_left_without_services_counts_as_empty(tmp_path: Path) -> None:
    async def scenario() -> None:
        (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80) + "---\n" + SLICE)
        store = Store()
        source = fast([tmp_path], store)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            (tmp_path / "web.yaml").write_text(SLICE)  # the Service removed: the last one
            await eventually(lambda: tmp_path in source.gone, what="no Service left")
            assert names(store) == {"web"}

    run(scenario())


def test_allow_empty_takes_an_empty_directory_as_no_services(tmp_path: Path) -> None:
    d = tmp_path / "m"

    async def scenario() -> None:
        d.mkdir()
        (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
        store = Store()
        source = fast([d], store, allow_empty=True)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            (d / "web.yaml").unlink()
            await eventually(lambda: names(store) == set(), what="the explicit empty input")
            (d / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
            await eventually(lambda: names(store) == {"web"}, what="the file back")
            shutil.rmtree(d)  # vanished is not "explicitly empty": kept even with allow_empty
            await eventually(lambda: d in source.gone, what="the directory gone")
            await asyncio.sleep(0.2)
            assert names(store) == {"web"}

    run(scenario())


def test_an_empty_directory_at_start_is_waited_for(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = Store()
        async with background(fast([tmp_path], store).run()):
            await asyncio.sleep(0.3)
            assert not store.all_synced, "no first sync from an empty input: the node's rules stay"
            (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            assert names(store) == {"web"}
        allowed = Store()
        async with background(fast([tmp_path / "sub"], allowed, allow_empty=True).run()):
            await asyncio.wait_for(allowed.wait_synced(), EVENT_TIMEOUT)
            assert names(allowed) == set()

    (tmp_path / "sub").mkdir()
    run(scenario())


def test_a_deleted_single_file_is_kept_until_it_comes_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "svc.yaml"
        path.write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
        store = Store()
        source = fast([path], store, allow_empty=True)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            path.unlink()
            await eventually(lambda: path in source.gone, what="the file gone")
            assert names(store) == {"web"}
            path.write_text(SVC.format(name="web", ip="10.96.0.10", port=83))
            await eventually(lambda: ports(store) == {"web": 83}, what="the file back")

    run(scenario())


def test_files_written_back_one_by_one_are_read_once_they_settle(tmp_path: Path) -> None:
    """A tool re-creating the files one at a time is not caught half-way (which would drop the
    Services of the files not written yet)."""
    d = tmp_path / "m"

    async def scenario() -> None:
        d.mkdir()
        for n, name in enumerate(("web", "api", "db")):
            (d / f"{name}.yaml").write_text(SVC.format(name=name, ip=f"10.96.0.{10 + n}", port=80))
        store = Store()
        source = FileSource([str(d)], store, debounce_ms=10, step_ms=5, poll_ms=150)
        seen: list[frozenset[str]] = []

        async def watch() -> None:
            while True:
                seen.append(frozenset(names(store)))
                await asyncio.sleep(0.005)

        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            async with background(watch()):
                shutil.rmtree(d)
                await eventually(lambda: d in source.gone, what="the directory gone")
                d.mkdir()
                for n, name in enumerate(("web", "api", "db")):
                    (d / f"{name}.yaml").write_text(SVC.format(name=name, ip=f"10.96.0.{10 + n}", port=81))
                    await asyncio.sleep(0.06)
                await eventually(lambda: set(ports(store).values()) == {81}, what="all three back")
        assert set(seen) == {frozenset({"web", "api", "db"})}, "never a partial set of Services"

    run(scenario())


def test_run_takes_allow_empty() -> None:
    from netkit.cli import parser

    assert parser().parse_args(["run", "-f", "dir", "--allow-empty"]).allow_empty is True
    assert parser().parse_args(["run", "-f", "dir"]).allow_empty is False


def test_files_deleted_one_after_another_are_seen_together(tmp_path: Path) -> None:
    """Every file deleted, in separate watcher batches but close together: the directory empties —
    nothing is removed on the way (which would drop the first files' Services)."""
    async def scenario() -> None:
        for n, name in enumerate(("web", "api", "db")):
            (tmp_path / f"{name}.yaml").write_text(SVC.format(name=name, ip=f"10.96.0.{10 + n}", port=80))
        store = Store()
        source = FileSource([str(tmp_path)], store, debounce_ms=10, step_ms=5, poll_ms=300)
        async with background(source.run()):
            await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
            store.take_changes()
            for name in ("web", "api", "db"):
                (tmp_path / f"{name}.yaml").unlink()
                await asyncio.sleep(0.08)
            await eventually(lambda: tmp_path in source.gone, what="the directory seen empty")
            assert names(store) == {"web", "api", "db"} and store.take_changes() == {}
            (tmp_path / "web.yaml").write_text(SVC.format(name="web", ip="10.96.0.10", port=80))
            await eventually(lambda: names(store) == {"web"}, what="the file back")

    run(scenario())

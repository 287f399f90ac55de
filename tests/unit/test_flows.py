"""`netkit flows`'s pure tally (netkit.model.flows) and its text and JSON: each conntrack entry sent to
a Service frontend counted under that port and the endpoint its reply comes from, stale when that
is not a serving endpoint; entries to no Service, or of another protocol, are not counted."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest
from jsonschema import ValidationError

from netkit.cli import main
from netkit.cli.flows import predicted, text, to_json, watch
from netkit.cli.inputs import Inputs
from netkit.config import Config
from netkit.model import Protocol, build
from netkit.model.conntrack import Flow
from netkit.model.flows import tally
from tests.factories import endpoint, node, objects, service, slice_
from tests.json_schemas import valid_flows_document

CLUSTER_IP, EXTERNAL_IP, NODE_IP, A, B, GONE = "172.30.1.1", "192.168.99.100", "192.0.2.10", \
    "10.240.0.4", "10.240.0.5", "10.240.9.9"
OBJECTS = objects(
    node(),
    service("dns", ip=CLUSTER_IP, type="NodePort", externalIPs=[EXTERNAL_IP],
            ports=[{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP", "nodePort": 30053}]),
    slice_("dns", endpoints=[endpoint(A), endpoint(B), endpoint("10.240.0.6", ready=False, serving=False)],
           ports=[{"name": "dns", "port": 5353, "protocol": "UDP"}]))
STATE = build(OBJECTS, "node-a", ())


def entry(dst: str, dport: int, reply: str, rport: int = 5353, proto: Protocol = Protocol.UDP,
          sport: int = 40000) -> tuple[Protocol, Flow]:
    return proto, Flow(ip_address("203.0.113.5"), sport, ip_address(dst), dport, ip_address(reply), rport)


def test_entries_are_counted_per_endpoint_and_stale_ones_flagged() -> None:
    entries = [entry(CLUSTER_IP, 53, A, sport=1), entry(CLUSTER_IP, 53, A, sport=2), entry(EXTERNAL_IP, 53, A),
               entry(NODE_IP, 30053, B),  # the nodePort, on any node address
               entry(CLUSTER_IP, 53, GONE),  # an endpoint that is gone
               entry(CLUSTER_IP, 53, "10.240.0.6"),  # one that no longer serves
               entry(CLUSTER_IP, 53, A, rport=6000),  # the right pod, an old target port
               entry(CLUSTER_IP, 53, CLUSTER_IP, rport=53),  # never DNATed
               entry(CLUSTER_IP, 53, A, proto=Protocol.TCP),  # not the UDP port's
               entry(CLUSTER_IP, 80, A), entry("10.96.9.9", 53, A)]  # no Service there
    (port,) = tally(entries, STATE)
    got = [(str(e.ip), e.port, e.flows, e.stale) for e in port.endpoints]
    assert got[:2] == [(A, 5353, 3, False), (B, 5353, 1, False)]  # serving first, most flows first
    assert sorted(got[2:]) == sorted([(GONE, 5353, 1, True), ("10.240.0.6", 5353, 1, True), (A, 6000, 1, True),
                                      (CLUSTER_IP, 53, 1, True)])
    assert (port.flows, port.stale) == (8, 4)


def test_no_entry_through_a_service() -> None:
    assert tally([entry("10.96.9.9", 53, A)], STATE) == ()
    assert text(()) == "no flows through Services\n"
    assert to_json(()) == {"schema": "netkit.flows/v1", "services": []}


def test_text_and_json() -> None:
    ports = tally([entry(CLUSTER_IP, 53, A, sport=1), entry(CLUSTER_IP, 53, A, sport=2),
                   entry(CLUSTER_IP, 53, B), entry(CLUSTER_IP, 53, GONE)], STATE)
    assert text(ports).splitlines() == [
        "default/dns:dns (udp) 172.30.1.1:53  4 flows, 1 stale",
        "  10.240.0.4:5353               2   50.0%",
        "  10.240.0.5:5353               1   25.0%",
        "  10.240.9.9:5353               1   25.0%  stale: not a serving endpoint",
    ]
    (doc,) = to_json(ports)["services"]  # type: ignore[misc]
    assert doc["flows"] == 4 and doc["stale"] == 1 and doc["protocol"] == "udp" and doc["port"] == "dns"
    assert doc["endpoints"][2] == {"ip": GONE, "port": 5353, "flows": 1, "share": 0.25, "predicted": None,
                                   "stale": True}


def test_trace_predicts_the_shares_beside_the_observed_ones() -> None:
    """Over the rules the manifests compile to, from the node: both serving endpoints half each, the
    gone one nothing; a serving endpoint without flows is listed with 0."""
    ports = tally([entry(CLUSTER_IP, 53, A), entry(CLUSTER_IP, 53, GONE)], STATE)
    for mode in ("iptables", "nftables", "ipvs"):
        shares = predicted(ports, Inputs(Config(node_name="node-a", mode=mode), OBJECTS, STATE, ()))
        rows = {e["ip"]: (e["flows"], e["predicted"]) for e in to_json(ports, shares)["services"][0]["endpoints"]}  # type: ignore[index]
        assert rows == {A: (1, 0.5), GONE: (1, 0.0), B: (0, 0.5)}, mode
    assert "  10.240.0.5:5353               0    0.0%  (trace:  50.0%)" in text(ports, shares)


def test_watch_renders_again_until_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    pages = iter(["first\n", "second\n"])
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        watch(lambda: next(pages), 1.5, sleep)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if not line.startswith("--- ")] == ["first", "second"] and sleeps == [1.5, 1.5]
    assert len([line for line in out if line.startswith("--- ")]) == 2  # not a terminal: a time line per page


@pytest.mark.parametrize("argv", [["--watch", "-o", "json"], ["--watch", "0"]])
def test_watch_refuses_structured_output_and_no_interval(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flows", "-f", "nothing.yaml", *argv]) == 2
    assert capsys.readouterr().err.startswith("netkit: error: --watch:")


def _document() -> dict[str, object]:
    ports = tally([entry(CLUSTER_IP, 53, A), entry(CLUSTER_IP, 53, GONE)], STATE)
    return to_json(ports, predicted(ports, Inputs(Config(node_name="node-a"), OBJECTS, STATE, ())))


def test_json_validates_against_the_committed_schema() -> None:
    valid_flows_document(to_json(()))
    doc = valid_flows_document(_document())
    assert [e["predicted"] for e in doc["services"][0]["endpoints"]] == [0.5, 0.0, 0.5]
    ports = tally([entry(CLUSTER_IP, 53, A)], STATE)
    valid_flows_document(to_json(ports))  # no node address of the family: predicted null


@pytest.mark.parametrize(("where", "broken"), [
    ("schema", lambda d: d.update(schema="netkit.flows/v2")),
    ("services", lambda d: d.pop("services")),
    ("clusterIP", lambda d: d["services"][0].pop("clusterIP")),
    ("flows", lambda d: d["services"][0].update(flows="2")),
    ("protocol", lambda d: d["services"][0].update(protocol="icmp")),
    ("ip", lambda d: d["services"][0]["endpoints"][0].update(ip="10.240.0.999")),
    ("share", lambda d: d["services"][0]["endpoints"][0].update(share=1.5)),
    ("predicted", lambda d: d["services"][0]["endpoints"][0].update(predicted="half")),
    ("stale", lambda d: d["services"][0]["endpoints"][0].pop("stale")),
])
def test_the_schema_refuses_a_broken_document(where: str, broken: Any) -> None:
    doc = _document()
    broken(doc)
    with pytest.raises(ValidationError) as refused:
        valid_flows_document(doc)
    error = refused.value
    assert where in f"{list(error.absolute_path)} {error.message}", error  # refused for that field

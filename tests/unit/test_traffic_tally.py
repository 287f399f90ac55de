"""The traffic tally's judgement of UDP answers while endpoints terminate (netkit.lab.traffic)."""

from __future__ import annotations

from netkit.lab.sockets import Outcome, Reply
from netkit.lab.traffic import Attempt, Timeline, tally


def _timeline() -> Timeline:
    now = iter([10.0, 11.0])
    timeline = Timeline(clock=lambda: next(now))
    timeline.start(["web-a2"])
    timeline.change(["web-b1"], ["web-a2", "web-b1"])  # at 10.0: web-a2 terminates but still serves
    timeline.applied()  # at 11.0
    return timeline


def _udp_new(started: float, answer: str) -> Attempt:
    return Attempt("udp-new", "udp", False, started, Reply(Outcome.ANSWERED, answer))


def test_a_new_socket_on_a_reused_source_port_may_meet_its_flow_on_a_serving_endpoint() -> None:
    attempts = [_udp_new(5.0, "web-a2 10.244.1.50:41642"), _udp_new(12.0, "web-a2 10.244.1.50:41642")]
    assert tally(attempts, _timeline()).ok


def test_a_new_flow_to_a_terminating_endpoint_is_wrong() -> None:
    attempts = [_udp_new(5.0, "web-a2 10.244.1.50:41642"), _udp_new(12.0, "web-a2 10.244.1.50:50000")]
    result = tally(attempts, _timeline())
    assert result.wrong == 1 and result.answered == 1

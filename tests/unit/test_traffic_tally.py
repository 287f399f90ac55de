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


# A sticky UDP flow whose endpoint goes must move: the daemon deletes its conntrack entry, and a reply
# in flight at that moment is dropped by the client's connected socket. One such loss per change.
def _moving() -> Timeline:
    now = iter([10.0, 11.0, 20.0, 21.0])
    timeline = Timeline(clock=lambda: next(now))
    timeline.start(["web-a1", "web-b1"])
    timeline.change(["web-b1"])  # at 10.0: web-a1 goes; applied at 11.0
    timeline.applied()
    timeline.change(["web-a1", "web-b1"])  # at 20.0: web-a1 comes back; applied at 21.0
    timeline.applied()
    return timeline


def _sticky(started: float, answer: str | None) -> Attempt:
    reply = Reply(Outcome.ANSWERED, f"{answer} 10.244.1.50:41642") if answer else Reply(Outcome.TIMEOUT)
    return Attempt("udp-sticky", "udp", True, started, reply)


def test_one_reply_lost_while_a_sticky_flow_moves_off_a_removed_endpoint_is_no_failure() -> None:
    result = tally([_sticky(5.0, "web-a1"), _sticky(10.5, None), _sticky(12.0, "web-b1")], _moving())
    assert result.ok and result.lost_in_move == 1, result


def test_a_second_lost_reply_in_the_same_move_is_a_timeout() -> None:
    result = tally([_sticky(5.0, "web-a1"), _sticky(10.3, None), _sticky(10.6, None)], _moving())
    assert result.lost_in_move == 1 and result.timed_out == 1 and not result.ok, result


def test_a_lost_reply_on_a_flow_that_could_stay_is_a_timeout() -> None:
    result = tally([_sticky(5.0, "web-b1"), _sticky(10.5, None)], _moving())
    assert result.timed_out == 1 and not result.ok, result


def test_a_lost_reply_outside_a_change_is_a_timeout() -> None:
    result = tally([_sticky(5.0, "web-a1"), _sticky(8.0, None)], _moving())
    assert result.timed_out == 1 and not result.ok, result


def test_each_move_may_lose_one_reply() -> None:
    # the flow moved to web-b1 in the first change; in the second nothing has to move (web-b1 stays)
    attempts = [_sticky(5.0, "web-a1"), _sticky(10.5, None), _sticky(12.0, "web-b1"), _sticky(20.5, None)]
    result = tally(attempts, _moving())
    assert result.lost_in_move == 1 and result.timed_out == 1, result

"""netkit.change.comparable: the one rule every backend's planner follows to compare only what can
differ, as a table of the situations a planner meets (compiler results and kernel dumps)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import pytest

from netkit.change import Since, comparable


@dataclass(eq=False)
class R:
    """A ruleset as far as the rule cares: what it says of an earlier one."""

    name: str
    since: Since[frozenset[str]] | None = field(default=None)


def said(base: R, *changed: str) -> Since[frozenset[str]]:
    return Since(weakref.ref(base), frozenset(changed))


def test_a_compiler_result_planned_against_its_previous_result_compares_what_it_names() -> None:
    previous = R("previous")
    desired = R("desired", said(previous, "KUBE-SVC-A"))
    assert comparable(previous, desired) == {"KUBE-SVC-A"}


def test_against_anything_else_everything_is_compared() -> None:
    previous, other = R("previous"), R("a dump read from scratch")
    desired = R("desired", said(previous, "KUBE-SVC-A"))
    assert comparable(other, desired) is None
    assert comparable(None, desired) is None
    assert comparable(previous, R("compiled from scratch")) is None


def test_a_dump_read_against_the_previous_result_adds_what_it_found_different() -> None:
    previous = R("previous")
    desired = R("desired", said(previous, "KUBE-SVC-A"))
    dump = R("dump", said(previous, "KUBE-SVC-B"))
    assert comparable(dump, desired, frozenset.union) == {"KUBE-SVC-A", "KUBE-SVC-B"}
    # a backend whose parts cannot be united compares everything
    assert comparable(dump, desired) is None


def test_a_dump_read_against_the_desired_result_itself() -> None:
    desired = R("desired")
    assert comparable(R("dump in sync", said(desired)), desired) == frozenset()
    # having found a difference, it says nothing of where else the two differ
    assert comparable(R("dump out of sync", said(desired, "KUBE-SVC-A")), desired) is None


def test_a_base_that_is_gone_is_never_matched() -> None:
    previous = R("previous")
    desired = R("desired", said(previous, "KUBE-SVC-A"))
    dump = R("dump", said(R("gone"), "KUBE-SVC-B"))  # its base is collected at once
    assert comparable(dump, desired, frozenset.union) is None


@pytest.mark.parametrize("changed", [frozenset(), frozenset({"x"})])
def test_what_a_compiler_says_is_handed_on_as_it_is(changed: frozenset[str]) -> None:
    previous = R("previous")
    desired = R("desired", Since(weakref.ref(previous), changed))
    assert comparable(previous, desired) is changed

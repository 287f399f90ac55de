"""model.types.quick_init: the faster __init__ of the model's hottest frozen dataclasses is the one
dataclasses makes, in signature and in what it builds; and it refuses what it cannot make."""

from __future__ import annotations

import dataclasses
import inspect
from ipaddress import ip_address

import pytest

from netkit.model import state, types
from netkit.model.types import quick_init

QUICK = [types.ObjectRef, types.ServicePort, types.Service, types.Endpoint, types.EndpointPort,
         types.EndpointSlice, state.ServicePortName, state.EndpointAddr, state.Traffic, state.ServicePortState]


def generated(cls: type) -> type:
    """The same class made by dataclasses alone (its own generated __init__)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    fields = [(f.name, f.type, dataclasses.field(default=f.default, compare=f.compare, hash=f.hash,
                                                repr=f.repr)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=params.frozen, order=params.order, slots=True)


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_quick_init_is_the_generated_one(cls: type) -> None:
    plain = generated(cls)
    assert inspect.signature(cls.__init__) == inspect.signature(plain.__init__)  # type: ignore[misc]
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"  # type: ignore[misc]
    names = [f.name for f in dataclasses.fields(cls)]
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    values = {n: f"v-{n}" for n in names}
    by_position = cls(*values.values())
    by_name = cls(**{n: values[n] for n in reversed(names)})
    assert by_position == by_name and [getattr(by_position, n) for n in names] == list(values.values())
    least = cls(*(values[n] for n in required))
    assert [getattr(least, n) for n in names] == [getattr(plain(*(values[n] for n in required)), n) for n in names]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(least, names[0], "x")
    with pytest.raises(TypeError):
        cls(*values.values(), "one too many")


def test_a_real_object_is_built_the_same() -> None:
    e = types.Endpoint((ip_address("10.0.0.1"),), node_name="n1")
    assert e == types.Endpoint(addresses=(ip_address("10.0.0.1"),), ready=True, serving=True, terminating=False,
                               hostname=None, node_name="n1") and hash(e) == hash(dataclasses.replace(e))


def test_it_refuses_a_class_it_cannot_make_plainly() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        items: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    @dataclasses.dataclass(frozen=True)
    class WithPostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (WithFactory, WithPostInit):
        with pytest.raises(TypeError, match="cannot set plainly"):
            quick_init(cls)

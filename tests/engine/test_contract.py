"""Both engines provide the whole surface the engine contract declares (the Protocols of
hiredlock/_engines/contract.py), and the native engine reads the requests' fields at the indexes
their NamedTuples define."""

from __future__ import annotations

import inspect

import pytest
from support import kb

from hiredlock._core import requests as _requests
from hiredlock._core.keys import NameKeys
from hiredlock._core.masters import parse_masters
from hiredlock._core.scripts import RELEASE, Outcome
from hiredlock._engines import contract
from hiredlock._engines.python_engine import PythonEngine
from hiredlock._engines.round import Round as PythonRound
from hiredlock._engines.selection import available_backends

OK = int(Outcome.OK)

try:
    from hiredlock import _native
except ImportError:  # (the native engine's rows skip)
    _native = None  # type: ignore[assignment]


def _classes() -> list:
    rows = [pytest.param(PythonEngine, PythonRound, id="python")]
    native = pytest.mark.skipif(_native is None, reason="the native engine does not load here")
    rows.append(
        pytest.param(
            getattr(_native, "NativeEngine", None),
            getattr(_native, "NativeRound", None),
            id="native",
            marks=native,
        )
    )
    return rows


def _members(protocol: type) -> dict[str, object]:
    """The members a Protocol declares: its methods, properties and annotated attributes."""
    members: dict[str, object] = {}
    for name, value in vars(protocol).items():
        if name.startswith("_") and name != "__init__":
            continue
        if name == "__init__" and "*" in str(inspect.signature(value)):
            continue  # (typing's own, in a Protocol that declares no constructor)
        if callable(value) or isinstance(value, property):
            members[name] = value
    for name in getattr(protocol, "__annotations__", {}):
        members.setdefault(name, None)
    return members


def _parameters(function: object) -> list[tuple[str, object]]:
    return [
        (p.name, p.default)
        for p in inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    ]


def _assert_satisfies(cls: type, protocol: type, instance_attributes: tuple[str, ...]) -> None:
    for name, declared in _members(protocol).items():
        if name in instance_attributes:
            continue  # (checked on an instance)
        assert hasattr(cls, name), f"{cls.__name__} lacks {protocol.__name__}.{name}"
        if isinstance(declared, property):
            assert not callable(getattr(cls, name)) or isinstance(
                inspect.getattr_static(cls, name), property
            ), f"{cls.__name__}.{name} is a method, the contract says an attribute"
            continue
        if declared is None:
            continue  # an attribute: present
        if name == "__init__" and cls.__init__ is object.__init__:
            continue
        try:
            got = _parameters(getattr(cls, name))
        except ValueError:
            continue  # (a C constructor without a signature: checked by calling it below)
        assert got == _parameters(declared), (
            f"{cls.__name__}.{name}{inspect.signature(getattr(cls, name))} does not match "
            f"{protocol.__name__}.{name}{inspect.signature(declared)}"  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(("engine_cls", "round_cls"), _classes())
def test_engine_satisfies_the_contract(engine_cls, round_cls, masters5, key):
    _assert_satisfies(engine_cls, contract.Engine, ("name",))
    _assert_satisfies(round_cls, contract.Round, ("before_close",))
    # a real engine and one of its rounds: constructed by keyword, and the attributes there
    key = kb(key)
    engine = engine_cls(masters=parse_masters([m.url for m in masters5[:3]]), quorum=None)
    token = b"t" * 40
    try:
        assert isinstance(engine.name, str) and engine.name in available_backends()
        rnd = engine.begin(_requests.SetNx((key + b":begun",), (token,), 1000, 200.0))
        assert rnd.before_close is None
        assert isinstance(rnd.next_deadline_ns, int)
        codes, elapsed_ns, _details, values = engine.finish(rnd)[0]
        assert len(codes) == 3 and elapsed_ns >= 0 and values is None
        # (a quorum decides: the third master may be left SKIPPED)
        assert engine.run(_requests.SetNx((key,), (token,), 1000, 200.0))[0][0].count(OK) >= 2
        release = _requests.script(RELEASE, 1, ((key, token), (key + b":begun", token)), 200, True)
        assert engine.run(release)[0][0].count(OK) >= 2
    finally:
        engine.close()


@pytest.mark.skipif(_native is None, reason="the native engine does not load here")
@pytest.mark.parametrize("request_type", [_requests.SetNx, _requests.RunScript, _requests.Cleanup])
def test_native_field_indexes_agree_with_the_requests(request_type):
    name = "SetNx" if request_type is _requests.SetNx else "RunScript"
    indexes = _native.REQUEST_FIELDS[name]
    assert indexes == {field: k for k, field in enumerate(request_type._fields)}


def test_the_hand_built_release_request_is_the_one_script_makes():
    """The lock's release request is built field by field (half of every lock cycle); the
    native driver reads its fields by index, so a field it lacks would be read past its end."""
    import hiredlock

    with hiredlock.Redlock(["redis://127.0.0.1:1"], master_timeout=0.2) as rl:
        lock = rl.lock("name", 10)
        built = lock._release_request(b"token")
        channel = NameKeys(b"", b"name").channel  # (the release announces on it)
        made = _requests.script(RELEASE, 1, ((b"name", b"token", channel),), 200.0, True)
        assert type(built) is type(made) and built == made

"""The knob table (``symsched.core.knobs``): every environment variable the Python side reads is
validated, a garbage value is a ``SymschedConfigError`` naming the variable and what it accepts,
and the table in ``python/README.md`` is the one the registry renders.

The in-process tests parse values directly; the multi-process ones start a job with a bad
value and check that ``symm.init()`` refuses it on every rank before anything is set up (the
scenario functions run inside the rank processes: ``_harness.run`` imports this module).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import _harness
import pytest

from symsched.core import knobs
from symsched.core.errors import SymschedArgumentError, SymschedConfigError

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _refused(knob: knobs.Knob, raw: str) -> str:
    with pytest.raises(SymschedConfigError) as exc:
        knob.parse(raw)
    msg = str(exc.value)
    assert knob.name in msg and repr(raw) in msg and "accepted" in msg, msg
    return msg


@pytest.mark.timeout(30)
@pytest.mark.parametrize("knob,raw", [
    (knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES, "abc"),
    (knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES, "-5"),
    (knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES, "12 parsecs"),
    (knobs.ALLREDUCE_PULL_MIN_BYTES, "1.5M"),
    (knobs.ALLGATHER_PULL_MIN_BYTES, "lots"),
    (knobs.MC2_AG_PULL, "maybe"),
    (knobs.MC2_RS_PULL, "2"),
    (knobs.MATMUL_ENGINE, "gpu"),
    (knobs.MATMUL_BLAS, "sometimes"),
    (knobs.CHECK_BINDINGS, "never"),
    (knobs.LOW_PRECISION_DTYPE, "int4"),
    (knobs.TRACE, "/nonexistent-symsched-dir/trace.json"),
    (knobs.TRACE, "/"),
    (knobs.JOB_ID, "../../etc"),
    (knobs.JOB_ID, ".."),
    (knobs.RANK, "one"),
])
def test_garbage_values_are_typed_errors(knob: knobs.Knob, raw: str) -> None:
    msg = _refused(knob, raw)
    # a config error is an argument error (ValueError) like every other bad input
    assert issubclass(SymschedConfigError, SymschedArgumentError) and issubclass(SymschedConfigError, ValueError)
    assert knob.accepts in msg


@pytest.mark.timeout(30)
def test_good_values_and_defaults() -> None:
    assert knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.parse(None) == 4 * 1024
    assert knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.parse("  ") == 4 * 1024
    assert knobs.ALLREDUCE_ONE_SHOT_MAX_BYTES.parse("4096") == 4096
    assert knobs.ALLREDUCE_PULL_MIN_BYTES.parse("512K") == 512 << 10
    assert knobs.ALLGATHER_PULL_MIN_BYTES.parse("2MiB") == 2 << 20
    assert knobs.ALLGATHER_PULL_MIN_BYTES.parse("1g") == 1 << 30
    assert knobs.MC2_AG_PULL.parse(None) is True and knobs.MC2_AG_PULL.parse("0") is False
    assert knobs.MC2_RS_PULL.parse(None) is False and knobs.MC2_RS_PULL.parse("On") is True
    assert knobs.MATMUL_ENGINE.parse("BUILTIN") == "builtin" and knobs.MATMUL_ENGINE.parse(None) is None
    assert knobs.CHECK_BINDINGS.parse(None) == "first" and knobs.CHECK_BINDINGS.parse("always") == "always"
    assert knobs.LOW_PRECISION_DTYPE.parse("bf16") == "bf16"
    assert knobs.LOW_PRECISION_DTYPE.parse("torch.float8_e4m3fn") == "f8e4m3"
    assert knobs.LOW_PRECISION_DTYPE.parse("none") is None
    assert knobs.JOB_ID.parse("0123abcd-ef.x_y") == "0123abcd-ef.x_y"
    assert knobs.JOB_ID.parse("job:42") == "job:42"
    assert knobs.RANK.parse("3") == 3


@pytest.mark.timeout(30)
def test_value_is_read_through_the_cache_and_follows_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    knob = knobs.ALLGATHER_PULL_MIN_BYTES
    monkeypatch.setenv(knob.name, "64")
    assert knob.get() == 64 and knob.raw() is not None
    monkeypatch.setenv(knob.name, "lots")
    with pytest.raises(SymschedConfigError):
        knob.get()
    monkeypatch.delenv(knob.name)
    assert knob.get() == 0 and knob.raw() is None


@pytest.mark.timeout(30)
def test_check_all_names_every_bad_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMSCHED_MATMUL_ENGINE", "gpu")
    monkeypatch.setenv("SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES", "abc")
    with pytest.raises(SymschedConfigError) as exc:
        knobs.check_all()
    assert "SYMSCHED_MATMUL_ENGINE='gpu'" in str(exc.value)
    assert "SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES='abc'" in str(exc.value)
    monkeypatch.delenv("SYMSCHED_MATMUL_ENGINE")
    monkeypatch.delenv("SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES")
    knobs.check_all()


@pytest.mark.timeout(30)
def test_every_python_env_read_is_a_knob() -> None:
    """No module of the package reads the environment except the knob table (writes for the
    runtime's bootstrap are allowed)."""
    import re

    pkg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "symsched")
    reads = re.compile(r"os\.environ\.get|os\.getenv|os\.environ\[[^\]]+\](?!\s*=)|in os\.environ")
    offenders = []
    for root, _, files in os.walk(pkg):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or path.endswith(os.path.join("core", "knobs.py")):
                continue
            with open(path) as f:
                for i, line in enumerate(f, 1):
                    if reads.search(line) and "perftest" not in name:
                        offenders.append(f"{os.path.relpath(path, pkg)}:{i}: {line.strip()}")
    assert not offenders, offenders


@pytest.mark.timeout(30)
def test_readme_table_is_the_registry() -> None:
    with open(README) as f:
        text = f.read()
    begin, end = "<!-- knob table: python -m symsched.core.knobs -->\n", "<!-- end of knob table -->"
    assert begin in text and end in text, "python/README.md lacks the generated knob table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == knobs.markdown(), "python/README.md's knob table is stale: paste `python -m symsched.core.knobs`"


# ----------------------------------------------------------------- multi-process: init refuses


def init_refuses(rank: int, world: int, args: Any) -> Dict[str, Any]:
    import symsched as symm

    fails: List[str] = []
    try:
        symm.init()
        fails.append(f"init accepted {args['var']}={os.environ.get(args['var'])!r}")
    except symm.SymschedConfigError as e:
        for word in (args["var"], *args["words"]):
            if word not in str(e):
                fails.append(f"message lacks {word!r}: {e}")
    except Exception as e:  # noqa: BLE001 - the wrong type is the failure reported
        fails.append(f"expected SymschedConfigError, got {type(e).__name__}: {e}")
    if symm.is_initialized():
        fails.append("the runtime started despite the bad knob")
    return {"failures": fails}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("var,value,words", [
    ("SYMSCHED_MATMUL_ENGINE", "gpu", ["builtin", "torch"]),
    ("SYMSCHED_MATMUL_ENGINE", "mindspore", ["another framework"]),
    ("SYMSCHED_ALLREDUCE_ONE_SHOT_MAX_BYTES", "abc", ["byte count"]),
    ("SYMSCHED_TRACE", "/nonexistent-symsched-dir/trace.json", ["does not exist"]),
    ("SYMSCHED_CHECK_BINDINGS", "sometimes", ["first, always"]),
])
def test_init_refuses_bad_knob_on_every_rank(var: str, value: str, words: List[str]) -> None:
    _harness.ok(_harness.run("test_knobs", "init_refuses", 2, timeout=100, env={var: value},
                             args={"var": var, "words": words}))

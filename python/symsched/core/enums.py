"""Reduce ops, compare ops and signal ops, accepting CANN's numbering and strings (and any
framework's reduce-op enum by its name)."""

from __future__ import annotations

import enum
from typing import Union

from .errors import SymschedArgumentError, SymschedTypeError


class CmpOp(enum.IntEnum):
    """Signal compare ops, numbered as CANN / OpenSHMEM: EQ=0, NE=1, GT=2, GE=3, LT=4, LE=5."""

    EQ = 0
    NE = 1
    GT = 2
    GE = 3
    LT = 4
    LE = 5


class SignalOp(enum.IntEnum):
    """Signal update ops, numbered as CANN: SET=0, ADD=1."""

    SET = 0
    ADD = 1


class ReduceOp(str, enum.Enum):
    """Reduction ops of the collectives (Hccl's hcclRedOp subset the RFC names)."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"


_CMP_ALIASES = {
    "eq": CmpOp.EQ, "==": CmpOp.EQ,
    "ne": CmpOp.NE, "!=": CmpOp.NE,
    "gt": CmpOp.GT, ">": CmpOp.GT,
    "ge": CmpOp.GE, ">=": CmpOp.GE,
    "lt": CmpOp.LT, "<": CmpOp.LT,
    "le": CmpOp.LE, "<=": CmpOp.LE,
}

_SIG_ALIASES = {"set": SignalOp.SET, "add": SignalOp.ADD}

CmpLike = Union[int, str, CmpOp]
SignalOpLike = Union[int, str, SignalOp]
ReduceOpLike = Union[str, ReduceOp]


def _named(value: object, arg: str, table: dict, enum_cls: type, expected: str):
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, bool):
        raise SymschedTypeError(f"`{arg}` must be {expected}, got bool {value!r}")
    if isinstance(value, int):
        try:
            return enum_cls(value)
        except ValueError:
            raise SymschedArgumentError(f"`{arg}` must be {expected}, got {value!r}") from None
    if isinstance(value, str):
        key = value.strip().lower()
        if key in table:
            return table[key]
        raise SymschedArgumentError(f"`{arg}` must be {expected}, got {value!r}")
    # torch.distributed.ReduceOp and similar enum-likes expose a name
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.lower() in table:
        return table[name.lower()]
    raise SymschedTypeError(f"`{arg}` must be {expected}, got {type(value).__name__} {value!r}")


def parse_cmp(value: CmpLike, arg: str = "compare_op") -> CmpOp:
    """Accept 0..5 (CANN numbering), 'eq'/'ne'/'gt'/'ge'/'lt'/'le', '=='…'<=' or a CmpOp."""
    return _named(value, arg, _CMP_ALIASES, CmpOp,
                  "a compare op: 0..5 (EQ=0, NE=1, GT=2, GE=3, LT=4, LE=5) or one of "
                  "'eq', 'ne', 'gt', 'ge', 'lt', 'le'")


def parse_signal_op(value: SignalOpLike, arg: str = "signal_op") -> SignalOp:
    """Accept 0/1 (SET=0, ADD=1), 'set'/'add' or a SignalOp."""
    return _named(value, arg, _SIG_ALIASES, SignalOp, "a signal op: 0 (SET), 1 (ADD), 'set' or 'add'")


_REDUCE_FAST = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "max": ReduceOp.MAX, "min": ReduceOp.MIN}
_REDUCE_FAST.update({op: op for op in ReduceOp})


def parse_reduce_op(value: ReduceOpLike, arg: str = "op") -> ReduceOp:
    """Accept 'sum'/'avg'/'max'/'min' (any case), a ReduceOp or ``torch.distributed.ReduceOp``."""
    hit = _REDUCE_FAST.get(value) if isinstance(value, (str, ReduceOp)) else None
    if hit is not None:
        return hit
    table = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "max": ReduceOp.MAX, "min": ReduceOp.MIN}
    if isinstance(value, str):
        key = value.strip().lower()
        if key in table:
            return table[key]
        raise SymschedArgumentError(f"`{arg}` must be one of 'sum', 'avg', 'max', 'min', got {value!r}")
    text = str(value).split(".")[-1].lower()
    if text in table:
        return table[text]
    raise SymschedTypeError(f"`{arg}` must be one of 'sum', 'avg', 'max', 'min', got {value!r}")

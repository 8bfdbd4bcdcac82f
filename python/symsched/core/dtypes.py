"""The runtime's element types, named as the executor names them (``f32``, ``bf16`` …), and what
symsched needs to know of each: its label in messages, its width, whether it is a float.

Adapters map their framework's dtype objects onto these names
(:attr:`symsched.core.adapter.FrameworkAdapter.dtype_names`); the core only ever reasons about
the names, so the rules below hold for every framework alike.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Optional

#: Data types the collectives accept: runtime name -> label in messages.
DATA: Dict[str, str] = {
    "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
    "i32": "int32", "i64": "int64", "u8": "uint8",
}

#: Wire formats of low-precision transport: runtime name -> label.
WIRE: Dict[str, str] = {"f16": "float16", "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}

#: Types a symmetric allocation may hold: every data type and every wire format.
HEAP: Dict[str, str] = {**DATA, **{k: v for k, v in WIRE.items() if k not in DATA}}

#: Floating data types (``avg`` and wire formats apply to these only).
FLOATS: FrozenSet[str] = frozenset({"f32", "f64", "f16", "bf16"})

#: Signal words: 32- or 64-bit integers (as CANN's int32 signals).
SIGNALS: FrozenSet[str] = frozenset({"i32", "i64"})

#: Bits per element.
BITS: Dict[str, int] = {"f32": 32, "f64": 64, "f16": 16, "bf16": 16, "i32": 32, "i64": 64, "u8": 8,
                        "f8e4m3": 8, "f8e5m2": 8}

#: Every spelling of a wire format a user may write (in an argument or an environment variable).
WIRE_SPELLINGS: Dict[str, str] = {
    "float16": "f16", "fp16": "f16", "half": "f16", "f16": "f16",
    "bfloat16": "bf16", "bf16": "bf16",
    "float8_e4m3fn": "f8e4m3", "fp8_e4m3": "f8e4m3", "e4m3": "f8e4m3", "f8e4m3": "f8e4m3", "fp8": "f8e4m3",
    "float8_e5m2": "f8e5m2", "fp8_e5m2": "f8e5m2", "e5m2": "f8e5m2", "f8e5m2": "f8e5m2",
}

#: Spellings of "no wire format".
NO_WIRE = ("", "none", "off", "0")

WIRE_CHOICES = "float16, bfloat16, float8_e4m3fn, float8_e5m2"


def labels(names) -> str:
    """``float32, float64, …`` for a message listing what is accepted."""
    return ", ".join(HEAP[n] for n in names)


def wire_from_text(text: str) -> Optional[str]:
    """The wire format a name spells (``'bf16'``, ``'torch.float8_e4m3fn'`` …), None for
    ``none``/``off``/``0``/empty; a ``ValueError`` listing the choices otherwise."""
    key = text.strip().lower()
    for prefix in ("torch.", "mindspore.", "ms."):
        if key.startswith(prefix):
            key = key[len(prefix):]
    if key in NO_WIRE:
        return None
    name = WIRE_SPELLINGS.get(key)
    if name is None:
        raise ValueError(f"must be one of {WIRE_CHOICES} (or none), got {text!r}")
    return name


def narrows(wire: str, data: str) -> bool:
    """Whether ``wire`` can carry ``data``: a float format narrower than the float data."""
    return data in FLOATS and BITS[wire] < BITS[data]

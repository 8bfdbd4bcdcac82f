"""The compiled module ``symsched._native`` (the runtime, the executor, the standard library)."""

from __future__ import annotations

from typing import Any, Optional

from .errors import UnavailableError

try:  # the compiled module is absent when the package is imported from a source tree
    from .. import _native as module  # type: ignore[attr-defined]

    IMPORT_ERROR: Optional[str] = None
except ImportError as exc:  # pragma: no cover - exercised only on broken installs
    module = None  # type: ignore[assignment]
    IMPORT_ERROR = f"the native module symsched._native could not be imported: {exc}"


def native() -> Any:
    """The ``symsched._native`` module, or :class:`UnavailableError` when it cannot be loaded."""
    if module is None:
        raise UnavailableError(IMPORT_ERROR or "symsched._native is missing")
    return module

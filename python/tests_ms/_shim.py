"""Import ``symsched`` in a venv without torch.

Until the package's ``__init__`` is framework-neutral it imports torch; there, ``install``
registers the package without running ``__init__`` so the MindSpore modules (which import no
torch) and the native module load on their own. Once ``import symsched`` works without torch
this does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def install() -> None:
    if "symsched" in sys.modules:
        return
    try:
        import symsched  # noqa: F401
        return
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
    for name in [m for m in sys.modules if m == "symsched" or m.startswith("symsched.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("symsched")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover
        raise ImportError("symsched is not on sys.path (run scripts/ms_env.sh)")
    pkg = types.ModuleType("symsched", "symsched, registered without its torch __init__")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    sys.modules["symsched"] = pkg

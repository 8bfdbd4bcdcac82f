"""``python -m symsched``: the installed package's version and whether this host can run it.

    python -m symsched --version     # symsched <version> (the crate's, as symsched.__version__)
    python -m symsched               # version, location, native module, frameworks found

Neither form imports a framework (it only looks whether torch / mindspore are installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    import symsched

    p = argparse.ArgumentParser(prog="python -m symsched", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"symsched {symsched.__version__}")
    p.parse_args(argv)
    print(f"symsched {symsched.__version__} at {os.path.dirname(os.path.abspath(symsched.__file__))}")
    from symsched.core.native import IMPORT_ERROR, module

    if module is None:
        print(f"native module: {IMPORT_ERROR}")
        return 1
    reason = module.availability()
    print(f"native module: {module.__file__} (plan schema {module.PLAN_SCHEMA_VERSION}); "
          f"host: {'usable' if reason is None else reason}")
    found = [name for name in ("torch", "mindspore") if importlib.util.find_spec(name) is not None]
    print(f"frameworks installed: {', '.join(found) or 'none'}")
    return 0 if reason is None else 1


if __name__ == "__main__":
    sys.exit(main())

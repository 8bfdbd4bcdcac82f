"""One rank of a fault-injection run (``_harness.run_faulty``): like ``_worker`` but the scenario
may leave its peers dead or stalled, so there is no closing gloo barrier. The scenario's result
is pickled as soon as it returns, then symsched is finalised as far as a dead peer allows (the
node's rendezvous directory is removed by local rank 0 in any case)."""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from datetime import timedelta


def main() -> None:
    module, func, tmp = sys.argv[1:4]
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    with open(os.path.join(tmp, "args.pkl"), "rb") as f:
        args = pickle.load(f)
    fn = getattr(importlib.import_module(module), func)
    result = fn(rank, world, args)
    import symsched
    from symsched.core import state

    try:
        # a barrier with a dead peer fails (within its detection time); the directory goes anyway
        symsched.finalize()
    except Exception as exc:  # noqa: BLE001 - the result says what happened
        result.setdefault("finalize", f"{type(exc).__name__}: {exc}")
    if state.is_initialized():
        result["rendezvous_dir"] = state.runtime().rendezvous_dir
    with open(os.path.join(tmp, f"result{rank}.pkl.part"), "wb") as f:
        pickle.dump(result, f)
    os.replace(os.path.join(tmp, f"result{rank}.pkl.part"), os.path.join(tmp, f"result{rank}.pkl"))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

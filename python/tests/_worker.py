"""One rank of a harness run: init gloo, run the scenario, pickle its result."""

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
    dist.barrier()
    import symsched

    symsched.finalize()  # removes the node's rendezvous directory (local rank 0)
    with open(os.path.join(tmp, f"result{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    dist.destroy_process_group()
    sys.stdout.flush()
    # skip interpreter teardown of torch threads; results are already on disk
    os._exit(0)


if __name__ == "__main__":
    main()

"""``symsched.hooks`` of the PyTorch flavour: this name is :mod:`symsched.torch.hooks` (DDP and
FSDP2 communication hooks on symsched)."""

import sys

from .torch import module

sys.modules[__name__] = module("hooks")

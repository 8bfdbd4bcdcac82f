"""``symsched.mc2`` of the PyTorch flavour: this name is :mod:`symsched.torch.mc2`."""

import sys

from .torch import module

sys.modules[__name__] = module("mc2")

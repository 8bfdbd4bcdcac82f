"""``symsched.collectives`` of the PyTorch flavour: this name is :mod:`symsched.core.collectives`."""

import sys

from .torch import module

sys.modules[__name__] = module("collectives")

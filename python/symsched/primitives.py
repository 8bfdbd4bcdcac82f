"""``symsched.primitives`` of the PyTorch flavour: this name is :mod:`symsched.core.primitives`."""

import sys

from .torch import module

sys.modules[__name__] = module("primitives")

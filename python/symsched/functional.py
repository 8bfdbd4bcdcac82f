"""``symsched.functional`` of the PyTorch flavour: this name is :mod:`symsched.core.functional`."""

import sys

from .torch import module

sys.modules[__name__] = module("functional")

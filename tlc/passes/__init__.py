"""Optimization passes; importing this package registers them."""

from . import fuse  # noqa: F401  (registers the pass)
from .base import Pass, PassOptions, PassResult, all_passes, get_pass, register_pass

__all__ = ["Pass", "PassOptions", "PassResult", "all_passes", "get_pass", "register_pass"]

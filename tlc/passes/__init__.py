"""Optimization passes and the PassManager; importing this package registers every pass.

Every module of this package other than the infrastructure ones is imported here, so a new pass module
(``fuse.py``, ``layout.py``, ...) is registered by existing, never by being added to a list.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from .base import Pass, PassOptions, PassResult, StepHook, StopPipeline, all_passes, get_pass, register_pass
from .instruments import PassInstrument, PrintIRInstrument, ProgressInstrument, TimingInstrument, VerifyInstrument
from .manager import PassManager, optimize
from .pipeline import LEVEL_ORDER, Stage, describe_levels, level_pipeline, parse_pipeline
from .report import PassRecord, PassReport

_INFRASTRUCTURE = frozenset({"base", "bisect", "instruments", "manager", "pipeline", "report"})

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if _module not in _INFRASTRUCTURE and not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "LEVEL_ORDER", "Pass", "PassInstrument", "PassManager", "PassOptions", "PassRecord", "PassReport",
    "PassResult", "PrintIRInstrument", "ProgressInstrument", "Stage", "StepHook", "StopPipeline", "TimingInstrument",
    "VerifyInstrument",
    "all_passes", "describe_levels", "get_pass", "level_pipeline", "optimize", "parse_pipeline", "register_pass",
]

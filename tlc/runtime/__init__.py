"""The runtime: ``compile()`` lowers an optimized graph to a ``Plan`` (steps, memory plan, kernels); the
executor, lazy JIT, profiler and the onnxruntime-style ``InferenceSession``."""

from .compiler import compile, compile_with_options
from .options import CompileOptions
from .plan import Plan
from .profiler import Profile
from .session import InferenceSession, NodeArg
from .stats import PlanStats, StepStat

__all__ = ["CompileOptions", "InferenceSession", "NodeArg", "Plan", "PlanStats", "Profile", "StepStat", "compile",
           "compile_with_options"]

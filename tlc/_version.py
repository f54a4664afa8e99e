"""The tlc version (a leaf module: any layer may read it, e.g. for kernel-cache keys)."""

__version__ = "0.1.0"

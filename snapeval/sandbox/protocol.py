"""What crosses the pipes between the harness and a run (the driver's side is ``driver.py``; both are described in
its module docstring): input frames written by the harness, result frames read from an untrusted process.

Reading a result is bounded and linear: the header must end within :data:`HEADER_BYTES`, the payload is never longer
than the cap in force, bytes are kept once in one growing buffer, and a functional result is decoded by one JSON
parse and one walk over it (no structure whose cost the program could make superlinear: a dict or set whose keys
could collide is never built from program data). Before it is decoded, its size in values and its nesting are
checked on the bytes (:func:`check_shape`: passes in C over the payload, no object per value), so that what the
harness builds is bounded by :data:`MAX_VALUES`, not by how small a value the program can write; every integer and
float literal's length is checked before it is converted (wide integers cross in hexadecimal, linear to convert);
the collector is off while it is built (millions of new containers would start a full collection again and again).
A standard output is not decoded here: it is checked to be UTF-8 (:func:`check_utf8`) and graded as bytes.
"""
from __future__ import annotations

import codecs
import gc
import itertools
import json
import operator
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from snapeval.sandbox.limits import MAX_DEPTH, MAX_INT_LITERAL, MAX_VALUES

HEADER_BYTES = 4096
_MAX_FLOAT_LITERAL = 32  # repr() of a float is at most 24 characters
# a string of a result's skeleton (its commas and brackets are not structure); possessive: no backtracking state
_SKELETON_STRING = re.compile(rb'"[^"]*+"')
_NOT_SKELETON = bytes(b for b in range(256) if b not in b'"[]{},:')
_SKELETON_PIECE = 1 << 20
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes(2 if b in b"[{" else 0 for b in range(256))


class ProtocolError(ValueError):
    """The process wrote something that is not one well-formed result frame: the test's runtime error."""


class OutputTooLarge(ProtocolError):
    """A result announced (or sent) more bytes than the cap in force."""


def input_frame(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return b"%d\n" % len(data) + data


class FrameReader:
    """One result frame, fed with whatever the pipe delivers (the harness stops reading once it is complete);
    :attr:`extra` counts bytes that arrived behind it."""

    def __init__(self, cap: int):
        self.cap = cap
        self.buffer = bytearray()
        self.header: dict | None = None
        self.body_at = 0
        self.end = -1

    def feed(self, chunk: bytes) -> bool:
        """Add bytes; True once the frame is complete. Raises :class:`ProtocolError` / :class:`OutputTooLarge`."""
        self.buffer += chunk
        if self.header is None:
            newline = self.buffer.find(b"\n", 0, HEADER_BYTES)
            if newline < 0:
                if len(self.buffer) >= HEADER_BYTES:
                    raise ProtocolError("the result header is malformed")
                return False
            self.header = _parse_header(bytes(self.buffer[:newline]), self.cap)
            self.body_at = newline + 1
            self.end = self.body_at + (self.header["bytes"] if self.header["status"] == "ok" else 0)
        return len(self.buffer) >= self.end

    def take_payload(self) -> bytearray:
        """The payload, taken out of the reader without a copy (the header cut off the front of the buffer in place,
        anything behind the frame off its end; :attr:`extra` is to be read first): the reader holds nothing after."""
        buffer, self.buffer = self.buffer, bytearray()
        del buffer[self.end:]
        del buffer[:self.body_at]
        return buffer

    @property
    def extra(self) -> int:
        return max(0, len(self.buffer) - self.end) if self.end >= 0 else 0


#: A payload at least this long that is not ASCII is checked on the array (:func:`_utf8_on_the_array`).
_ARRAY_CHECK_FROM = 1 << 20
_ARRAY_WINDOW = 1 << 16


def check_utf8(payload: bytes, chunk: int = 1 << 16) -> None:
    """Raise ``UnicodeDecodeError`` unless ``payload`` is UTF-8 (lone surrogates allowed: what the driver writes for
    any ``str``), keeping nothing: a standard output is graded as bytes. ASCII throughout is one ``isascii`` (a word
    at a time, in C); a long payload is checked on the array (:func:`_utf8_on_the_array`: the same few operations
    whatever the characters, where decoding text of randomly mixed widths cost about 4 ns a byte), and decoded only
    where that finds it malformed, for the decoder's error; anything else is decoded 64 KiB at a time from the payload
    itself (``utf_8_decode`` on a view, an unfinished character carried to the next piece), no copy of a piece made
    first (the incremental decoder copied each 16 KiB before decoding it: 1.4x the time on 32 MB of Arabic-Indic
    digits)."""
    if payload.isascii() or (len(payload) >= _ARRAY_CHECK_FROM and _utf8_on_the_array(payload)):
        return
    view, at, size = memoryview(payload), 0, len(payload)
    while at < size:
        final = at + chunk >= size
        _, used = codecs.utf_8_decode(view[at:at + chunk], "surrogatepass", final)
        if not used and not final:  # a piece of 64 KiB always ends within 3 bytes of a whole character
            codecs.utf_8_decode(view[at:at + chunk], "surrogatepass", True)
        at += used


def _utf8_on_the_array(payload: bytes) -> bool:
    """Whether ``payload`` is UTF-8 with lone surrogates allowed (what ``decode("utf-8", "surrogatepass")``
    accepts), on a numpy array, 64 KiB at a time: no byte ``C0``, ``C1`` or past ``F4``; every byte a lead of two,
    three or four bytes announces after it a continuation byte (``80``-``BF``); as many continuation bytes as the
    leads announce (the bytes a lead claims are continuations, so no two leads claim one byte, and then every
    continuation byte is claimed); after ``E0`` at least ``A0`` (no overlong form), after ``F0`` at least ``90``,
    after ``F4`` at most ``8F`` (nothing past U+10FFFF); ``ED`` (surrogates) takes any continuation byte."""
    import numpy as np

    data, size = np.frombuffer(payload, np.uint8), len(payload)
    continuations = claims = 0
    for at in range(0, size, _ARRAY_WINDOW):
        end = min(at + _ARRAY_WINDOW, size)
        ahead = data[at:min(end + 3, size)]
        if len(ahead) < end - at + 3:  # the last window: what follows the payload continues nothing
            ahead = np.concatenate([ahead, np.zeros(end - at + 3 - len(ahead), np.uint8)])
        window = ahead[:end - at]
        if window.max() > 0xF4 or payload.find(b"\xc0", at, end) >= 0 or payload.find(b"\xc1", at, end) >= 0:
            return False
        follows = (ahead & 0xC0) == 0x80
        for width, lead in enumerate((0xC0, 0xE0, 0xF0), 1):  # each lead of at least width + 1 bytes
            leads = window >= lead
            if not (follows[width:width + end - at] >= leads).all():
                return False
            claims += int(np.count_nonzero(leads))
        continuations += int(np.count_nonzero(follows[:end - at]))
        second = ahead[1:end - at + 1]  # a continuation byte after each lead (checked above): its range
        for lead, low, high in ((0xE0, 0xA0, 0xBF), (0xF0, 0x90, 0xBF), (0xF4, 0x80, 0x8F)):
            if payload.find(bytes((lead,)), at, end) >= 0 and (
                    (window == lead) & ((second < low) if high == 0xBF else (second > high))).any():
                return False
    return continuations == claims


def _parse_header(line: bytes, cap: int) -> dict:
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        raise ProtocolError("the result header is malformed") from None
    if not isinstance(header, dict) or header.get("status") not in ("ok", "error"):
        raise ProtocolError("the result header is malformed")
    if header["status"] == "error":
        return {"status": "error", "error": str(header.get("error", ""))[:500]}
    size = header.get("bytes")
    if type(size) is not int or size < 0:
        raise ProtocolError("the result header is malformed")
    if size > cap:
        raise OutputTooLarge(f"{size} bytes of output (limit {cap})")
    return {"status": "ok", "bytes": size}


class Unequal:
    """A returned value of a type that no expected (JSON) value can equal: a set, an object with its own ``__eq__``,
    a dict with a key that is not a string. Equal to nothing, itself included."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<a {self.type_name}>"


class ProgramFraction:
    """A ``Fraction`` a functional test returned, its numerator and denominator exactly as the program's object held
    them (``_numerator``, ``_denominator``: an unreduced ``Fraction(42, 2, _normalize=False)`` stays 42/2). Equal as
    ``Fraction.__eq__`` compares in the program's process, where lcb_runner compares (CPython 3.11): to an ``int``
    when the numerator is it and the denominator 1, to any other rational (``bool``) part by part, to a finite
    ``float`` part by part with ``Fraction.from_float`` of it, never to a NaN or an infinity; anything else is not
    its business (``NotImplemented``). Nothing is reduced: rebuilding ``Fraction(n, d)`` ran a gcd, quadratic in the
    parts, in the harness's own thread (15.5 s for 2 MiB parts); every comparison here is linear."""

    __slots__ = ("numerator", "denominator")

    def __init__(self, numerator: int, denominator: int):
        if type(numerator) is not int or type(denominator) is not int or denominator == 0:
            raise ProtocolError("the returned value is malformed")  # Fraction(n, 0) cannot exist
        self.numerator, self.denominator = numerator, denominator

    def __eq__(self, other: object) -> bool:
        if type(other) is int:
            return self.numerator == other and self.denominator == 1
        if isinstance(other, (int, Fraction, ProgramFraction)):  # numbers.Rational among what a test can hold
            return self.numerator == other.numerator and self.denominator == other.denominator
        if isinstance(other, float):
            if other != other or other in (float("inf"), float("-inf")):
                return False  # 0.0 == b there
            numerator, denominator = other.as_integer_ratio()  # Fraction.from_float: reduced, denominator > 0
            return self.numerator == numerator and self.denominator == denominator
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # never a key: nothing is built from it

    def __repr__(self) -> str:
        return f"<a Fraction of {self.numerator.bit_length()}/{self.denominator.bit_length()} bits>"


def _structure(data: bytes) -> int:
    """An upper bound on the JSON values in ``data``: every value but the first of a container follows a comma, every
    container opens with a bracket, every object value follows a colon."""
    return data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{") + 1


def check_shape(payload: bytes, max_values: int = MAX_VALUES) -> None:
    """Refuse a result before it is decoded: :class:`OutputTooLarge` when it holds more than ``max_values`` values,
    :class:`ProtocolError` when its brackets nest deeper than a value :func:`decode_value` accepts (two brackets per
    level: a tuple is a tagged object around a list) plus a margin, so that the JSON parser's recursion is bounded
    too. Linear, in C, 1 MiB of the payload at a time (nothing kept beside it but counts): its skeleton
    (:func:`_skeleton_pieces`) counted; only when that bound is not enough, a second pass with the strings taken out
    (no more than ``max_values`` of them by then) that counts what is left and keeps a running sum of the brackets."""
    values, brackets, quotes = 1, 0, 0
    for piece in _skeleton_pieces(payload):
        values += _structure(piece) - 1
        brackets += piece.count(b"[") + piece.count(b"{")
        quotes += piece.count(b'"')
    if values <= max_values and brackets <= MAX_DEPTH:
        return
    if quotes > 2 * max_values:  # each string is a value (or an object's key) and is two quotes in the skeleton
        raise OutputTooLarge(f"a returned value of more than {max_values} values")
    if not quotes and values > max_values:  # no string: the skeleton's count is exact
        raise OutputTooLarge(f"a returned value of more than {max_values} values")
    values, inside, steps = 1, False, []
    for piece in _skeleton_pieces(payload):
        bare, inside = _outside_strings(piece, inside)
        values += _structure(bare) - 1
        steps.append(bare.translate(_BRACKET_STEPS, _NOT_BRACKETS))  # one byte a bracket: 2 opens, 0 closes
    if values > max_values:
        raise OutputTooLarge(f"a returned value of more than {max_values} values")
    # the nesting: the running sum of +1 per opening and -1 per closing bracket, by C iterators over at most
    # max_values brackets
    steps = b"".join(steps)
    if steps and max(itertools.accumulate(map(operator.sub, steps, itertools.repeat(1)))) > 2 * MAX_DEPTH + 4:
        raise ProtocolError(f"the returned value is nested deeper than {MAX_DEPTH} levels")


def _skeleton_pieces(payload: bytes):
    """``payload`` reduced to its quotes, brackets, commas and colons, 1 MiB of it at a time, every escape first taken
    out, so that every quote left opens or closes a string, as the JSON parser reads them up to the first thing it
    refuses. A run of backslashes is read from its start in pairs (an escaped backslash each), and an odd one out
    escapes the byte that follows it (an escaped quote, or the letter of another escape): both go, also where a
    piece's end cuts them apart. One translation in C per piece; a result of long integers or strings shrinks to a
    few bytes a value."""
    escaped = False
    for at in range(0, len(payload), _SKELETON_PIECE):
        piece = payload[at + escaped:at + _SKELETON_PIECE]  # the byte the last piece's backslash escapes goes
        escaped = False
        if b"\\" in piece:
            piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")
            escaped = piece.endswith(b"\\")
        yield piece.translate(None, _NOT_SKELETON)


def _outside_strings(piece: bytes, inside: bool) -> tuple[bytes, bool]:
    """What of a skeleton piece lies outside strings, and whether the piece ends inside one (``inside``: whether it
    starts inside one). One match per string, no more than ``max_values`` of them by then."""
    if inside:
        closing = piece.find(b'"')
        if closing < 0:
            return b"", True
        piece = piece[closing + 1:]
    bare, at = bytearray(), 0
    for string in _SKELETON_STRING.finditer(piece):
        bare += piece[at:string.start()]
        at = string.end()
    opening = piece.find(b'"', at)
    bare += piece[at:] if opening < 0 else piece[at:opening]
    return bytes(bare), opening >= 0


def decode_value(payload: bytes | bytearray, max_values: int = MAX_VALUES) -> Any:
    """The Python value a functional test returned, rebuilt from :func:`driver.encode_value`'s text (UTF-8, see
    there), once :func:`check_shape` has bounded it. A ``bytearray`` (the harness's own buffer) is emptied once it is
    decoded to text, so that the result is held once at a time: as bytes, as text, then as strings and values. Raises
    :class:`ProtocolError` for anything malformed (:class:`OutputTooLarge` for too many values)."""
    check_shape(payload, max_values)
    collecting = gc.isenabled()
    gc.disable()
    try:
        text = payload.decode("utf-8", "surrogatepass")  # what json.loads would make of the bytes, but owned here
        if isinstance(payload, bytearray):
            payload.clear()
        # a NaN of its own each time (json's decoder hands out one shared NaN object, and `[nan] == [nan]` is True
        # for the same object: the program's NaN must not equal a NaN of the expected value through identity)
        raw = json.loads(text, parse_constant=float, parse_int=_int_literal, parse_float=_float_literal)
        del text
        return _build(raw, 0)
    except ProtocolError:
        raise
    except (ValueError, TypeError, KeyError, RecursionError, InvalidOperation, ZeroDivisionError, OverflowError):
        raise ProtocolError("the returned value is malformed") from None
    finally:
        if collecting:
            gc.enable()


def _int_literal(text: str) -> int:
    """A decimal integer of the result, its length checked before it is converted (the driver writes wider ones in
    hexadecimal: converting a decimal literal costs time quadratic in its digits)."""
    if len(text) > MAX_INT_LITERAL:
        raise ProtocolError("the returned value is malformed")
    return int(text)


def _float_literal(text: str) -> float:
    if len(text) > _MAX_FLOAT_LITERAL:
        raise ProtocolError("the returned value is malformed")
    return float(text)


def _build(x: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ProtocolError(f"the returned value is nested deeper than {MAX_DEPTH} levels")
    if isinstance(x, list):  # rebuilt in place: no second copy of a large list
        if x and depth >= MAX_DEPTH:
            raise ProtocolError(f"the returned value is nested deeper than {MAX_DEPTH} levels")
        for i, e in enumerate(x):
            if isinstance(e, (list, dict)):
                x[i] = _build(e, depth + 1)
        return x
    if not isinstance(x, dict):
        return x  # None, bool, int, float, str: what JSON itself decodes
    tag = x["~"]
    if tag == "tuple":
        return tuple(_build(e, depth + 1) for e in _list(x["v"]))
    if tag == "dict":
        pairs = [(_build(k, depth + 1), _build(v, depth + 1)) for k, v in (_pair(p) for p in _list(x["v"]))]
        if all(type(k) is str for k, _ in pairs):
            return dict(pairs)
        return Unequal("dict with a key that is not a string")
    if tag == "int":
        digits = x["v"]
        if type(digits) is not str or not digits.isascii():  # isascii: a flag of the str, no pass over it
            raise ProtocolError("the returned value is malformed")
        # linear in a power-of-two base (and not limited by sys.int_info's digit check); the forms the driver never
        # writes that int() also reads (a sign, "0x", "_", spaces) are integers the program could have returned
        return int(digits, 16)
    if tag == "fraction":
        return ProgramFraction(_build(x["n"], depth + 1), _build(x["d"], depth + 1))
    if tag == "decimal":
        if not isinstance(x["v"], str):
            raise ProtocolError("the returned value is malformed")
        return Decimal(x["v"])
    if tag == "complex":
        re, im = x["re"], x["im"]
        if type(re) is not float or type(im) is not float:
            raise ProtocolError("the returned value is malformed")
        return complex(re, im)
    if tag == "bytes":
        return bytes.fromhex(x["v"])
    if tag == "other":
        return Unequal(str(x["type"])[:100])
    raise ProtocolError("the returned value is malformed")


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise ProtocolError("the returned value is malformed")
    return v


def _pair(p: Any) -> tuple:
    if not isinstance(p, list) or len(p) != 2:
        raise ProtocolError("the returned value is malformed")
    return p[0], p[1]

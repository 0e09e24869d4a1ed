"""The harness's cost of grading is bounded by the bytes a program wrote (sandbox issue #47, item 2): standard outputs
are compared as UTF-8 bytes with the official verdict, and functional results are refused by size before anything
is converted. Memory is measured with tracemalloc (never wall-clock)."""
from __future__ import annotations

import re
import time
import tracemalloc
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapeval.sandbox import SandboxLimits, driver, harness, isolation, run_program
from snapeval.sandbox.limits import MAX_INT_LITERAL, MAX_VALUES, RESULT_LIMITS
from snapeval.sandbox.protocol import FrameReader, OutputTooLarge, ProgramFraction, ProtocolError, decode_value
from snapeval.tasks.livecodebench import SPACES, stdout_matches
from tests.test_protocols_livecodebench import _outcome  # the official comparison (lcb_runner's), written out there
from tests.test_protocols_livecodebench import ref_stdio_verdict as official_verdict


def test_spaces_are_what_str_strip_and_split_use():
    assert SPACES == "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


# digits of several scripts (Arabic-Indic, Devanagari, fullwidth, mathematical: outside the BMP), every whitespace,
# numbers, separators, characters outside the BMP, a lone surrogate, NUL
_TOKENS = st.sampled_from(["5", "5.0", "05", "-0", "0.10", "1e2", "100", "1_000", "1000", "abc", "NaN", "nan", "inf",
                           "-Infinity", "sNaN", "1", "x", "0.1000001", "٣", "٥", "३", "５", "𝟓", "𝟎𝟓", "١_٠٠٠",
                           "1٠٠٠", "\U0001F600", "é", "\ud800", "\x00", "+5", "5e0", "٣.٥", "3.5", "\n",
                           *SPACES])
_TEXT = st.lists(_TOKENS, max_size=12).map("".join)


@settings(max_examples=3000, deadline=None)
@given(_TEXT, _TEXT, st.booleans())
def test_byte_comparison_equals_official_verdict(got, expected, small_windows):
    """``small_windows``: the paths meant for long outputs taken by these short ones (a piece checked for whitespace
    at all, runs of zeros compared by windows of 6 bytes)."""
    from snapeval.tasks.livecodebench import grading as lcb

    official = _outcome(official_verdict, got, expected)
    saved = lcb._SCAN_FROM, lcb._RUN_WINDOW, lcb._REDUCE_FROM
    if small_windows:
        lcb._SCAN_FROM, lcb._RUN_WINDOW, lcb._REDUCE_FROM = 0, 6, 0
    try:
        ours = _outcome(stdout_matches, got.encode("utf-8", "surrogatepass"), expected)
    finally:
        lcb._SCAN_FROM, lcb._RUN_WINDOW, lcb._REDUCE_FROM = saved
    assert (official is True) == (ours is True) and isinstance(official, str) == isinstance(ours, str), \
        (got, expected, official, ours)


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"\xd9\xa0", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xe2\x80\x83", b"\x80",
                                 b"\xc0", b"\xed", b"\xf4\x90", b"\xe0\x80", b"\xff", b"\xf0", b"\xc2", b"\xc1\xbf",
                                 b"\xe0\xa0\x80", b"\xe0\x9f\xbf", b"\xf0\x90\x80\x80", b"\xf0\x8f\xbf\xbf",
                                 b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xed\xbf\xbf"]),
                max_size=30).map(b"".join),
       st.integers(4, 9), st.booleans())
def test_utf8_check_equals_the_decoder(data, chunk, on_the_array):
    """Issue #60: a standard output is checked 64 KiB at a time on a view (pieces of 4-9 bytes here, characters cut
    by their ends), or on a numpy array 64 KiB at a time (here every payload, windows of ``chunk`` bytes): it is
    refused exactly when ``bytes.decode("utf-8", "surrogatepass")`` refuses it."""
    from snapeval.sandbox import protocol

    try:
        data.decode("utf-8", "surrogatepass")
        valid = True
    except UnicodeDecodeError:
        valid = False
    saved = protocol._ARRAY_CHECK_FROM, protocol._ARRAY_WINDOW
    if on_the_array:
        protocol._ARRAY_CHECK_FROM, protocol._ARRAY_WINDOW = 0, chunk
        assert protocol._utf8_on_the_array(bytearray(data)) == valid or not data, data
    try:
        protocol.check_utf8(bytearray(data), chunk)
        ours = True
    except UnicodeDecodeError:
        ours = False
    finally:
        protocol._ARRAY_CHECK_FROM, protocol._ARRAY_WINDOW = saved
    assert ours == valid, (data, chunk)


def test_byte_comparison_examples():
    cases = [("5  \r\n\n", "5\n"), ("1.50 2", "1.5 2.0"), ("005", "5"), ("1\n\n2", "1\n2"), ("٣\u3000٤", "3 4"),
             ("\u3000 5 \x1c", "5"), ("𝟓", "5"), ("٣x", "3"), ("5\u200b", "5"), ("a" * 70000 + "\u2003", "a" * 70000),
             ("\u3000" * 40000 + "7" + " \u2029" * 40000, "7.0"), ("1 " * 50000, "1 " * 49999)]
    for got, expected in cases:
        assert stdout_matches(got.encode(), expected) == (official_verdict(got, expected) is True), (got[:20], expected)
    with pytest.raises(ArithmeticError):  # the official comparison raises too: a runtime error there
        stdout_matches(b"sNaN", "5")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*SPACES, "7", "٣", "\u200b", "\u2010", "\U0001F600", "é", "x"]),
                          st.integers(1, 30000)), max_size=8))
def test_token_count_and_strip_equal_str_split_and_strip_across_pieces(runs):
    """Issue #47: a line packed with the 16 whitespace characters led by E1/E2 is looked up per byte (numpy) instead
    of 16 replacements per piece; runs long enough to cross the 64 KiB pieces, every kind, both paths."""
    from snapeval.tasks.livecodebench.grading import _strip, token_count

    line = "".join(char * count for char, count in runs)
    assert token_count(line) == len(line.split())
    data = line.encode()
    start, end = _strip(data, 0, len(data))
    assert data[start:end].decode() == line.strip()


def test_wide_whitespace_lines_against_the_official_verdict():
    """Long lines of every multi-byte whitespace (the benchmark's wide_spaces bombs, scaled down) and tokens between
    them: the same verdict as lcb_runner's comparison, on both sides of a 64 KiB piece."""
    wide = "".join(c for c in SPACES if not c.isascii())
    tokens = "".join("7" + c for c in wide)
    for got, expected in [(wide * 4000, "5"), (wide * 4000 + "5" + wide * 4000, "5"), (tokens * 3000, "7 " * 57000),
                          (tokens * 3000, "7 " * 3000 * 19),
                          ("\u3000".join("٣" * 3 for _ in range(30000)), "333 " * 30000),
                          ("\u2003".join(["5"] * 40000) + "\n" + wide * 3000, "5 " * 40000)]:
        assert stdout_matches(got.encode(), expected) == (official_verdict(got, expected) is True), \
            (got[:10], expected[:10])


def _skeleton_by_a_json_lexer(text: bytes) -> bytes:
    """What lies outside the strings of a JSON text, as the JSON parser reads it: brackets, commas and colons."""
    out, in_string, escaped = bytearray(), False, False
    for byte in text:
        char = bytes([byte])
        if in_string:
            if escaped:
                escaped = False
            elif char == b"\\":
                escaped = True
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char in b"[]{},:":
            out += char
    return bytes(out)


_JSON_VALUES = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab"\\[]{},:\n/é\U0001F600', max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='k"\\[,', max_size=3), inner,
                                                                max_size=3), max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(_JSON_VALUES, st.booleans(), st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_result_skeleton_equals_a_json_lexer(value, ascii_only, piece):
    """The shape check reads a result through its skeleton, 1 MiB at a time (old code: one regular-expression pass
    over every byte of every string); escapes cut by a piece's end included (pieces of 1-7 bytes here)."""
    import json

    from snapeval.sandbox import protocol

    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    saved, protocol._SKELETON_PIECE = protocol._SKELETON_PIECE, piece
    try:
        bare, inside = b"", False
        for part in protocol._skeleton_pieces(text):
            outside, inside = protocol._outside_strings(part, inside)
            bare += outside
    finally:
        protocol._SKELETON_PIECE = saved
    assert bare == _skeleton_by_a_json_lexer(text) and not inside


# ------------------------------------------------------------------------------------------- bounded by the bytes
def _grading_peak(mode, payload, judge):
    """The harness's peak of new memory while it grades one result frame of ``payload``, as a ratio to its size."""
    from snapeval.tasks.livecodebench.grading import _zero_tables

    judge(0, "٣ 𝟓\u3000".encode())  # what is built once per process (the tables of non-ASCII digits, wide
    _zero_tables()  # spaces and zeros, numpy) is not this output's
    reader = FrameReader(len(payload))
    assert reader.feed(b'{"status": "ok", "bytes": %d}\n' % len(payload) + payload)
    tracemalloc.start()
    try:
        verdict = harness._grade(reader, 0, mode, judge, time.monotonic() + 600)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return verdict, peak / len(payload)


STDIN_BOMBS = {  # 4 MiB each, the classes of issue #47
    "ascii_then_one_astral": b"a" * (4 << 20) + "\U0001F600".encode(),
    "astral_line": "\U0001F600".encode() * (1 << 20),
    "astral_tokens_ideographic_space": ("\U0001F600\u3000".encode()) * ((4 << 20) // 7),
    "one_char_tokens": b"1 " * (2 << 20),
    "blank_lines": b"\n" * (4 << 20),
    "digits": b"1" * (4 << 20),
    "wide_space_padding": "\u3000".encode() * (1 << 20) + b"5" + "\u2029".encode() * (1 << 20),
    "every_wide_space": "".join(c for c in SPACES if not c.isascii()).encode() * ((4 << 20) // 55),
    "tokens_between_wide_spaces": "".join("7" + c for c in SPACES if not c.isascii()).encode() * ((4 << 20) // 74),
}


STDIN_BOMBS.update({  # issue #60: correct answers padded with zeros (4 MiB each)
    "arabic_indic_zero_padding": "\u0660".encode() * (2 << 20) + b"5",
    "zero_fraction": b"5." + b"0" * (4 << 20),
    "zero_exponent_padding": b"5e" + b"0" * (4 << 20),
})

_NUMBER_PARTS = st.sampled_from(["0", "00", "٠", "۰", "०", "𝟎", "_", "5", "٣", "𝟓", "1", "9", ".", "e", "E", "+", "-",
                                 "x", "é", "٠" * 40, "0" * 70, "_0" * 30, "NaN", "Inf", "٠0" * 20, "𝟎_" * 9,
                                 "०٠𝟎" * 7])


def test_a_returned_fraction_is_compared_as_the_program_holds_it():
    """Issue #60: an unreduced ``Fraction(42, 2, _normalize=False)`` equals 21 here (it was rebuilt and reduced) and
    not in lcb_runner, where the program's own object is compared (``Fraction.__eq__`` reads its parts); and a
    Fraction of 2 MiB parts cost the harness 15.5 s of gcd. Its parts cross as they are and are compared part by
    part, as ``Fraction.__eq__`` compares, in time linear in them."""
    from snapeval.tasks.livecodebench import functional_matches

    def back(value):
        return decode_value(driver.encode_value(value, RESULT_LIMITS))

    unreduced = Fraction(42, 2, _normalize=False)
    for value, expected in ((unreduced, 21), (unreduced, 21.0), (unreduced, True), ([unreduced], [21]),
                            (Fraction(-3, -1, _normalize=False), 3), (Fraction(21), 21), (Fraction(1, 2), 0.5),
                            (Fraction(1, 3), 1 / 3), (Fraction(0), False), (Fraction(5), "5"), (Fraction(1), None),
                            (Fraction(2), float("nan")), ({"a": Fraction(7, 2)}, {"a": 3.5}), ((Fraction(3),), [3])):
        assert functional_matches(back(value), expected) is functional_matches(value, expected), (value, expected)
    huge = Fraction(3 ** 2_000_000, 3 ** 1_999_999 * 2, _normalize=False)  # 3.2 Mbit parts: gcd would take minutes
    start = time.process_time()
    assert not functional_matches(back(huge), 1) and not functional_matches(back(huge), 1.5)
    assert time.process_time() - start < 2.0


@settings(max_examples=1000, deadline=None)
@given(st.lists(_NUMBER_PARTS, min_size=1, max_size=10).map("".join),
       st.sampled_from(["5", "0", "-5", "0.5", "50", "5e-3", "500000"]))
def test_reduced_long_tokens_read_as_decimal_reads_them(token, expected):
    """Issue #60: a long token's leading and trailing zeros (any script, any ``_``) and its exponent's leading zeros
    are skipped before ``Decimal`` reads it; every token, reduced, is the number ``Decimal`` reads (or no number, as
    there), and a line of it gets lcb_runner's verdict."""
    from decimal import Decimal

    from snapeval.tasks.livecodebench import grading as lcb

    data = token.encode("utf-8", "surrogatepass")
    reduced = lcb._reduced_number(data, 0, len(data))
    try:
        official = Decimal(token)
    except Exception:  # noqa: BLE001 - no number
        official = None
    if reduced is not None:
        try:
            ours = Decimal(reduced)
        except Exception:  # noqa: BLE001
            ours = None
        assert (ours is None) == (official is None), (token, reduced)
        if ours is not None and not official.is_nan():
            assert ours == official, (token, reduced)
    official_verdict_ = _outcome(official_verdict, token, expected)
    saved = lcb._REDUCE_FROM, lcb._RUN_WINDOW, lcb._SCAN_FROM
    for window in (1 << 16, 6, 1):  # runs of zeros skipped by windows of 6 bytes and of one unit too
        lcb._REDUCE_FROM, lcb._RUN_WINDOW, lcb._SCAN_FROM = 0, window, 0  # every token through the reduced path
        try:
            ours_verdict = _outcome(stdout_matches, data, expected)
        finally:
            lcb._REDUCE_FROM, lcb._RUN_WINDOW, lcb._SCAN_FROM = saved
        assert (official_verdict_ is True) == (ours_verdict is True), \
            (token, expected, window, official_verdict_, ours_verdict)


def test_zero_padded_correct_answers_cost_what_the_reference_costs():
    """Issue #60: 16 M leading Arabic-Indic zeros before a correct answer took 4.3 s of grading (42x the reference
    bomb, two tests), ``3.000...0`` of 32 MB 1 s; each is graded here within 2.5x the CPU of the reference line of
    16 M one-character tokens (measured in the same process; the benchmark's figures: docs/sandbox.md), and so are
    ASCII zeros before the answer and zeros of three scripts in a random order (no repeated unit to skip by)."""
    def cpu(got, expected):
        start = time.process_time()
        verdict = stdout_matches(got, expected)
        return time.process_time() - start, verdict

    import random

    size = 8 << 20  # a quarter of the cap: seconds, not tens of seconds, on a busy machine
    reference, _ = cpu(b"0 " * (size // 2 - 1) + b"0", b"5")
    mixed = "".join(random.Random(5).choice("0\u0660\u06f0") for _ in range(size // 2)).encode()
    for got in ("\u0660".encode() * (size // 2) + b"5", b"5." + b"0" * size, b"5e" + b"0" * size,
                b"5" + b"0" * size + b"e-%d" % size, b"0" * size + b"5", mixed + b"5", b"5." + mixed):
        seconds, verdict = cpu(got, b"5")
        assert verdict and seconds < 2.5 * reference + 0.02, (got[:8], seconds, reference)


def test_long_numbers_are_compared_by_their_significant_digits():
    """Issue #60: a long token's number is compared by the count and exponent of its significant digits before any
    digit is converted (16 M wrong Arabic-Indic digits made a ``Decimal`` of 16 M digits): the same verdicts as
    lcb_runner's, digits of other scripts, zeros inside and at either end, signs, exponents, NaN and infinities."""
    ones = "\u0661" * 3000
    cases = [(ones, "1" * 3000), (ones, "1" * 2999 + "2"), (ones, "1" * 2999), ("0" * 80 + ones + "0" * 70, "1" * 3000
             + "0" * 70), ("-" + ones + ".000", "-" + "1" * 3000), ("-" + ones, "1" * 3000), (ones + "e-3000", "0." +
             "1" * 3000), (ones + "e-2999", "0." + "1" * 3000), ("\u0660" * 100 + "1" + "0" * 90, "1e90"),
             ("0" * 100, "-0.0"), ("0" * 100, "0e7"), ("0." + "0" * 99 + "1", "1e-100"), ("1" + "0" * 99, "1e99"),
             (ones, "NaN"), (ones, "Infinity"), ("\U0001D7CF" * 100, "1" * 100), ("1_" * 50 + "1", "1" * 51),
             ("12" * 50, "1" * 100)]
    for got, expected in cases:
        for line in (got, got + " 7"):
            want = expected + (" 7" if line != got else "")
            ours = _outcome(stdout_matches, line.encode(), want)
            official = _outcome(official_verdict, line, want)
            assert (ours is True) == (official is True), (line[:20], want[:20], ours, official)
    with pytest.raises(ArithmeticError):  # a signaling NaN against a long number raises there too
        stdout_matches(ones.encode(), "sNaN")


def test_the_zero_table_knows_every_zero_and_nothing_else():
    """Issue #60: runs of zeros of mixed scripts are looked up byte by byte (``grading._zero_scan``): at every
    character of Unicode (one string of all of them, UTF-8) the look-up says zero exactly for :data:`_ZEROS`' zeros
    and ``_``, and counts the zero digits."""
    import numpy as np

    from snapeval.tasks.livecodebench.grading import _ZEROS, _zero_digits, _zero_scan

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    data = "".join(chars).encode()
    marks, digits = _zero_scan(data)
    starts = (np.frombuffer(data, np.uint8) & 0xC0) != 0x80
    assert marks[~starts].all()
    assert (marks[starts] == np.array([c in _ZEROS for c in chars])).all()
    assert digits == len(_ZEROS) - 1
    assert _zero_digits("0\u0660_\U0001D7CE".encode() * 5) == 15 and _zero_digits("0\u0661".encode()) == -1


@pytest.mark.parametrize("name", sorted(STDIN_BOMBS))
def test_stdin_grading_memory_is_bounded_by_the_output(name):
    """Old code: the output decoded to a str (4 bytes a character beside a non-BMP one) and copied per step."""
    payload = STDIN_BOMBS[name]
    verdict, ratio = _grading_peak("stdin", payload, lambda index, out: stdout_matches(out, "5\n"))
    assert verdict in (None, ("wrong_answer", "")), verdict
    assert ratio < 1.2, f"{name}: grading took {ratio:.2f}x the output's size"


def test_a_line_of_digits_as_long_as_the_expected_one_is_compared_in_place():
    """A one-token line of 4 MiB of digits against an expected line of the same length (so the lines are compared
    as numbers; the judge holds the expected output encoded once per problem): the integers are compared digit by
    digit where they lie, not converted (before: the line's text, Decimal's copy and the Decimal, 3.4x the output),
    with the official verdicts for leading zeros and signs."""
    payload = b"7" * ((4 << 20) - 1) + b"1"
    for expected, right in ((b"7" * ((4 << 20) - 1) + b"2", False), (b"7" * ((4 << 20) - 1) + b"1", True)):
        verdict, ratio = _grading_peak("stdin", payload, lambda index, out: stdout_matches(out, expected))
        assert verdict == (None if right else ("wrong_answer", "")), verdict
        assert ratio < 1.2, f"grading took {ratio:.2f}x the output's size"
    assert stdout_matches("-0 +7 007 -0007", "0 7 7 -7") and not stdout_matches("-1 7", "1 7")
    assert stdout_matches("7 1e1", "7 10") and not stdout_matches("7 x", "7 7")


# ------------------------------------------------------------------------------------------- functional results
def test_long_decimal_integers_are_refused_before_conversion():
    """Old code: json.loads converted every integer (up to 4,300 digits, quadratic time) before any check."""
    with pytest.raises(ProtocolError):
        decode_value(b"[" + b"7" * 4000 + b"]")
    with pytest.raises(ProtocolError):
        decode_value(b'{"~": "x", "v": 1, "pad": [' + b", ".join([b"9" * 300] * 10) + b"]}")
    with pytest.raises(ProtocolError):
        decode_value(b"[1." + b"5" * 400 + b"]")


@pytest.mark.parametrize("value", [Fraction(10 ** 5000 + 1, 3), -(7 ** 9000), [1 << 64, -(1 << 64), (1 << 64) - 1],
                                   Fraction(-5, 1 << 70)], ids=["fraction", "int", "edges", "small_fraction"])
def test_wide_integers_cross_the_pipe_in_hexadecimal(value):
    """Old code: a Fraction with a part wider than 13,000 bits crossed as an unequal placeholder."""
    text = driver.encode_value(value, RESULT_LIMITS)
    numbers = re.findall(rb"-?\d+", re.sub(rb'"[^"]*"', b'""', text))  # the literals outside strings
    assert max(map(len, numbers), default=0) <= MAX_INT_LITERAL, numbers
    back = decode_value(text)
    assert back == value and type(back) is (ProgramFraction if type(value) is Fraction else type(value))


def test_many_small_values_are_refused_before_they_are_built():
    """Old code: up to 2^21 values were built, one Python object each (a one-character string outside the BMP costs
    80 bytes: +160 MiB for a 28 MiB result)."""
    payload = driver.encode_value(["\U0001F600"] * (MAX_VALUES + 10), RESULT_LIMITS)
    tracemalloc.start()
    try:
        with pytest.raises(OutputTooLarge):
            decode_value(payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(payload), peak / len(payload)


def test_a_result_of_long_integers_is_held_once_at_a_time():
    """Issue #47: a functional result was copied out of the reader, then decoded to text by json.loads beside it, then
    parsed into strings (about 3x its size, 7,000 integers of 3,900 digits: 2.03x the output cap in the harness's
    RSS). It is taken without a copy and emptied once it is text: the text, then the strings (about 2x)."""
    expected = [10 ** 3900 + i for i in range(700)]
    payload = driver.encode_value(expected, RESULT_LIMITS)
    verdict, ratio = _grading_peak("functional", payload, lambda index, value: value == expected)
    assert verdict is None and ratio < 2.4, ratio


def test_values_under_the_bound_cost_what_limits_py_states():
    payload = driver.encode_value(["\U0001F600"] * (MAX_VALUES - 10), RESULT_LIMITS)
    tracemalloc.start()
    try:
        value = decode_value(payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(value) == MAX_VALUES - 10 and peak < 110 * MAX_VALUES, peak / MAX_VALUES  # ~105 bytes a value at worst


@pytest.mark.runs_programs
@pytest.mark.skipif(not isolation().isolate_fs, reason="no mount namespace here: execution is refused")
def test_functional_limits_against_lcb_runner():
    """Issue #46 item 3: integers of any size pass as lcb_runner passes them (old code: a Fraction with a part wider
    than 13,000 bits equalled nothing, though Fraction(10**5000) == 10**5000 officially); nesting up to
    limits.MAX_DEPTH passes, deeper is the listed departure (docs/tasks.md): a runtime error here."""
    from snapeval.sandbox.limits import MAX_DEPTH
    from snapeval.tasks.livecodebench import functional_matches, load_json

    def run(body, expected):
        code = f"from fractions import Fraction\nclass Solution:\n    def f(self, x):\n        {body}\n"
        return run_program(code, ["0"], mode="functional", func_name="f", limits=SandboxLimits(timeout_s=5.0),
                           judge=lambda index, value: functional_matches(value, load_json(expected))).status

    assert run("return Fraction(10 ** 5000)", "1" + "0" * 5000) == "passed"
    assert run("return -(7 ** 5000)", str(-(7 ** 5000))) == "passed"  # 14,037 bits
    nested = lambda depth: "[" * depth + "]" * depth  # noqa: E731
    wrap = "return __import__('functools').reduce(lambda inner, _: [inner], range({}), [])"  # {} + 1 brackets deep
    assert run(wrap.format(MAX_DEPTH - 2), nested(MAX_DEPTH - 1)) == "passed"
    assert run(wrap.format(MAX_DEPTH + 1), nested(MAX_DEPTH + 2)) == "runtime_error"

"""agent.stream.loads_flagged (the C scanner, csrc/json.h) against ref_loads
(Python's json with strict hooks, tests/reference.py): the same value (ints,
floats, bools and -0.0 told apart), the same flags, the same error status.

Hand-written cases for every rule of csrc/json.h; every file of
JSONTestSuite's test_parsing; hypothesis-generated documents serialized in
varied ways, then mutated; random bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.stream import JSONError, loads, loads_flagged
from agent.stream.jsonscan import MAX_DEPTH, built, loads_checked
from agent.stream.records import JSONStatus
from conftest import scaled
from reference import FLAG_BAD_UTF8, FLAG_LONE_SURROGATE, RefJSONError, ref_loads
from streams import mutate

SUITE = Path(__file__).resolve().parents[2] / "shared" / "jsontestsuite" / "test_parsing"
R = "\ufffd"
EMPTY, SYNTAX, DEPTH = JSONStatus.EMPTY, JSONStatus.SYNTAX, JSONStatus.DEPTH
TRAILING, RANGE = JSONStatus.TRAILING, JSONStatus.RANGE


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def same(a, b) -> bool:
    """Equal values of exactly the same types: 1, 1.0 and True differ, and
    so do 0.0 and -0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(fn, data: bytes, max_depth: int = 64):
    """("ok", value, flags) or ("error", status)."""
    try:
        value, flags = fn(data, max_depth)
    except (JSONError, RefJSONError) as exc:
        return ("error", exc.status)
    return ("ok", value, flags)


def same_outcome(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1] == b[1]
    return same(a[1], b[1]) and a[2] == b[2]


def agree(data: bytes, max_depth: int = 64):
    """C and reference give the same outcome; returns it. Both of
    loads_flagged's ways are held to it: the one it takes for this document
    (most valid ones are built by Python's json after the scanner checked
    them) and the one that builds every value from the scanner's."""
    c = outcome(loads_flagged, data, max_depth)
    r = outcome(ref_loads, data, max_depth)
    assert same_outcome(c, r), f"C {c!r} != reference {r!r} for {data[:200]!r}"
    b = outcome(built, data, max_depth)
    assert same_outcome(b, r), f"C, built {b!r} != reference {r!r} for {data[:200]!r}"
    if c[0] == "ok" and max_depth == MAX_DEPTH:
        # a document the scanner accepted, given again as text (bad bytes
        # replaced, as the stream core's copy has them): the value loads()
        # gives that text, without the check
        text = data.decode("utf-8", "replace")
        want = loads(text.encode())
        assert same(loads_checked(text), want), f"loads_checked != loads for {data[:200]!r}"
    return c


def check(data: bytes, expected, max_depth: int = 64) -> None:
    """Both sides give `expected`: a JSONStatus, or (value, flags)."""
    got = agree(data, max_depth)
    want = ("error", expected) if isinstance(expected, JSONStatus) else ("ok", *expected)
    assert same_outcome(got, want), f"got {got!r}, want {want!r} for {data[:200]!r}"


def test_same_tells_types_and_signed_zero_apart():
    assert same([1, 1.0, True, None, "a"], [1, 1.0, True, None, "a"])
    assert not same(1, 1.0) and not same(1, True) and not same(0, False)
    assert not same(0.0, -0.0) and same(-0.0, -0.0)
    assert not same({"a": 1}, {"a": 1.0}) and not same([1], [1, 2])


# ---------------------------------------------------------------------------
# hand-written: one test per rule of csrc/json.h
# ---------------------------------------------------------------------------

def test_rfc8259_values_accepted():
    check(b'{"a": [1, -2, 3.5, -0.25e1, true, false, null, "s"], "b": {}, "c": []}',
          ({"a": [1, -2, 3.5, -2.5, True, False, None, "s"], "b": {}, "c": []}, 0))
    check(b" \t\r\n 7 \t\r\n", (7, 0))
    check(b'"x"', ("x", 0))
    check(b"null", (None, 0))
    check(b"true", (True, 0))
    check(b"[]", ([], 0))
    check(b"{}", ({}, 0))


def test_trailing_commas_rejected():
    for doc in (b"[1,]", b'{"a":1,}', b"[,]", b"[1,,2]", b'{,"a":1}', b"{,}"):
        check(doc, SYNTAX)


def test_single_quotes_rejected():
    check(b"['a']", SYNTAX)
    check(b"{'a': 1}", SYNTAX)


def test_comments_rejected():
    check(b"[1 /* c */]", SYNTAX)
    check(b"[1] // c", TRAILING)
    check(b"# c\n1", SYNTAX)


def test_leading_zeros_rejected():
    check(b"[01]", SYNTAX)
    check(b"[-01]", SYNTAX)
    check(b"[00]", SYNTAX)
    # at the top level too: "leading zeros" is a syntax rule, not trailing data
    check(b"01", SYNTAX)
    check(b"-012", SYNTAX)
    check(b"[0]", ([0], 0))
    check(b"[0.01]", ([0.01], 0))


def test_leading_plus_rejected():
    check(b"[+1]", SYNTAX)
    check(b"+1", SYNTAX)
    check(b"[1e+1]", ([10.0], 0))


def test_number_grammar():
    for doc in (b"[.5]", b"[1.]", b"[1.e5]", b"[1e]", b"[1e+]", b"[-]", b"[0x10]", b"[1_000]",
                b"[- 1]", b"[1 000]"):
        check(doc, SYNTAX)
    # a '.' or exponent that starts but does not finish the top number
    for doc in (b"1.", b"1.e5", b"1e", b"1E-", b"-", b"-a"):
        check(doc, SYNTAX)
    # a complete top number followed by a byte that cannot continue it
    for doc in (b"1.5.", b"1e5e", b"1e5.0", b"0x1", b"1-", b"12a", b"1 .5"):
        check(doc, TRAILING)


def test_nan_and_infinity_rejected():
    for doc in (b"NaN", b"[NaN]", b"Infinity", b"-Infinity", b'{"a": -Infinity}',
                b"[nan]", b"[inf]", b"[Infinity1]"):
        check(doc, SYNTAX)


@pytest.mark.parametrize("byte", range(0x20))
def test_raw_control_characters_in_strings_rejected(byte):
    check(b'["a' + bytes([byte]) + b'b"]', SYNTAX)
    check(b'{"k' + bytes([byte]) + b'": 1}', SYNTAX)


def test_del_and_escaped_controls_accepted():
    check(b'"\x7f"', ("\x7f", 0))
    check(b'"\\u0000\\u001f\\u007F"', ("\x00\x1f\x7f", 0))


def test_valid_escapes():
    check(b'"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u20AC"',
          ('" \\ / \b \f \n \r \t é €', 0))


def test_other_escapes_rejected():
    for esc in (b"\\x41", b"\\a", b"\\'", b"\\U0041", b"\\u12", b"\\u12G4", b"\\u+041",
                b"\\u 041", b"\\u0_41", b"\\u-041", b"\\0", b"\\v", b"\\\xc3\xa9",
                b"\\u\xd9\xa1\xd9\xa1\xd9\xa1\xd9\xa1", b"\\"):
        check(b'"' + esc + b'"', SYNTAX)


def test_bom_rejected():
    check(b"\xef\xbb\xbf{}", SYNTAX)
    check(b"\xef\xbb\xbf", SYNTAX)
    check(b" \xef\xbb\xbf1", SYNTAX)
    check("[\"\ufeff\"]".encode(), (["\ufeff"], 0))  # inside a string it is a character


def test_only_whitespace_after_the_value():
    check(b"{} \n", ({}, 0))
    check(b"{} x", TRAILING)
    check(b"[1] [2]", TRAILING)
    check(b"1 2", TRAILING)
    check(b'"a""b"', TRAILING)
    check(b"truex", TRAILING)
    check(b"null\x00", TRAILING)
    check(b"[1]\xff", TRAILING)
    check(b"[1]\x0b", TRAILING)  # vertical tab is not JSON whitespace
    check("[1]\u00a0".encode(), TRAILING)


def test_non_json_whitespace_rejected():
    for ws in (b"\x0b", b"\x0c", b"\xc2\xa0", b"\xe2\x80\xa8", b"\xe3\x80\x80"):
        check(b"[1," + ws + b"2]", SYNTAX)
        check(ws + b"1", SYNTAX)


def test_empty_document():
    check(b"", EMPTY)
    check(b" \t\r\n", EMPTY)
    check(b"\x0c", SYNTAX)


def test_incomplete_documents():
    for doc in (b"[", b"[1", b"[1,", b'{"a"', b'{"a":', b'{"a":1', b'"abc', b"tru", b"nul",
                b'{"a" 1}', b'{1: 2}', b"]", b"}", b'"\\u00"'):
        check(doc, SYNTAX)


def test_depth_counts_open_containers():
    check(b"1", (1, 0), max_depth=1)
    check(b"[]", ([], 0), max_depth=1)
    check(b"[[]]", DEPTH, max_depth=1)
    check(b"[{}]", ([{}], 0), max_depth=2)
    check(b'{"a":[{}]}', DEPTH, max_depth=2)
    check(b'{"a":[{}]}', ({"a": [{}]}, 0), max_depth=3)


def test_depth_default_is_64():
    nested = b"[" * 64 + b"]" * 64
    value, flags = ref_loads(nested)
    check(nested, (value, 0))
    check(b"[" * 65 + b"]" * 65, DEPTH)
    check(b'{"a":' * 64 + b"1" + b"}" * 64, (json.loads('{"a":' * 64 + "1" + "}" * 64), 0))
    check(b'{"a":' * 65 + b"1" + b"}" * 65, DEPTH)


def test_depth_zero_means_default():
    check(b"[" * 64 + b"]" * 64, (json.loads("[" * 64 + "]" * 64), 0), max_depth=0)
    check(b"[" * 65 + b"]" * 65, DEPTH, max_depth=0)


def test_depth_clamped_to_limit():
    check(b"[" * 1025 + b"]" * 1025, DEPTH, max_depth=5000)
    check(b"[" * 1025 + b"]" * 1025, DEPTH, max_depth=2**31)
    check(b"[" * 300 + b"]" * 300, (ref_loads(b"[" * 300 + b"]" * 300, 300)[0], 0),
          max_depth=5000)


def test_depth_limit_1024_accepted():
    ok = b"[" * 1024 + b"]" * 1024
    for parse in (lambda: loads_flagged(ok, max_depth=5000), lambda: ref_loads(ok, 1024)):
        value, flags = parse()
        assert flags == 0
        # walked, not compared with ==: that recursion would be the limit
        for level in range(1024):
            assert type(value) is list and len(value) == (1 if level < 1023 else 0)
            value = value[0] if value else None


def test_depth_error_is_not_syntax_error():
    check(b"[" * 65, DEPTH)                  # too deep before it is incomplete
    check(b"[" * 65 + b"x", DEPTH)
    check(b"[x" + b"[" * 65, SYNTAX)         # the syntax error comes first
    check(b"[" * 65 + b"]" * 65 + b"x", DEPTH)


def test_bytes_over_0x7f_only_inside_strings():
    check('"é中🙂"'.encode(), ("é中🙂", 0))
    check('{"é": "中"}'.encode(), ({"é": "中"}, 0))
    check("[é]".encode(), SYNTAX)
    check(b"[\xff]", SYNTAX)
    check(b"\x80", SYNTAX)


@pytest.mark.parametrize("raw", [
    b"\xff", b"\xfe\xff", b"\x80", b"\xbf\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80",
    b"\xe4\xb8", b"\xe4\xb8a", b"\xf0\x9f\x99", b"\xf0\x9f\x99\xe4\xb8\xad", b"a\xe4\xb8\xad\xad",
    b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xe0\xa0", b"\xc2",
])
def test_invalid_utf8_in_strings_replaced_like_python(raw):
    want = raw.decode("utf-8", "replace")
    assert R in want
    check(b'"' + raw + b'"', (want, FLAG_BAD_UTF8))
    check(b'{"' + raw + b'": ["' + raw + b'"]}', ({want: [want]}, FLAG_BAD_UTF8))


def test_literal_replacement_character_is_not_flagged():
    check('"\ufffd"'.encode(), (R, 0))


def test_lone_surrogate_escapes_replaced_and_flagged():
    check(b'"\\ud800"', (R, FLAG_LONE_SURROGATE))
    check(b'"\\uDC00x"', (R + "x", FLAG_LONE_SURROGATE))
    check(b'"\\ud800\\ud800"', (R + R, FLAG_LONE_SURROGATE))
    check(b'"\\udc00\\ud800"', (R + R, FLAG_LONE_SURROGATE))
    check(b'"\\ud800\\u0041"', (R + "A", FLAG_LONE_SURROGATE))
    check(b'"\\ud800\\n"', (R + "\n", FLAG_LONE_SURROGATE))
    check(b'"\\ud83d"', (R, FLAG_LONE_SURROGATE))


def test_surrogate_pair_escapes_decoded():
    check(b'"\\ud83d\\ude00"', ("\U0001F600", 0))
    check(b'"\\uD834\\uDD1E"', ("\U0001D11E", 0))
    check(b'"\\udbff\\udfff"', ("\U0010FFFF", 0))
    check(b'"\\ud83d\\ude00\\ud800"', ("\U0001F600" + R, FLAG_LONE_SURROGATE))


def test_flags_from_keys_and_both_kinds():
    check(b'{"\\ud800": 1}', ({R: 1}, FLAG_LONE_SURROGATE))
    check(b'{"\xff": "\\udfff"}', ({R: R}, FLAG_BAD_UTF8 | FLAG_LONE_SURROGATE))


def test_duplicate_keys_last_wins():
    check(b'{"a": 1, "b": 2, "a": 3}', ({"a": 3, "b": 2}, 0))
    check(b'{"a": {"x": 1}, "a": [2]}', ({"a": [2]}, 0))
    # keys equal once decoded are duplicates too
    check(b'{"\\u0061": 1, "a": 2}', ({"a": 2}, 0))
    check(b'{"\\ud800": 1, "\\udc00": 2}', ({R: 2}, FLAG_LONE_SURROGATE))
    # json.h: the flags are those of all the document's strings, a value
    # that a later duplicate replaced included
    check(b'{"a": "\\ud800", "a": 1}', ({"a": 1}, FLAG_LONE_SURROGATE))
    check(b'{"a": ["\xff"], "a": 1}', ({"a": 1}, FLAG_BAD_UTF8))


def test_integers_are_ints_of_any_size():
    for n in (0, 1, -1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 10**30, -10**40):
        check(str(n).encode(), (n, 0))
        check(b"[" + str(n).encode() + b"]", ([n], 0))
    check(b"-0", (0, 0))


def test_integers_with_many_digits_are_exact():
    # Beyond CPython's default 4300-digit str->int limit, still an exact int.
    n = 10**4999 + 7
    data = b"1" + b"0" * 4998 + b"7"  # str(n) itself would hit the limit
    assert same(ref_loads(data), (n, 0))
    value, flags = loads_flagged(data)
    assert flags == 0 and value == n


def test_fraction_or_exponent_makes_a_float():
    check(b"[1.0, 1e2, 1E2, 1e-2, -0.0, -0e0, 0e0, 10e-1]",
          ([1.0, 100.0, 100.0, 0.01, -0.0, -0.0, 0.0, 1.0], 0))


def test_float_overflow_is_range():
    for doc in (b"1e309", b"-1e309", b"[1.5e99999]", b'{"a": 123123e100000}',
                b"1.7976931348623158080e308", b"-1.7976931348623159e308",
                b"0.4e" + b"0" * 30 + b"400",
                # exactly halfway between the largest double and 2**1024: ties to even
                b"179769313486231580793728971405303415079934132710037826936173778980444968292764"
                b"750946649017977587207096330286416692887910946555547851940402630657488671505820"
                b"681908902000708383676273854845817711531764475730270069855571366959622842914819"
                b"860834936475292719074168444365510704342711559699508093042880177904174497792.0"):
        check(doc, RANGE)


def test_float_largest_finite_accepted():
    check(b"1.7976931348623157e308", (1.7976931348623157e308, 0))
    check(b"1.79769313486231580e308", (1.7976931348623157e308, 0))  # rounds down
    check(b"-1.7976931348623158e308", (-1.7976931348623157e308, 0))


def test_float_range_error_only_for_an_accepted_document():
    check(b"[1e999, x]", SYNTAX)
    check(b"[1e999] x", TRAILING)
    check(b"[1e999," + b"[" * 70, DEPTH)


def test_float_underflow_rounds_to_zero_or_subnormal():
    check(b"1e-400", (0.0, 0))
    check(b"-1e-400", (-0.0, 0))
    check(b"5e-324", (5e-324, 0))
    check(b"3e-324", (5e-324, 0))
    check(b"2e-324", (0.0, 0))
    check(b"2.2250738585072011e-308", (2.2250738585072011e-308, 0))
    check(b"[123e-10000000]", ([0.0], 0))


def test_float_exponent_extremes():
    check(b"0e999999999999999999", (0.0, 0))           # zero whatever the exponent
    check(b"-0.0e99999", (-0.0, 0))
    check(b"1e-99999999999999999999", (0.0, 0))
    check(b"1e99999999999999999999", RANGE)
    check(b"1e0000000000000000000000000000001", (10.0, 0))
    check(b"0." + b"0" * 1000 + b"1e1001", (1.0, 0))
    check(b"1" + b"0" * 1000 + b"e-1000", (1.0, 0))
    check(b"9" * 309 + b".0", RANGE)
    check(b"9" * 308 + b".0", (float("9" * 308), 0))
    check(b"1" + b"0" * 400, (10**400, 0))               # an integer: exact, no RANGE


def test_float_correctly_rounded_whatever_the_length():
    for text in ("0.1000000000000000055511151231257827021181583404541015625",
                 "0.30000000000000004", "9007199254740993", "9007199254740993.0",
                 "1" + "0" * 400 + "e-400", "0." + "0" * 400 + "1e401",
                 "2.4703282292062327e-324", "2.4703282292062328e-324",
                 "1.00000000000000011102230246251565404236316680908203125",
                 "1.00000000000000011102230246251565404236316680908203124",
                 "1.00000000000000011102230246251565404236316680908203126",
                 "123456789012345678901234567890e-10", "4.9406564584124654e-324",
                 # just below halfway between the largest double and 2**1024: rounds
                 # down to the largest double (halfway itself is RANGE, see below)
                 "179769313486231580793728971405303415079934132710037826936173778980444968292764"
                 "750946649017977587207096330286416692887910946555547851940402630657488671505820"
                 "681908902000708383676273854845817711531764475730270069855571366959622842914819"
                 "860834936475292719074168444365510704342711559699508093042880177904174497791.9",
                 "2.2250738585072011360574097967091319759348195463516456480234261097248222220210"
                 "769455165295239081350879141491589130396211068700864386945946455276572074078206"
                 "217433799881410632673292535522868813721490129811224514518898490572223072852551"
                 "331557550159143974763979834118019993239625482890171070818506906306666559949382"
                 "757725720157630626906633326475653000092458883164330377797918696120494973903778"
                 "297049050510806099407302629371289589500035837999672072543043602840788957717961"
                 "509455167482434710307026091446215722898802581825451803257070188608721131280795"
                 "122334262883686223215037756666225039825343359745688844239002654981983854879482"
                 "922068947216898310996983658468140228542433306603398508864458040010349339704275"
                 "671864433837704860378616227717385456230658746790140867233276367187499e-308"):
        want = float(text) if any(ch in text for ch in ".eE") else int(text)
        check(text.encode(), (want, 0))


def test_loads_returns_value_only():
    assert same(loads(b'{"a": [1, 2.0]}'), {"a": [1, 2.0]})
    with pytest.raises(JSONError) as info:
        loads(b"[1,]")
    assert info.value.status == SYNTAX


# ---------------------------------------------------------------------------
# JSONTestSuite
# ---------------------------------------------------------------------------

def _i_big(name: str):
    return lambda data: ([int(data.strip()[1:-1])], 0)


# Each i_ file's outcome under the rules of csrc/json.h, at the Python level
# (csrc/tests/test_json.c has the same table for ha_json_parse): numbers
# overflowing a double are RANGE, integers beyond int64 exact ints, invalid
# UTF-8 and lone surrogate escapes replaced and flagged, UTF-16 and BOMs
# syntax errors, 500 levels beyond the depth limit.
I_OUTCOMES = {
    "i_number_double_huge_neg_exp.json": ([0.0], 0),
    "i_number_huge_exp.json": RANGE,
    "i_number_neg_int_huge_exp.json": RANGE,
    "i_number_pos_double_huge_exp.json": RANGE,
    "i_number_real_neg_overflow.json": RANGE,
    "i_number_real_pos_overflow.json": RANGE,
    "i_number_real_underflow.json": ([0.0], 0),
    "i_number_too_big_neg_int.json": ([-123123123123123123123123123123], 0),
    "i_number_too_big_pos_int.json": ([100000000000000000000], 0),
    "i_number_very_big_negative_int.json":
        ([-237462374673276894279832749832423479823246327846], 0),
    "i_object_key_lone_2nd_surrogate.json": ({R: 0}, FLAG_LONE_SURROGATE),
    "i_string_1st_surrogate_but_2nd_missing.json": ([R], FLAG_LONE_SURROGATE),
    "i_string_1st_valid_surrogate_2nd_invalid.json": ([R + "\u1234"], FLAG_LONE_SURROGATE),
    "i_string_UTF-16LE_with_BOM.json": SYNTAX,
    "i_string_UTF-8_invalid_sequence.json": (["\u65e5\u0448" + R], FLAG_BAD_UTF8),
    "i_string_UTF8_surrogate_U+D800.json": ([R * 3], FLAG_BAD_UTF8),
    "i_string_incomplete_surrogate_and_escape_valid.json": ([R + "\n"], FLAG_LONE_SURROGATE),
    "i_string_incomplete_surrogate_pair.json": ([R + "a"], FLAG_LONE_SURROGATE),
    "i_string_incomplete_surrogates_escape_valid.json": ([R + R + "\n"], FLAG_LONE_SURROGATE),
    "i_string_invalid_lonely_surrogate.json": ([R], FLAG_LONE_SURROGATE),
    "i_string_invalid_surrogate.json": ([R + "abc"], FLAG_LONE_SURROGATE),
    "i_string_invalid_utf-8.json": ([R], FLAG_BAD_UTF8),
    "i_string_inverted_surrogates_U+1D11E.json": ([R + R], FLAG_LONE_SURROGATE),
    "i_string_iso_latin_1.json": ([R], FLAG_BAD_UTF8),
    "i_string_lone_second_surrogate.json": ([R], FLAG_LONE_SURROGATE),
    "i_string_lone_utf8_continuation_byte.json": ([R], FLAG_BAD_UTF8),
    "i_string_not_in_unicode_range.json": ([R * 4], FLAG_BAD_UTF8),
    "i_string_overlong_sequence_2_bytes.json": ([R * 2], FLAG_BAD_UTF8),
    "i_string_overlong_sequence_6_bytes.json": ([R * 6], FLAG_BAD_UTF8),
    "i_string_overlong_sequence_6_bytes_null.json": ([R * 6], FLAG_BAD_UTF8),
    "i_string_truncated-utf-8.json": ([R * 2], FLAG_BAD_UTF8),
    "i_string_utf16BE_no_BOM.json": SYNTAX,
    "i_string_utf16LE_no_BOM.json": SYNTAX,
    "i_structure_500_nested_arrays.json": DEPTH,
    "i_structure_UTF-8_BOM_empty_object.json": SYNTAX,
}


def _suite_files() -> list[str]:
    if not SUITE.is_dir():
        return []
    return sorted(p.name for p in SUITE.iterdir() if p.suffix == ".json")


def _suite(name: str) -> bytes:
    path = SUITE / name
    if not path.is_file():
        pytest.skip(f"JSONTestSuite file {path} is missing (../shared/jsontestsuite not checked out)")
    return path.read_bytes()


def test_suite_is_complete():
    files = _suite_files()
    if not files:
        pytest.skip(f"JSONTestSuite not found at {SUITE}")
    kinds = [f[:2] for f in files]
    assert (len(files), kinds.count("y_"), kinds.count("n_"), kinds.count("i_")) == (318, 95, 188, 35)
    assert sorted(f for f in files if f.startswith("i_")) == sorted(I_OUTCOMES)


@pytest.mark.parametrize("name", [f for f in _suite_files() if f.startswith("y_")]
                         or [pytest.param("y_", marks=pytest.mark.skip(reason=f"JSONTestSuite not found at {SUITE}"))])
def test_suite_y_accepted(name):
    data = _suite(name)
    got = agree(data)
    assert got[0] == "ok", f"{name} rejected: {got!r}"
    # no replacement is needed in a y_ file
    assert got[2] == 0
    # the value is Python's own reading of it
    assert same(got[1], json.loads(data.decode("utf-8"))), name


@pytest.mark.parametrize("name", [f for f in _suite_files() if f.startswith("n_")]
                         or [pytest.param("n_", marks=pytest.mark.skip(reason=f"JSONTestSuite not found at {SUITE}"))])
def test_suite_n_rejected(name):
    got = agree(_suite(name))
    assert got[0] == "error", f"{name} accepted: {got!r}"
    assert got[1] in (EMPTY, SYNTAX, TRAILING, DEPTH), f"{name}: {got!r}"


@pytest.mark.parametrize("name", sorted(I_OUTCOMES))
def test_suite_i_documented_outcome(name):
    data = _suite(name)
    check(data, I_OUTCOMES[name])


# ---------------------------------------------------------------------------
# generated documents
# ---------------------------------------------------------------------------

_STRING_CHARS = st.one_of(
    st.characters(codec="utf-8"),   # any scalar value, astral included, no surrogates
    st.characters(max_codepoint=0x1F),
    st.sampled_from(['"', "\\", "/", "\u2028", "\u2029", "\x7f", "\ufeff", "\ufffd", "🙂",
                     "\U0010FFFF", "中"]),
)
_STRINGS = st.text(_STRING_CHARS, max_size=12)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2**63, 2**63 - 1),
    st.integers(),                                  # beyond int64 too
    st.integers(-10**40, 10**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, 2**63 + 0.0]),
    _STRINGS,
)
_DOCS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(_STRINGS, children, max_size=5)),
    max_leaves=25,
)
_DUMP_OPTIONS = st.fixed_dictionaries({
    "ensure_ascii": st.booleans(),
    "indent": st.sampled_from([None, 0, 1, 2, "\t"]),
    "separators": st.sampled_from([None, (",", ":"), (", ", ": "), (" , ", " : ")]),
})


def _depth(v) -> int:
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    return 0


@settings(max_examples=scaled(250), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=_DOCS, options=_DUMP_OPTIONS, pad=st.sampled_from(["", " ", "\n", " \t\r\n"]))
def test_generated_documents_round_trip(doc, options, pad):
    data = (pad + json.dumps(doc, **options) + pad).encode("utf-8")
    got = agree(data)
    assert got[0] == "ok" and got[2] == 0
    assert same(got[1], doc)


@settings(max_examples=scaled(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=_DOCS, max_depth=st.integers(0, 6))
def test_generated_documents_depth_limit(doc, max_depth):
    data = json.dumps(doc).encode()
    got = agree(data, max_depth)
    limit = max_depth or 64
    if _depth(doc) > limit:
        assert got == ("error", DEPTH)
    else:
        assert got[0] == "ok" and same(got[1], doc)


@settings(max_examples=scaled(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=_DOCS.filter(lambda d: isinstance(d, (str, list, dict))),
       lone=st.lists(st.integers(0xD800, 0xDFFF).map(chr), min_size=1, max_size=3),
       ensure_ascii=st.booleans())
def test_generated_documents_with_lone_surrogates(doc, lone, ensure_ascii):
    """Lone surrogates in the data: escaped (\\udXXX: LONE_SURROGATE) or
    written raw as the invalid UTF-8 bytes ED A0 80.. (BAD_UTF8)."""
    doc = ["".join(lone), doc, {"".join(lone): "".join(reversed(lone))}]
    data = json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    got = agree(data)
    assert got[0] == "ok"
    assert got[2] & (FLAG_LONE_SURROGATE if ensure_ascii else FLAG_BAD_UTF8)


@settings(max_examples=scaled(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "\u00e9", "\\u0061", "\\ud800",
                                                 "\\udc00", "\\u00e9"]),
                                _SCALARS), max_size=8))
def test_generated_objects_with_duplicate_keys(pairs):
    r"""Keys repeated, also in escaped spellings: the last one wins, after
    decoding (\u0061 is "a"; two lone surrogates are both U+FFFD)."""
    text = "{" + ",".join(f'"{k}":{json.dumps(v)}' for k, v in pairs) + "}"
    want: dict = {}
    lone = False
    for k, v in pairs:
        key = json.loads(f'"{k}"')
        if "\ud800" <= key <= "\udfff":
            key, lone = R, True
        want[key] = v
    check(text.encode(), (want, FLAG_LONE_SURROGATE if lone else 0))


@settings(max_examples=scaled(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=_DOCS, options=_DUMP_OPTIONS, data=st.data())
def test_mutated_documents(doc, options, data):
    agree(mutate(data.draw, json.dumps(doc, **options).encode("utf-8"),
                 data.draw(st.integers(1, 3)), st.one_of(
                     st.integers(0, 255),
                     st.sampled_from(b'[]{},:"\\ -+.eE0123456789tfn\t\n\r\x00\x7f\x80\xbf\xc3\xed\xef\xf0\xff'))))


_JSONISH = st.lists(st.one_of(
    st.sampled_from([b"[", b"]", b"{", b"}", b",", b":", b'"', b"\\", b"\\u", b"d800", b"DC00",
                     b"0", b"-", b"1", b".", b"e", b"E", b"+", b" ", b"\n", b"true", b"false",
                     b"null", b"NaN", b"Infinity", b"\xff", b"\xc3", b"\xa9", b"\xed\xa0\x80",
                     b"\xef\xbb\xbf", b"\x00", b'"a"', b'"k":', b"1e999", b"12345678901234567890"]),
    st.binary(max_size=3)), max_size=40).map(b"".join)


@settings(max_examples=scaled(400), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=64), _JSONISH), max_depth=st.sampled_from([0, 1, 2, 64]))
def test_random_bytes(data, max_depth):
    agree(data, max_depth)

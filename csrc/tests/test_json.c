/* Contract tests for json.h: one group per documented rule. With argv[1]
 * the JSONTestSuite test_parsing folder is run too: y_ accepted, n_
 * rejected, each i_ file checked against the table below. */
#include "json.h"
#include "tests/check.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A literal and its length, without the terminating NUL. */
#define L(s) (const uint8_t *)(s), (sizeof(s) - 1)
/* U+FFFD in UTF-8, for building expected strings by concatenation. */
#define R "\xef\xbf\xbd"

#define SUITE_FILE_MAX (1u << 20)
#define DECODE_BUF 4096u
#define NAME_MAX_LEN 256u

/* Parse a copy of exactly len bytes, so a sanitizer sees any over-read. */
static ha_json_status parse_copy(const uint8_t *s, size_t len, unsigned max_depth,
                                 ha_json_val *root, size_t *off, unsigned *fl)
{
    uint8_t *buf = malloc(len ? len : 1);
    ha_json_status st;
    if (!buf)
        abort();
    if (len)
        memcpy(buf, s, len);
    st = ha_json_parse(buf, len, max_depth, root, off, fl);
    free(buf);
    return st;
}

static int parse_is(const uint8_t *s, size_t len, ha_json_status want,
                    size_t want_off)
{
    ha_json_val root;
    size_t off = (size_t)-1;
    unsigned fl;
    ha_json_status st = parse_copy(s, len, HA_JSON_MAX_DEPTH, &root, &off, &fl);
    if (st != want || (want != HA_JSON_OK && off != want_off)) {
        fprintf(stderr, "  parse %.*s: status %d offset %zu, want %d at %zu\n",
                (int)len, (const char *)s, (int)st, off, (int)want, want_off);
        return 0;
    }
    return 1;
}

/* Parse s and decode its top value, a string; compare with want. */
static int decodes_to(const uint8_t *s, size_t len, const uint8_t *want,
                      size_t want_len, unsigned want_flags)
{
    ha_json_val root;
    size_t off, n = 0;
    unsigned pfl = 0, dfl = 0;
    uint8_t out[DECODE_BUF];
    if (ha_json_parse(s, len, 0, &root, &off, &pfl) != HA_JSON_OK)
        return 0;
    if (ha_json_str_decode(s, root, out, sizeof out, &n, &dfl) != HA_JSON_OK)
        return 0;
    if (n > ha_json_str_max(root) || pfl != want_flags || dfl != want_flags)
        return 0;
    if (!(pfl & HA_JSON_FLAG_BAD_UTF8)) { /* the decoder that trusts the parser agrees */
        uint8_t out2[DECODE_BUF];
        size_t n2 = 0;
        unsigned vfl = 0;
        if (ha_json_str_decode_valid(s, root, out2, sizeof out2, &n2, &vfl) != HA_JSON_OK ||
            vfl != dfl || n2 != n || memcmp(out2, out, n) != 0)
            return 0;
    }
    return n == want_len && memcmp(out, want, n) == 0;
}

static int sanitizes_to(const uint8_t *s, size_t len, const uint8_t *want,
                        size_t want_len)
{
    uint8_t out[DECODE_BUF];
    unsigned fl = 0;
    size_t n = ha_utf8_sanitize(s, len, out, &fl);
    int replaced = memcmp(want, s, want_len < len ? want_len : len) != 0 ||
                   want_len != len;
    return n == want_len && memcmp(out, want, n) == 0 &&
           fl == (replaced ? HA_JSON_FLAG_BAD_UTF8 : 0u);
}

static ha_json_val root_of(const uint8_t *s, size_t len)
{
    ha_json_val root;
    size_t off;
    unsigned fl;
    if (ha_json_parse(s, len, 0, &root, &off, &fl) != HA_JSON_OK)
        root.kind = HA_JSON_ABSENT;
    return root;
}

static int span_is(ha_json_val v, size_t start, size_t end, ha_json_kind kind)
{
    return v.start == start && v.end == end && v.kind == kind;
}

static ha_json_status i64_of(const uint8_t *s, size_t len, int64_t *out)
{
    ha_json_val r = root_of(s, len);
    return ha_json_get_i64(s, r, out);
}

static ha_json_status f64_of(const uint8_t *s, size_t len, double *out)
{
    ha_json_val r = root_of(s, len);
    return ha_json_get_f64(s, r, out);
}

/* ---- grammar ----------------------------------------------------------- */

static void test_accept(check_counts *c)
{
    ha_json_val r;
    size_t off;
    unsigned fl = 99;
    const uint8_t doc[] = " \t\r\n{\"a\" : [ 1 , -2.5e+3 , true , false , null , \"s\" , { } , [ ] ] } \n";

    CHECK(c, ha_json_parse(doc, sizeof doc - 1, 0, &r, &off, &fl) == HA_JSON_OK);
    CHECK(c, span_is(r, 4, sizeof doc - 3, HA_JSON_OBJECT)); /* whitespace excluded */
    CHECK(c, fl == 0);
    /* Every kind can be the top value. */
    CHECK(c, span_is(root_of(L("0")), 0, 1, HA_JSON_NUMBER));
    CHECK(c, span_is(root_of(L(" -0.0e-0 ")), 1, 8, HA_JSON_NUMBER));
    CHECK(c, span_is(root_of(L("true")), 0, 4, HA_JSON_TRUE));
    CHECK(c, span_is(root_of(L("false")), 0, 5, HA_JSON_FALSE));
    CHECK(c, span_is(root_of(L("null")), 0, 4, HA_JSON_NULL));
    CHECK(c, span_is(root_of(L("\"\"")), 0, 2, HA_JSON_STRING));
    CHECK(c, span_is(root_of(L("[]")), 0, 2, HA_JSON_ARRAY));
    CHECK(c, span_is(root_of(L("{}")), 0, 2, HA_JSON_OBJECT));
    /* Number grammar. */
    CHECK(c, parse_is(L("[0,-0,1,-1,10,0.5,1.25,1e5,1E5,1e+5,1e-5,-1.5E-05,123456789012345678901234567890]"),
                      HA_JSON_OK, 0));
    /* Every escape, both hex cases, raw UTF-8, DEL. */
    CHECK(c, parse_is(L("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00aF\\uABcd\xc3\xa9\xf0\x9f\x98\x80\x7f\""),
                      HA_JSON_OK, 0));
    /* Long plain strings exercise the word-at-a-time path. */
    CHECK(c, parse_is(L("\"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ\""),
                      HA_JSON_OK, 0));
    /* NULL err_offset and flags are allowed. */
    CHECK(c, ha_json_parse(L("[1]"), 0, &r, NULL, NULL) == HA_JSON_OK);
    CHECK(c, ha_json_parse(L("[1"), 0, &r, NULL, NULL) == HA_JSON_ERR_SYNTAX);
}

static void test_reject(check_counts *c)
{
    /* Trailing commas. */
    CHECK(c, parse_is(L("[1,]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("{\"a\":1,}"), HA_JSON_ERR_SYNTAX, 7));
    CHECK(c, parse_is(L("[,1]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[1,,2]"), HA_JSON_ERR_SYNTAX, 3));
    /* Single quotes. */
    CHECK(c, parse_is(L("['a']"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("{'a':1}"), HA_JSON_ERR_SYNTAX, 1));
    /* Comments. */
    CHECK(c, parse_is(L("[1/*x*/]"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[1]//x"), HA_JSON_ERR_TRAILING, 3));
    /* Leading zeros and '+'. */
    CHECK(c, parse_is(L("[01]"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("-01"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("00"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[+1]"), HA_JSON_ERR_SYNTAX, 1));
    /* Other malformed numbers. */
    CHECK(c, parse_is(L("1."), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[1.]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("[1.e1]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("[.5]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("1e"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[1e+]"), HA_JSON_ERR_SYNTAX, 4));
    CHECK(c, parse_is(L("[1eE2]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("-"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[- 1]"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[0x1]"), HA_JSON_ERR_SYNTAX, 2));
    /* NaN and Infinity. */
    CHECK(c, parse_is(L("[NaN]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("Infinity"), HA_JSON_ERR_SYNTAX, 0));
    CHECK(c, parse_is(L("[-Infinity]"), HA_JSON_ERR_SYNTAX, 2));
    /* Literals exactly. */
    CHECK(c, parse_is(L("[True]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[trUe]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("tru"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("[nul]"), HA_JSON_ERR_SYNTAX, 4));
    CHECK(c, parse_is(L("[fals"), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("[truex]"), HA_JSON_ERR_SYNTAX, 5));
    /* Raw control characters in strings. */
    CHECK(c, parse_is(L("[\"a\x01\"]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("\"a\nb\""), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"abcdefghijk\tb\""), HA_JSON_ERR_SYNTAX, 12));
    {
        const uint8_t nul[] = {'"', 'a', 0, '"'};
        CHECK(c, parse_is(nul, sizeof nul, HA_JSON_ERR_SYNTAX, 2));
    }
    /* Escapes. */
    CHECK(c, parse_is(L("\"\\x\""), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"\\'\""), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"\\U0041\""), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"\\u12G4\""), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("\"\\u00"), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("\"\\"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"\\\t\""), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("\"\\uD800\\u12\""), HA_JSON_ERR_SYNTAX, 11));
    CHECK(c, parse_is(L("\"\\uD800\\x\""), HA_JSON_ERR_SYNTAX, 8));
    /* BOM, and bytes >= 0x80 outside strings. */
    CHECK(c, parse_is(L("\xef\xbb\xbf{}"), HA_JSON_ERR_SYNTAX, 0));
    CHECK(c, parse_is(L("[\xc3\xa9]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[1]\xc2\xa0"), HA_JSON_ERR_TRAILING, 3));
    /* Only four whitespace bytes. */
    CHECK(c, parse_is(L("[\f]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[\v1]"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("\xc2\xa0[]"), HA_JSON_ERR_SYNTAX, 0));
    /* Structure. */
    CHECK(c, parse_is(L("{\"a\" 1}"), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("{\"a\"::1}"), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("{\"a\":}"), HA_JSON_ERR_SYNTAX, 5));
    CHECK(c, parse_is(L("{1:1}"), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("{\"a\",\"b\"}"), HA_JSON_ERR_SYNTAX, 4));
    CHECK(c, parse_is(L("[1 2]"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("[1:2]"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[1}"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("{\"a\":1]"), HA_JSON_ERR_SYNTAX, 6));
    CHECK(c, parse_is(L("]"), HA_JSON_ERR_SYNTAX, 0));
    CHECK(c, parse_is(L(","), HA_JSON_ERR_SYNTAX, 0));
    /* Ending too soon: err_offset is len. */
    CHECK(c, parse_is(L("["), HA_JSON_ERR_SYNTAX, 1));
    CHECK(c, parse_is(L("[1"), HA_JSON_ERR_SYNTAX, 2));
    CHECK(c, parse_is(L("[1,"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("{\"a\":1"), HA_JSON_ERR_SYNTAX, 6));
    CHECK(c, parse_is(L("{\"a\""), HA_JSON_ERR_SYNTAX, 4));
    CHECK(c, parse_is(L("{\"a"), HA_JSON_ERR_SYNTAX, 3));
    CHECK(c, parse_is(L("\"abc"), HA_JSON_ERR_SYNTAX, 4));
    CHECK(c, parse_is(L("[\"abcdefghijklmnopqrstuvwxyz"), HA_JSON_ERR_SYNTAX, 28));
}

static void test_empty_trailing(check_counts *c)
{
    CHECK(c, parse_is((const uint8_t *)"", 0, HA_JSON_ERR_EMPTY, 0));
    CHECK(c, parse_is(L(" \t\r\n"), HA_JSON_ERR_EMPTY, 4));
    CHECK(c, ha_json_parse(NULL, 0, 0, NULL, NULL, NULL) == HA_JSON_ERR_EMPTY);
    CHECK(c, parse_is(L("1 2"), HA_JSON_ERR_TRAILING, 2));
    CHECK(c, parse_is(L("{} x"), HA_JSON_ERR_TRAILING, 3));
    CHECK(c, parse_is(L("[1]]"), HA_JSON_ERR_TRAILING, 3));
    CHECK(c, parse_is(L("\"a\"\"b\""), HA_JSON_ERR_TRAILING, 3));
    CHECK(c, parse_is(L("truex"), HA_JSON_ERR_TRAILING, 4));
    CHECK(c, parse_is(L("{},"), HA_JSON_ERR_TRAILING, 2));
    CHECK(c, parse_is(L("1 \n"), HA_JSON_OK, 0));
}

/* "[[...]]" of the given depth into buf. */
static size_t nested(uint8_t *buf, size_t depth, int objects)
{
    size_t n = 0, i;
    for (i = 0; i < depth; i++) {
        if (objects && (i % 2)) {
            memcpy(buf + n, "{\"k\":", 5);
            n += 5;
        } else {
            buf[n++] = '[';
        }
    }
    if (objects && depth > 0 && ((depth - 1) % 2))
        buf[n++] = '0'; /* an object needs a value for its member */
    for (i = depth; i-- > 0;)
        buf[n++] = (objects && (i % 2)) ? '}' : ']';
    return n;
}

static void test_depth(check_counts *c)
{
    uint8_t buf[8 * (HA_JSON_DEPTH_LIMIT + 2)];
    ha_json_val r;
    size_t off, n;
    unsigned fl;

    /* A scalar is depth 0, "[]" depth 1. */
    CHECK(c, ha_json_parse(L("1"), 1, &r, &off, &fl) == HA_JSON_OK);
    CHECK(c, ha_json_parse(L("[]"), 1, &r, &off, &fl) == HA_JSON_OK);
    CHECK(c, ha_json_parse(L("[[]]"), 1, &r, &off, &fl) == HA_JSON_ERR_DEPTH && off == 1);
    CHECK(c, ha_json_parse(L("{\"a\":{}}"), 1, &r, &off, &fl) == HA_JSON_ERR_DEPTH && off == 5);
    CHECK(c, ha_json_parse(L("[[],[]]"), 2, &r, &off, &fl) == HA_JSON_OK);
    /* Exactly max_depth is fine, one more is ERR_DEPTH at that bracket. */
    n = nested(buf, 4, 0);
    CHECK(c, ha_json_parse(buf, n, 4, &r, &off, &fl) == HA_JSON_OK);
    n = nested(buf, 5, 0);
    CHECK(c, ha_json_parse(buf, n, 4, &r, &off, &fl) == HA_JSON_ERR_DEPTH && off == 4);
    /* 0 means the default, HA_JSON_MAX_DEPTH. */
    n = nested(buf, HA_JSON_MAX_DEPTH, 0);
    CHECK(c, ha_json_parse(buf, n, 0, &r, &off, &fl) == HA_JSON_OK);
    CHECK(c, span_is(r, 0, n, HA_JSON_ARRAY));
    n = nested(buf, HA_JSON_MAX_DEPTH + 1, 0);
    CHECK(c, ha_json_parse(buf, n, 0, &r, &off, &fl) == HA_JSON_ERR_DEPTH &&
                 off == HA_JSON_MAX_DEPTH);
    /* Mixed kinds across the stack's 64-bit words, up to the ceiling. */
    n = nested(buf, HA_JSON_DEPTH_LIMIT, 1);
    CHECK(c, ha_json_parse(buf, n, HA_JSON_DEPTH_LIMIT, &r, &off, &fl) == HA_JSON_OK);
    CHECK(c, ha_json_parse(buf, n, HA_JSON_DEPTH_LIMIT - 1, &r, &off, &fl) ==
                 HA_JSON_ERR_DEPTH);
    /* Above the ceiling max_depth is clamped. */
    CHECK(c, ha_json_parse(buf, n, 100000, &r, &off, &fl) == HA_JSON_OK);
    n = nested(buf, HA_JSON_DEPTH_LIMIT + 1, 1);
    CHECK(c, ha_json_parse(buf, n, 100000, &r, &off, &fl) == HA_JSON_ERR_DEPTH);
    /* The stack really tracks kinds: a wrong closer deep down fails. */
    n = nested(buf, 200, 1);
    buf[n - 100] = buf[n - 100] == ']' ? '}' : ']';
    CHECK(c, ha_json_parse(buf, n, 300, &r, &off, &fl) == HA_JSON_ERR_SYNTAX &&
                 off == n - 100);
    CHECK(c, parse_is(L("[{\"a\":[1]},{\"b\":[{}]}]"), HA_JSON_OK, 0));
    CHECK(c, parse_is(L("[{\"a\":[1}]"), HA_JSON_ERR_SYNTAX, 8));
}

static void test_flags(check_counts *c)
{
    ha_json_val r;
    size_t off;
    unsigned fl;

    CHECK(c, ha_json_parse(L("[\"\\uD83D\\uDE00\xf0\x9f\x98\x80\"]"), 0, &r, &off, &fl) ==
                     HA_JSON_OK && fl == 0);
    CHECK(c, ha_json_parse(L("[\"\xff\"]"), 0, &r, &off, &fl) == HA_JSON_OK &&
                 fl == HA_JSON_FLAG_BAD_UTF8);
    CHECK(c, ha_json_parse(L("{\"\xc0\xaf\":1}"), 0, &r, &off, &fl) == HA_JSON_OK &&
                 fl == HA_JSON_FLAG_BAD_UTF8); /* keys count */
    CHECK(c, ha_json_parse(L("{\"\\uDC00\":1}"), 0, &r, &off, &fl) == HA_JSON_OK &&
                 fl == (HA_JSON_FLAG_LONE_SURROGATE | HA_JSON_FLAG_KEY_ESCAPE));
    CHECK(c, ha_json_parse(L("{\"a\":\"\\n\",\"b\\n\":1}"), 0, &r, &off, &fl) == HA_JSON_OK &&
                 fl == HA_JSON_FLAG_KEY_ESCAPE); /* an escaped key, not an escaped value */
    CHECK(c, ha_json_parse(L("{\"a\":\"\\n\"}"), 0, &r, &off, &fl) == HA_JSON_OK && fl == 0);
    CHECK(c, ha_json_parse(L("[\"\\uD800\",\"\xed\xa0\x80\"]"), 0, &r, &off, &fl) ==
                     HA_JSON_OK &&
                 fl == (HA_JSON_FLAG_LONE_SURROGATE | HA_JSON_FLAG_BAD_UTF8));
    /* Truncated UTF-8 right before the closing quote. */
    CHECK(c, ha_json_parse(L("\"\xe4\xbd\""), 0, &r, &off, &fl) == HA_JSON_OK &&
                 fl == HA_JSON_FLAG_BAD_UTF8 && span_is(r, 0, 4, HA_JSON_STRING));
}

/* Every byte value at every place of a string body two words long: the
 * word-at-a-time scan must stop exactly where a byte loop would. */
static void test_string_bytes(check_counts *c)
{
    enum { BODY = 16 };
    uint8_t doc[BODY + 2];
    unsigned wrong = 0;
    for (unsigned b = 0; b < 256; b++) {
        for (size_t k = 0; k < BODY; k++) {
            ha_json_val r;
            size_t off = 0;
            unsigned fl = 0;
            ha_json_status st, want = HA_JSON_OK;
            size_t want_off = 0;
            unsigned want_fl = 0;
            memset(doc, 'a', sizeof doc);
            doc[0] = doc[BODY + 1] = '"';
            doc[1 + k] = (uint8_t)b;
            st = ha_json_parse(doc, sizeof doc, 0, &r, &off, &fl);
            if (b < 0x20u) {
                want = HA_JSON_ERR_SYNTAX;
                want_off = 1 + k;
            } else if (b == '"') {
                want = HA_JSON_ERR_TRAILING;
                want_off = 2 + k;
            } else if (b == '\\') { /* \a, or \" leaving the string open */
                want = HA_JSON_ERR_SYNTAX;
                want_off = k + 1 < BODY ? 2 + k : sizeof doc;
            } else if (b >= 0x80u) {
                want_fl = HA_JSON_FLAG_BAD_UTF8; /* alone, never well-formed */
            }
            if (st != want || (st != HA_JSON_OK && off != want_off) ||
                (st == HA_JSON_OK && fl != want_fl)) {
                if (!wrong)
                    fprintf(stderr, "byte 0x%02x at %zu: status %d offset %zu flags %u\n", b, k,
                            (int)st, off, fl);
                wrong++;
            }
        }
    }
    CHECK(c, wrong == 0);
}

/* ---- spans ------------------------------------------------------------- */

static void test_iterate(check_counts *c)
{
    const uint8_t *d = (const uint8_t *)
        "{ \"a\" : 1 , \"b\":[true, false] ,\"c\":{\"d\":null}, \"e\":\"x\\\"y\" }";
    size_t len = strlen((const char *)d);
    ha_json_val r = root_of(d, len), k, v, e;
    ha_json_iter it, sub;
    int n = 0;

    CHECK(c, r.kind == HA_JSON_OBJECT);
    ha_json_iter_init(&it, d, r);
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 1);
    CHECK(c, span_is(k, 2, 5, HA_JSON_STRING) && span_is(v, 8, 9, HA_JSON_NUMBER));
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 1);
    CHECK(c, span_is(k, 12, 15, HA_JSON_STRING) && span_is(v, 16, 29, HA_JSON_ARRAY));
    ha_json_iter_init(&sub, d, v);
    CHECK(c, ha_json_arr_next(&sub, &e) == 1 && span_is(e, 17, 21, HA_JSON_TRUE));
    CHECK(c, ha_json_arr_next(&sub, &e) == 1 && span_is(e, 23, 28, HA_JSON_FALSE));
    CHECK(c, ha_json_arr_next(&sub, &e) == 0 && e.kind == HA_JSON_ABSENT);
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 1);
    CHECK(c, span_is(k, 31, 34, HA_JSON_STRING) && span_is(v, 35, 45, HA_JSON_OBJECT));
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 1);
    CHECK(c, span_is(k, 47, 50, HA_JSON_STRING) && span_is(v, 51, 57, HA_JSON_STRING));
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 0);
    CHECK(c, k.kind == HA_JSON_ABSENT && v.kind == HA_JSON_ABSENT);
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 0); /* stays at the end */

    /* Array order, kinds and spans. */
    d = (const uint8_t *)"[ 1, \"two\" ,[3,[]], {\"4\":\"]\"}, null, -5.5e1 ]";
    len = strlen((const char *)d);
    r = root_of(d, len);
    ha_json_iter_init(&it, d, r);
    {
        static const size_t starts[] = {2, 5, 12, 20, 31, 37};
        static const size_t ends[] = {3, 10, 18, 29, 35, 43};
        static const ha_json_kind kinds[] = {HA_JSON_NUMBER, HA_JSON_STRING, HA_JSON_ARRAY,
                                             HA_JSON_OBJECT, HA_JSON_NULL, HA_JSON_NUMBER};
        while (ha_json_arr_next(&it, &e)) {
            CHECK(c, n < 6 && span_is(e, starts[n], ends[n], kinds[n]));
            n++;
        }
        CHECK(c, n == 6);
    }
    /* Empty containers and scalars have nothing to iterate. */
    r = root_of(L("[ ]"));
    ha_json_iter_init(&it, (const uint8_t *)"[ ]", r);
    CHECK(c, ha_json_arr_next(&it, &e) == 0);
    r = root_of(L("{}"));
    ha_json_iter_init(&it, (const uint8_t *)"{}", r);
    CHECK(c, ha_json_obj_next(&it, &k, &v) == 0);
    r = root_of(L("\"[1]\""));
    ha_json_iter_init(&it, (const uint8_t *)"\"[1]\"", r);
    CHECK(c, ha_json_arr_next(&it, &e) == 0);
}

static void test_lookup(check_counts *c)
{
    const uint8_t *d = (const uint8_t *)
        "{\"n\":null,\"a\":1,\"a\":2,\"\\u0074ype\":\"x\",\"type\":\"y\",\"t\\/p\":3,"
        "\"\\u00e9t\\u00C9\":4,\"\xff\":5,\"o\":{\"a\":6},\"\":7,\"\xf0\x9f\x98\x80\":8}";
    size_t len = strlen((const char *)d);
    ha_json_val r = root_of(d, len), v;
    int64_t i = 0;

    CHECK(c, r.kind == HA_JSON_OBJECT);
    /* null is present, a missing key is absent. */
    v = ha_json_obj_get(d, r, L("n"));
    CHECK(c, v.kind == HA_JSON_NULL && v.start == 5);
    v = ha_json_obj_get(d, r, L("missing"));
    CHECK(c, span_is(v, 0, 0, HA_JSON_ABSENT));
    CHECK(c, ha_json_obj_get(d, r, L("N")).kind == HA_JSON_ABSENT);
    CHECK(c, ha_json_obj_get(d, r, L("ty")).kind == HA_JSON_ABSENT);
    CHECK(c, ha_json_obj_get(d, r, L("types")).kind == HA_JSON_ABSENT);
    /* Duplicates: the last wins. */
    v = ha_json_obj_get(d, r, L("a"));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 2);
    /* Keys compare decoded. */
    v = ha_json_obj_get(d, r, L("type"));
    CHECK(c, v.kind == HA_JSON_STRING && d[v.start + 1] == 'y');
    v = ha_json_obj_get(d, r, L("t/p"));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 3);
    v = ha_json_obj_get(d, r, L("\xc3\xa9t\xc3\x89"));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 4);
    /* A bad byte decodes to U+FFFD, so it matches that and not itself. */
    CHECK(c, ha_json_obj_get(d, r, L("\xff")).kind == HA_JSON_ABSENT);
    v = ha_json_obj_get(d, r, L(R));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 5);
    v = ha_json_obj_get(d, r, (const uint8_t *)"", 0);
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 7);
    v = ha_json_obj_get(d, r, L("\xf0\x9f\x98\x80"));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 8);
    /* Lookup does not descend. */
    v = ha_json_obj_get(d, r, L("o"));
    CHECK(c, v.kind == HA_JSON_OBJECT);
    v = ha_json_obj_get(d, v, L("a"));
    CHECK(c, ha_json_get_i64(d, v, &i) == HA_JSON_OK && i == 6);
    /* Not an object. */
    CHECK(c, ha_json_obj_get(d, v, L("a")).kind == HA_JSON_ABSENT);

    /* key_eq on its own. */
    {
        const uint8_t *k = (const uint8_t *)"\"\\u0074ype\\n\"";
        ha_json_val ks = {0, 13, HA_JSON_STRING, HA_JSON_NO_TAPE};
        ha_json_val kn = {0, 13, HA_JSON_NUMBER, HA_JSON_NO_TAPE};
        CHECK(c, ha_json_key_eq(k, ks, L("type\n")) == 1);
        CHECK(c, ha_json_key_eq(k, ks, L("type")) == 0);
        CHECK(c, ha_json_key_eq(k, ks, L("type\nx")) == 0);
        CHECK(c, ha_json_key_eq(k, ks, L("Type\n")) == 0);
        CHECK(c, ha_json_key_eq(k, kn, L("type\n")) == 0);
    }
}

/* ---- strings ----------------------------------------------------------- */

static void test_decode(check_counts *c)
{
    /* Every escape. */
    CHECK(c, decodes_to(L("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\""), L("\"\\/\b\f\n\r\t"), 0));
    CHECK(c, decodes_to(L("\"\\u0041\\u00e9\\u00E9\\u20AC\\uffff\""),
                        L("A\xc3\xa9\xc3\xa9\xe2\x82\xac\xef\xbf\xbf"), 0));
    {
        const uint8_t nul[] = {'a', 0, 'b'};
        CHECK(c, decodes_to(L("\"a\\u0000b\""), nul, sizeof nul, 0));
    }
    CHECK(c, decodes_to(L("\"\""), (const uint8_t *)"", 0, 0));
    CHECK(c, decodes_to(L("\"plain ascii that is longer than a word\""),
                        L("plain ascii that is longer than a word"), 0));
    CHECK(c, decodes_to(L("\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!\""),
                        L("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!"), 0));
    /* Surrogate pairs, either hex case. */
    CHECK(c, decodes_to(L("\"\\uD83D\\uDE00\""), L("\xf0\x9f\x98\x80"), 0));
    CHECK(c, decodes_to(L("\"\\ud83d\\ude00x\""), L("\xf0\x9f\x98\x80x"), 0));
    CHECK(c, decodes_to(L("\"\\uDBFF\\uDFFF\""), L("\xf4\x8f\xbf\xbf"), 0));
    CHECK(c, decodes_to(L("\"\\uD800\\uDC00\""), L("\xf0\x90\x80\x80"), 0));
    /* Lone surrogates. */
    CHECK(c, decodes_to(L("\"\\uD800\""), L(R), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uDC00\""), L(R), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uD800x\""), L(R "x"), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uD800\\uD800\""), L(R R), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uDd1e\\uD834\""), L(R R), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uD800\\n\""), L(R "\n"), HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uD888\\u1234\""), L(R "\xe1\x88\xb4"),
                        HA_JSON_FLAG_LONE_SURROGATE));
    CHECK(c, decodes_to(L("\"\\uD800\\uD800\\uDC00\""), L(R "\xf0\x90\x80\x80"),
                        HA_JSON_FLAG_LONE_SURROGATE));
    /* A high surrogate cannot pair with an encoded (raw) low one. */
    CHECK(c, decodes_to(L("\"\\uD800\xed\xb0\x80\""), L(R R R R),
                        HA_JSON_FLAG_LONE_SURROGATE | HA_JSON_FLAG_BAD_UTF8));
    /* Python's bytes.decode("utf-8", "replace"): one U+FFFD per maximal
     * invalid subpart. Expectations written from Python 3. */
    CHECK(c, decodes_to(L("\"\xe0\x80\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xf4\x90\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xed\xa0\x80\""), L(R R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xc0\xaf\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xc1\xbf\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xf5\xff\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xe4\xbd" "A\""), L(R "A"), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xe4\xbd\""), L(R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\x80\x80\""), L(R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xf0\x90\x80" "A\""), L(R "A"), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xf4\xbf\xbf\xbf\""), L(R R R R), HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xfc\x83\xbf\xbf\xbf\xbf\""), L(R R R R R R),
                        HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"a\xf1\x80\x80\xe1\x80\xc2" "b\""), L("a" R R R "b"),
                        HA_JSON_FLAG_BAD_UTF8));
    CHECK(c, decodes_to(L("\"\xe6\x97\xa5\xd1\x88\xfa\""), L("\xe6\x97\xa5\xd1\x88" R),
                        HA_JSON_FLAG_BAD_UTF8));
    /* U+FFFD itself is valid input. */
    CHECK(c, decodes_to(L("\"" R "\""), L(R), 0));
    /* Escapes and bad bytes together. */
    CHECK(c, decodes_to(L("\"\\n\xff\\uD800\\t\""), L("\n" R R "\t"),
                        HA_JSON_FLAG_BAD_UTF8 | HA_JSON_FLAG_LONE_SURROGATE));
}

static void test_space_type(check_counts *c)
{
    const uint8_t *d = (const uint8_t *)"[\"ab\\u00e9\", \"\xff\xff\", 1]";
    size_t len = strlen((const char *)d), n = 99;
    ha_json_val r = root_of(d, len), s1, s2, num;
    ha_json_iter it;
    uint8_t out[16];
    unsigned fl = 0;

    ha_json_iter_init(&it, d, r);
    CHECK(c, ha_json_arr_next(&it, &s1) == 1);
    CHECK(c, ha_json_arr_next(&it, &s2) == 1);
    CHECK(c, ha_json_arr_next(&it, &num) == 1);
    /* 3 x (bytes between the quotes) always fits. */
    CHECK(c, ha_json_str_max(s1) == 24);
    CHECK(c, ha_json_str_max(s2) == 6);
    CHECK(c, ha_json_str_max(num) == 0);
    /* Exactly enough room, then one byte short. */
    CHECK(c, ha_json_str_decode(d, s1, out, 4, &n, &fl) == HA_JSON_OK && n == 4 &&
                 memcmp(out, "ab\xc3\xa9", 4) == 0);
    CHECK(c, ha_json_str_decode(d, s1, out, 3, &n, &fl) == HA_JSON_ERR_SPACE && n == 0);
    CHECK(c, ha_json_str_decode(d, s1, out, 1, &n, &fl) == HA_JSON_ERR_SPACE && n == 0);
    CHECK(c, ha_json_str_decode(d, s2, out, ha_json_str_max(s2), &n, &fl) == HA_JSON_OK &&
                 n == 6 && memcmp(out, R R, 6) == 0);
    CHECK(c, ha_json_str_decode(d, s2, out, 5, &n, &fl) == HA_JSON_ERR_SPACE);
    CHECK(c, ha_json_str_decode(d, s2, NULL, 0, &n, &fl) == HA_JSON_ERR_SPACE);
    /* Not a string. */
    CHECK(c, ha_json_str_decode(d, num, out, sizeof out, &n, &fl) == HA_JSON_ERR_TYPE);
    CHECK(c, ha_json_str_decode(d, r, out, sizeof out, &n, &fl) == HA_JSON_ERR_TYPE);
    /* flags may be NULL. */
    CHECK(c, ha_json_str_decode(d, s2, out, sizeof out, &n, NULL) == HA_JSON_OK);
}

static void test_sanitize(check_counts *c)
{
    uint8_t out[8];
    unsigned fl = 0;

    CHECK(c, ha_utf8_sanitize((const uint8_t *)"", 0, out, &fl) == 0 && fl == 0);
    CHECK(c, sanitizes_to(L("plain \\u0041 \"stays\""), L("plain \\u0041 \"stays\"")));
    CHECK(c, sanitizes_to(L("\xc3\xa9\xf0\x9f\x98\x80"), L("\xc3\xa9\xf0\x9f\x98\x80")));
    CHECK(c, sanitizes_to(L("\xe0\x80"), L(R R)));
    CHECK(c, sanitizes_to(L("\xf4\x90"), L(R R)));
    CHECK(c, sanitizes_to(L("\xed\xa0\x80"), L(R R R)));
    CHECK(c, sanitizes_to(L("\xc0\xaf"), L(R R)));
    CHECK(c, sanitizes_to(L("\xf5"), L(R)));
    CHECK(c, sanitizes_to(L("\xff"), L(R)));
    CHECK(c, sanitizes_to(L("\xe4\xbd" "A"), L(R "A")));
    CHECK(c, sanitizes_to(L("\xe4\xbd"), L(R)));
    CHECK(c, sanitizes_to(L("\xe0\xa0"), L(R)));
    CHECK(c, sanitizes_to(L("\xc2"), L(R)));
    CHECK(c, sanitizes_to(L("\xe0\xff"), L(R R)));
    CHECK(c, sanitizes_to(L("a\xf1\x80\x80\xe1\x80\xc2" "b"), L("a" R R R "b")));
    CHECK(c, sanitizes_to(L("\xfc\x83\xbf\xbf\xbf\xbf"), L(R R R R R R)));
    /* NUL bytes are valid UTF-8 and kept. */
    {
        const uint8_t nul[] = {0, 'a', 0};
        CHECK(c, sanitizes_to(nul, sizeof nul, nul, sizeof nul));
    }
    /* Worst case is exactly 3n; flags may be NULL. */
    CHECK(c, ha_utf8_sanitize(L("\x80\x80"), out, NULL) == 6);
}

/* ---- numbers ----------------------------------------------------------- */

static void test_i64(check_counts *c)
{
    int64_t i = 7;
    CHECK(c, i64_of(L("0"), &i) == HA_JSON_OK && i == 0);
    CHECK(c, i64_of(L("-0"), &i) == HA_JSON_OK && i == 0);
    CHECK(c, i64_of(L("42"), &i) == HA_JSON_OK && i == 42);
    CHECK(c, i64_of(L("-42"), &i) == HA_JSON_OK && i == -42);
    CHECK(c, i64_of(L("9223372036854775807"), &i) == HA_JSON_OK && i == INT64_MAX);
    CHECK(c, i64_of(L("-9223372036854775808"), &i) == HA_JSON_OK && i == INT64_MIN);
    i = 7;
    CHECK(c, i64_of(L("9223372036854775808"), &i) == HA_JSON_ERR_RANGE && i == 7);
    CHECK(c, i64_of(L("-9223372036854775809"), &i) == HA_JSON_ERR_RANGE);
    CHECK(c, i64_of(L("18446744073709551616"), &i) == HA_JSON_ERR_RANGE);
    CHECK(c, i64_of(L("100000000000000000000000000000"), &i) == HA_JSON_ERR_RANGE);
    /* Integer grammar only. */
    CHECK(c, i64_of(L("1.0"), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("1e2"), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("-1E0"), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("1e999"), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("\"1\""), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("true"), &i) == HA_JSON_ERR_TYPE);
    CHECK(c, i64_of(L("null"), &i) == HA_JSON_ERR_TYPE);
}

static int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0; /* bitwise: tells -0.0 from 0.0 */
}

/* "<digits><zeros><tail>e-<exp>" built in buf, for numbers past any
 * fixed buffer. */
static size_t long_number(char *buf, const char *head, size_t zeros, const char *tail,
                          const char *exp)
{
    size_t n = 0;
    n += (size_t)sprintf(buf + n, "%s", head);
    memset(buf + n, '0', zeros);
    n += zeros;
    n += (size_t)sprintf(buf + n, "%s%s", tail, exp);
    return n;
}

static void test_f64(check_counts *c)
{
    char buf[8192];
    double x = 7.0;
    size_t n;

    CHECK(c, f64_of(L("1.5e3"), &x) == HA_JSON_OK && x == 1500.0);
    CHECK(c, f64_of(L("0"), &x) == HA_JSON_OK && same_double(x, 0.0));
    CHECK(c, f64_of(L("-0.0"), &x) == HA_JSON_OK && same_double(x, -0.0));
    CHECK(c, f64_of(L("-0"), &x) == HA_JSON_OK && same_double(x, -0.0));
    CHECK(c, f64_of(L("42"), &x) == HA_JSON_OK && x == 42.0);
    CHECK(c, f64_of(L("0.1"), &x) == HA_JSON_OK && x == 0.1);
    CHECK(c, f64_of(L("-123.456e-7"), &x) == HA_JSON_OK && x == -123.456e-7);
    CHECK(c, f64_of(L("0.000001E+6"), &x) == HA_JSON_OK && x == 1.0);
    CHECK(c, f64_of(L("1.7976931348623157e308"), &x) == HA_JSON_OK && x == 1.7976931348623157e308);
    CHECK(c, f64_of(L("2.2250738585072011e-308"), &x) == HA_JSON_OK &&
                 x == 2.2250738585072011e-308);
    CHECK(c, f64_of(L("5e-324"), &x) == HA_JSON_OK && x == 5e-324 && x > 0.0);
    CHECK(c, f64_of(L("9007199254740993"), &x) == HA_JSON_OK && x == 9007199254740992.0);
    /* Overflow is RANGE, and leaves *out alone. */
    x = 7.0;
    CHECK(c, f64_of(L("1e400"), &x) == HA_JSON_ERR_RANGE && x == 7.0);
    CHECK(c, f64_of(L("-1e400"), &x) == HA_JSON_ERR_RANGE);
    CHECK(c, f64_of(L("1.7976931348623159e308"), &x) == HA_JSON_ERR_RANGE);
    CHECK(c, f64_of(L("1e99999999999999999999"), &x) == HA_JSON_ERR_RANGE);
    /* Underflow rounds to (signed) zero and is fine. */
    CHECK(c, f64_of(L("1e-400"), &x) == HA_JSON_OK && same_double(x, 0.0));
    CHECK(c, f64_of(L("-1e-400"), &x) == HA_JSON_OK && same_double(x, -0.0));
    CHECK(c, f64_of(L("2e-324"), &x) == HA_JSON_OK && same_double(x, 0.0));
    CHECK(c, f64_of(L("1e-99999999999999999999"), &x) == HA_JSON_OK && same_double(x, 0.0));
    CHECK(c, f64_of(L("0e99999999999999999999"), &x) == HA_JSON_OK && same_double(x, 0.0));
    /* Numbers longer than any fixed buffer are still correctly rounded:
     * 2^53 + 1 is a tie (to even: down), a nonzero digit 900 places later
     * breaks it upwards. */
    n = long_number(buf, "9007199254740993", 900, "", "e-900");
    CHECK(c, f64_of((const uint8_t *)buf, n, &x) == HA_JSON_OK && x == 9007199254740992.0);
    n = long_number(buf, "9007199254740993", 900, "1", "e-901");
    CHECK(c, f64_of((const uint8_t *)buf, n, &x) == HA_JSON_OK && x == 9007199254740994.0);
    n = long_number(buf, "0.", 2000, "15", "e2001");
    CHECK(c, f64_of((const uint8_t *)buf, n, &x) == HA_JSON_OK && x == 1.5);
    n = long_number(buf, "1", 2000, "", "e-2000");
    CHECK(c, f64_of((const uint8_t *)buf, n, &x) == HA_JSON_OK && x == 1.0);
    n = long_number(buf, "1", 400, "", "");
    CHECK(c, f64_of((const uint8_t *)buf, n, &x) == HA_JSON_ERR_RANGE);
    /* Not numbers. */
    CHECK(c, f64_of(L("\"1.5\""), &x) == HA_JSON_ERR_TYPE);
    CHECK(c, f64_of(L("null"), &x) == HA_JSON_ERR_TYPE);
}

static void test_bool(check_counts *c)
{
    int b = 7;
    CHECK(c, ha_json_get_bool(root_of(L("true")), &b) == HA_JSON_OK && b == 1);
    CHECK(c, ha_json_get_bool(root_of(L("false")), &b) == HA_JSON_OK && b == 0);
    b = 7;
    CHECK(c, ha_json_get_bool(root_of(L("null")), &b) == HA_JSON_ERR_TYPE && b == 7);
    CHECK(c, ha_json_get_bool(root_of(L("1")), &b) == HA_JSON_ERR_TYPE);
    CHECK(c, ha_json_get_bool(root_of(L("\"true\"")), &b) == HA_JSON_ERR_TYPE);
    {
        ha_json_val none = {0, 0, HA_JSON_ABSENT, HA_JSON_NO_TAPE};
        CHECK(c, ha_json_get_bool(none, &b) == HA_JSON_ERR_TYPE);
    }
}

/* Misuse on spans that were never accepted must stay in bounds (the
 * copies are exactly sized for the sanitizer) and just stop. */
static void test_misuse(check_counts *c)
{
    static const char *garbage[] = {"[", "{\"a", "{\"a\":", "[\"\\", "[1,", "{\"a\" 1}",
                                    "[}", "{1:2}", "[\"a\\\"]", "{\"\\u12\":1}"};
    size_t i;
    for (i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        size_t len = strlen(garbage[i]), n = 0;
        uint8_t *d = malloc(len), out[64];
        ha_json_val obj = {0, len, HA_JSON_OBJECT, HA_JSON_NO_TAPE}, arr = {0, len, HA_JSON_ARRAY, HA_JSON_NO_TAPE}, k, v;
        ha_json_iter it;
        unsigned steps = 0;
        if (!d)
            abort();
        memcpy(d, garbage[i], len);
        ha_json_iter_init(&it, d, obj);
        while (ha_json_obj_next(&it, &k, &v) && steps < 100) {
            CHECK(c, k.end <= len && v.end <= len);
            if (ha_json_str_max(k) <= sizeof out)
                (void)ha_json_str_decode(d, k, out, sizeof out, &n, NULL);
            steps++;
        }
        ha_json_iter_init(&it, d, arr);
        while (ha_json_arr_next(&it, &v) && steps < 200) {
            CHECK(c, v.end <= len);
            steps++;
        }
        (void)ha_json_obj_get(d, obj, L("a"));
        CHECK(c, steps < 100);
        free(d);
    }
}

/* ---- JSONTestSuite ----------------------------------------------------- */

enum { X_NONE, X_I64, X_F64, X_STR };

typedef struct {
    const char *name;
    ha_json_status parse;
    unsigned flags;      /* from the parse */
    int extract;         /* what to extract from the first element/member */
    ha_json_status xst;  /* its status */
    double f;            /* X_F64: the value when xst is OK */
    const char *str;     /* X_STR: the decoded bytes (key for objects) */
} i_case;

/* Each i_ file's outcome under the rules in json.h. */
static const i_case i_cases[] = {
    {"i_number_double_huge_neg_exp.json", HA_JSON_OK, 0, X_F64, HA_JSON_OK, 0.0, NULL},
    {"i_number_huge_exp.json", HA_JSON_OK, 0, X_F64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_neg_int_huge_exp.json", HA_JSON_OK, 0, X_F64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_pos_double_huge_exp.json", HA_JSON_OK, 0, X_F64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_real_neg_overflow.json", HA_JSON_OK, 0, X_F64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_real_pos_overflow.json", HA_JSON_OK, 0, X_F64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_real_underflow.json", HA_JSON_OK, 0, X_F64, HA_JSON_OK, 0.0, NULL},
    {"i_number_too_big_neg_int.json", HA_JSON_OK, 0, X_I64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_too_big_pos_int.json", HA_JSON_OK, 0, X_I64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_number_very_big_negative_int.json", HA_JSON_OK, 0, X_I64, HA_JSON_ERR_RANGE, 0, NULL},
    {"i_object_key_lone_2nd_surrogate.json", HA_JSON_OK,
     HA_JSON_FLAG_LONE_SURROGATE | HA_JSON_FLAG_KEY_ESCAPE, X_STR,
     HA_JSON_OK, 0, R},
    {"i_string_1st_surrogate_but_2nd_missing.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE,
     X_STR, HA_JSON_OK, 0, R},
    {"i_string_1st_valid_surrogate_2nd_invalid.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE,
     X_STR, HA_JSON_OK, 0, R "\xe1\x88\xb4"},
    {"i_string_UTF-16LE_with_BOM.json", HA_JSON_ERR_SYNTAX, 0, X_NONE, HA_JSON_OK, 0, NULL},
    {"i_string_UTF-8_invalid_sequence.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, "\xe6\x97\xa5\xd1\x88" R},
    {"i_string_UTF8_surrogate_U+D800.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, R R R},
    {"i_string_incomplete_surrogate_and_escape_valid.json", HA_JSON_OK,
     HA_JSON_FLAG_LONE_SURROGATE, X_STR, HA_JSON_OK, 0, R "\n"},
    {"i_string_incomplete_surrogate_pair.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE, X_STR,
     HA_JSON_OK, 0, R "a"},
    {"i_string_incomplete_surrogates_escape_valid.json", HA_JSON_OK,
     HA_JSON_FLAG_LONE_SURROGATE, X_STR, HA_JSON_OK, 0, R R "\n"},
    {"i_string_invalid_lonely_surrogate.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE, X_STR,
     HA_JSON_OK, 0, R},
    {"i_string_invalid_surrogate.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE, X_STR,
     HA_JSON_OK, 0, R "abc"},
    {"i_string_invalid_utf-8.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR, HA_JSON_OK, 0, R},
    {"i_string_inverted_surrogates_U+1D11E.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE,
     X_STR, HA_JSON_OK, 0, R R},
    {"i_string_iso_latin_1.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR, HA_JSON_OK, 0, R},
    {"i_string_lone_second_surrogate.json", HA_JSON_OK, HA_JSON_FLAG_LONE_SURROGATE, X_STR,
     HA_JSON_OK, 0, R},
    {"i_string_lone_utf8_continuation_byte.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, R},
    {"i_string_not_in_unicode_range.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR, HA_JSON_OK,
     0, R R R R},
    {"i_string_overlong_sequence_2_bytes.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, R R},
    {"i_string_overlong_sequence_6_bytes.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, R R R R R R},
    {"i_string_overlong_sequence_6_bytes_null.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR,
     HA_JSON_OK, 0, R R R R R R},
    {"i_string_truncated-utf-8.json", HA_JSON_OK, HA_JSON_FLAG_BAD_UTF8, X_STR, HA_JSON_OK, 0,
     R R},
    {"i_string_utf16BE_no_BOM.json", HA_JSON_ERR_SYNTAX, 0, X_NONE, HA_JSON_OK, 0, NULL},
    {"i_string_utf16LE_no_BOM.json", HA_JSON_ERR_SYNTAX, 0, X_NONE, HA_JSON_OK, 0, NULL},
    {"i_structure_500_nested_arrays.json", HA_JSON_ERR_DEPTH, 0, X_NONE, HA_JSON_OK, 0, NULL},
    {"i_structure_UTF-8_BOM_empty_object.json", HA_JSON_ERR_SYNTAX, 0, X_NONE, HA_JSON_OK, 0,
     NULL},
};
#define I_CASES (sizeof i_cases / sizeof i_cases[0])

static int check_i_file(const i_case *t, const uint8_t *d, size_t len)
{
    ha_json_val r, k, v;
    ha_json_iter it;
    size_t off, n = 0;
    unsigned fl = 0, dfl = 0;
    uint8_t out[DECODE_BUF];
    ha_json_status st = ha_json_parse(d, len, HA_JSON_MAX_DEPTH, &r, &off, &fl);

    if (st != t->parse)
        return 0;
    if (st != HA_JSON_OK)
        return 1;
    if (fl != t->flags)
        return 0;
    ha_json_iter_init(&it, d, r);
    if (r.kind == HA_JSON_OBJECT) {
        if (!ha_json_obj_next(&it, &k, &v))
            return 0;
        v = k; /* the interesting part of the object case is its key */
    } else if (!ha_json_arr_next(&it, &v)) {
        return 0;
    }
    switch (t->extract) {
    case X_I64: {
        int64_t i;
        double f;
        /* Too big for int64, but still a fine double. */
        return ha_json_get_i64(d, v, &i) == t->xst && ha_json_get_f64(d, v, &f) == HA_JSON_OK;
    }
    case X_F64: {
        double f = -1.0;
        st = ha_json_get_f64(d, v, &f);
        return st == t->xst && (st != HA_JSON_OK || same_double(f, t->f));
    }
    case X_STR:
        if (ha_json_str_decode(d, v, out, ha_json_str_max(v), &n, &dfl) != t->xst)
            return 0;
        /* KEY_ESCAPE is a property of the document, not of one string */
        return dfl == (t->flags & ~HA_JSON_FLAG_KEY_ESCAPE) && n == strlen(t->str) &&
               memcmp(out, t->str, n) == 0;
    default:
        return 1;
    }
}

static void run_suite(check_counts *c, const char *dir)
{
    char path[4096];
    unsigned seen_i[I_CASES] = {0};
    unsigned ny = 0, nn = 0, ni = 0;
    size_t i;
    struct dirent *e;
    DIR *dp = opendir(dir);
    uint8_t *file = malloc(SUITE_FILE_MAX);

    if (!file)
        abort();
    CHECK(c, dp != NULL);
    if (!dp) {
        free(file);
        return;
    }
    while ((e = readdir(dp)) != NULL) {
        const char *name = e->d_name;
        FILE *f;
        size_t len;
        ha_json_val r;
        size_t off;
        unsigned fl;
        ha_json_status st;

        if (strlen(name) < 3 || name[1] != '_' ||
            (name[0] != 'y' && name[0] != 'n' && name[0] != 'i'))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
            CHECK(c, 0 /* path too long */);
            continue;
        }
        f = fopen(path, "rb");
        CHECK(c, f != NULL);
        if (!f)
            continue;
        len = fread(file, 1, SUITE_FILE_MAX, f);
        CHECK(c, !ferror(f) && len < SUITE_FILE_MAX);
        fclose(f);
        st = parse_copy(file, len, HA_JSON_MAX_DEPTH, &r, &off, &fl);
        if (name[0] == 'y') {
            ny++;
            if (st != HA_JSON_OK)
                fprintf(stderr, "  %s: rejected (%d at %zu)\n", name, (int)st, off);
            CHECK(c, st == HA_JSON_OK);
        } else if (name[0] == 'n') {
            nn++;
            if (st == HA_JSON_OK)
                fprintf(stderr, "  %s: accepted\n", name);
            CHECK(c, st != HA_JSON_OK);
        } else {
            int found = 0, ok;
            ni++;
            for (i = 0; i < I_CASES; i++) {
                if (strcmp(i_cases[i].name, name) == 0) {
                    found = 1;
                    seen_i[i]++;
                    ok = check_i_file(&i_cases[i], file, len);
                    if (!ok)
                        fprintf(stderr, "  %s: not as the table says (parse %d)\n", name,
                                (int)st);
                    CHECK(c, ok);
                }
            }
            if (!found)
                fprintf(stderr, "  %s: missing from the i_ table\n", name);
            CHECK(c, found);
        }
    }
    closedir(dp);
    free(file);
    for (i = 0; i < I_CASES; i++) {
        if (seen_i[i] != 1)
            fprintf(stderr, "  %s: in the table, not in the suite\n", i_cases[i].name);
        CHECK(c, seen_i[i] == 1);
    }
    printf("JSONTestSuite: %u y_, %u n_, %u i_ files\n", ny, nn, ni);
}

/* The tape: every key and value span in document order, next-sibling
 * steps, and scanning when it is too small. */
static void test_tape(check_counts *c)
{
    const uint8_t *d = (const uint8_t *)" {\"a\": [1, {\"b\": null}], \"c\": \"x\"} ";
    size_t len = strlen((const char *)d);
    ha_json_tape_entry e[16];
    ha_json_tape tape = {e, 16, 0};
    ha_json_val r, k, v, got;
    ha_json_iter it;
    CHECK(c, ha_json_parse_tape(d, len, 0, &r, NULL, NULL, &tape) == HA_JSON_OK);
    /* root, "a", [..], 1, {..}, "b", null, "c", "x" */
    CHECK(c, tape.n == 9 && r.tape == 0 && e[0].start == 1 && e[0].end == 34 && e[0].next == 9);
    CHECK(c, e[2].start == 7 && e[2].end == 23 && e[2].next == 7);
    CHECK(c, e[4].next == 7 && e[5].next == 6 && e[8].next == 9);
    ha_json_iter_init_tape(&it, d, r, &tape);
    CHECK(c, ha_json_obj_next(&it, &k, &v) && k.tape == 1 && v.kind == HA_JSON_ARRAY && v.tape == 2);
    CHECK(c, ha_json_obj_next(&it, &k, &v) && k.start == 25 && v.kind == HA_JSON_STRING && v.tape == 8);
    CHECK(c, !ha_json_obj_next(&it, &k, &v) && v.kind == HA_JSON_ABSENT);
    got = ha_json_obj_get_tape(d, r, L("c"), &tape);
    CHECK(c, got.start == 30 && got.end == 33);
    /* too small: no tape, iteration scans and gives the same spans */
    tape.cap = 4;
    CHECK(c, ha_json_parse_tape(d, len, 0, &r, NULL, NULL, &tape) == HA_JSON_OK);
    CHECK(c, tape.n == 9 && r.tape == HA_JSON_NO_TAPE);
    ha_json_iter_init_tape(&it, d, r, &tape);
    CHECK(c, ha_json_obj_next(&it, &k, &v) && v.start == 7 && v.end == 23 && v.tape == HA_JSON_NO_TAPE);
    /* a tape of one entry per byte cannot overflow and is written unchecked;
       one entry less than the document needs is never written past */
    {
        const uint8_t *w = (const uint8_t *)"[0,0,0,0,0,0,0]"; /* 15 bytes, 8 entries */
        ha_json_tape_entry big[15], small[8];
        ha_json_tape roomy = {big, 15, 0}, tight = {small, 7, 0};
        small[7].start = small[7].end = small[7].next = 77; /* past cap: a guard */
        CHECK(c, ha_json_parse_tape(w, 15, 0, &r, NULL, NULL, &roomy) == HA_JSON_OK &&
                     roomy.n == 8 && r.tape == 0 && big[0].end == 15 && big[0].next == 8 &&
                     big[7].start == 13 && big[7].end == 14 && big[7].next == 8);
        CHECK(c, ha_json_parse_tape(w, 15, 0, &r, NULL, NULL, &tight) == HA_JSON_OK &&
                     tight.n == 8 && r.tape == HA_JSON_NO_TAPE && small[6].start == 11 &&
                     small[7].start == 77 && small[7].end == 77 && small[7].next == 77);
    }
    /* a failed parse leaves no usable tape */
    tape.cap = 16;
    CHECK(c, ha_json_parse_tape(L("{\"a\": [1,]}"), 0, &r, NULL, NULL, &tape) == HA_JSON_ERR_SYNTAX &&
                 r.tape == HA_JSON_NO_TAPE);
}

/* The whole document in one call: postorder values, counts, the forms of
 * numbers, strings in one text area, and the statuses. */
static void test_flatten(check_counts *c)
{
    const uint8_t *d = (const uint8_t *)"{\"k\": [1, -2.5, \"\\u00e9x\", null, true, false, "
                                        "99999999999999999999, {}], \"k\": []}";
    size_t len = strlen((const char *)d), n = 0, tl = 0, off = 0;
    int64_t w[16 * HA_JSON_FLAT_WORDS];
    uint8_t text[256];
    unsigned fl = 0;
    double f;
    CHECK(c, ha_json_flatten(d, len, 0, NULL, 0, &n, text, sizeof text, &tl, &off, &fl) ==
                 HA_JSON_ERR_SPACE && n == 13);
    CHECK(c, ha_json_flatten(d, len, 0, w, 12 * HA_JSON_FLAT_WORDS, &n, text, sizeof text, &tl,
                             &off, &fl) == HA_JSON_ERR_SPACE && n == 13);
    CHECK(c, ha_json_flatten(d, len, 0, w, sizeof w / sizeof *w, &n, text, sizeof text, &tl, &off,
                             &fl) == HA_JSON_OK && n == 13 && fl == 0);
    /* "k" 1 -2.5 "éx" null true false big {} [..] "k" [] {..} */
    CHECK(c, w[0] == HA_JSON_STRING && w[1] == 0 && w[2] == 1 && tl == 5 &&
                 memcmp(text, "k\xc3\xa9xk", 5) == 0);
    CHECK(c, w[4] == HA_JSON_NUMBER && w[5] == 1 && w[7] == HA_JSON_FLAT_INT);
    memcpy(&f, &w[9], sizeof f);
    CHECK(c, w[8] == HA_JSON_NUMBER && w[11] == HA_JSON_FLAT_F64 && f == -2.5);
    CHECK(c, w[12] == HA_JSON_STRING && w[13] == 1 && w[14] == 3);
    CHECK(c, w[16] == HA_JSON_NULL && w[20] == HA_JSON_TRUE && w[24] == HA_JSON_FALSE);
    CHECK(c, w[28] == HA_JSON_NUMBER && w[31] == HA_JSON_FLAT_BIG && w[29] == 46 && w[30] == 66);
    CHECK(c, w[32] == HA_JSON_OBJECT && w[33] == 0 && w[36] == HA_JSON_ARRAY && w[37] == 8);
    CHECK(c, w[40] == HA_JSON_STRING && w[41] == 3 && w[42] == 4 && w[44] == HA_JSON_ARRAY &&
                 w[45] == 0 && w[48] == HA_JSON_OBJECT && w[49] == 2); /* both members */
    /* a scalar document; statuses */
    CHECK(c, ha_json_flatten(L("7"), 0, w, 4, &n, text, sizeof text, &tl, &off, &fl) == HA_JSON_OK &&
                 n == 1 && w[0] == HA_JSON_NUMBER && w[1] == 7);
    CHECK(c, ha_json_flatten(L("[1, 2e400]"), 0, w, 16, &n, text, sizeof text, &tl, &off, &fl) ==
                 HA_JSON_ERR_RANGE && off == 4);
    CHECK(c, ha_json_flatten(L("[1, 2e400"), 0, w, 16, &n, text, sizeof text, &tl, &off, &fl) ==
                 HA_JSON_ERR_SYNTAX && off == 9 && n == 0);
    CHECK(c, ha_json_flatten(L("[\"\xff\"]"), 0, w, 16, &n, text, sizeof text, &tl, &off, &fl) ==
                 HA_JSON_OK && fl == HA_JSON_FLAG_BAD_UTF8 && tl == 3 && w[2] == 1);
}

int main(int argc, char **argv)
{
    check_counts c = {0, 0};

    test_tape(&c);
    test_flatten(&c);
    test_accept(&c);
    test_reject(&c);
    test_empty_trailing(&c);
    test_depth(&c);
    test_flags(&c);
    test_string_bytes(&c);
    test_iterate(&c);
    test_lookup(&c);
    test_decode(&c);
    test_space_type(&c);
    test_sanitize(&c);
    test_i64(&c);
    test_f64(&c);
    test_bool(&c);
    test_misuse(&c);
    if (argc > 1)
        run_suite(&c, argv[1]);
    else
        printf("JSONTestSuite skipped (pass the test_parsing folder as argument)\n");
    return check_summary(&c);
}

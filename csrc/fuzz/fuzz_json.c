/* libFuzzer target for json.c.
 *
 * Accepted documents: the whole tree is walked with the iterators and every
 * invariant the contract implies is checked with __builtin_trap(): spans in
 * bounds and nested, only separators between them, decoded strings valid
 * UTF-8 and within ha_json_str_max(), obj_get() returning the last member
 * with a key, numbers equal to what strtod/strtoll say. Rejected documents:
 * err_offset is consistent with parsing the prefix before it. Any input:
 * ha_utf8_sanitize() against an independent reference, and the span
 * functions run on raw bytes they never validated (memory safety only).
 *
 * Buffers handed to json.c are heap copies of exactly the allowed size, so
 * ASan reports any read or write past a span.
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                              \
    do {                                                                      \
        if (!(x))                                                             \
            __builtin_trap();                                                 \
    } while (0)

/* obj_get is checked against an O(n^2) reference: cap the members. */
#define FUZZ_MEMBERS_MAX 64u
/* Depth for the second parse that must agree with the default one. */
#define FUZZ_SHALLOW_DEPTH 3u
/* Members/elements visited per container in raw (unvalidated) mode. */
#define FUZZ_RAW_STEPS 256u

static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    if (!q)
        abort();
    if (n)
        memcpy(q, p, n);
    return q;
}

/* ---- independent UTF-8 reference -------------------------------------- */

/* Whether s is well-formed UTF-8: decode each sequence by its bit pattern,
 * then reject overlongs, surrogates and values past U+10FFFF. */
static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t len, k;
        uint32_t cp, min;
        if (b < 0x80) {
            i++;
            continue;
        }
        if ((b & 0xE0) == 0xC0) {
            len = 2, cp = b & 0x1Fu, min = 0x80;
        } else if ((b & 0xF0) == 0xE0) {
            len = 3, cp = b & 0x0Fu, min = 0x800;
        } else if ((b & 0xF8) == 0xF0) {
            len = 4, cp = b & 0x07u, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* Whether a lead-and-continuations prefix holding cp (k of len bytes) can
 * still become a scalar value encoded in len bytes: the interval of values
 * it can reach must meet [lo, hi] outside the surrogates. */
static int viable(uint32_t cp, size_t k, size_t len)
{
    static const uint32_t lo[5] = {0, 0, 0x80, 0x800, 0x10000};
    static const uint32_t hi[5] = {0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
    unsigned r = (unsigned)(6 * (len - k));
    uint32_t a = cp << r, b = (cp << r) | ((1u << r) - 1u);
    if (a < lo[len])
        a = lo[len];
    if (b > hi[len])
        b = hi[len];
    return a <= b && (a < 0xD800 || b > 0xDFFF);
}

/* Python's bytes.decode("utf-8", "replace"), derived from the definition of
 * a maximal subpart rather than from Unicode's byte-range table. */
static size_t ref_sanitize(const uint8_t *s, size_t n, uint8_t *out, int *replaced)
{
    size_t i = 0, o = 0;
    *replaced = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t len, k = 1;
        uint32_t cp;
        if (b < 0x80) {
            out[o++] = b;
            i++;
            continue;
        }
        if ((b & 0xE0) == 0xC0)
            len = 2, cp = b & 0x1Fu;
        else if ((b & 0xF0) == 0xE0)
            len = 3, cp = b & 0x0Fu;
        else if ((b & 0xF8) == 0xF0)
            len = 4, cp = b & 0x07u;
        else
            len = 0, cp = 0;
        if (len && viable(cp, 1, len)) {
            while (k < len && i + k < n && (s[i + k] & 0xC0) == 0x80 &&
                   viable((cp << 6) | (s[i + k] & 0x3Fu), k + 1, len)) {
                cp = (cp << 6) | (s[i + k] & 0x3Fu);
                k++;
            }
        }
        if (len && k == len) {
            memcpy(out + o, s + i, len);
            o += len;
        } else {
            out[o++] = 0xEF, out[o++] = 0xBF, out[o++] = 0xBD;
            *replaced = 1;
        }
        i += k;
    }
    return o;
}

static void check_sanitize(const uint8_t *data, size_t size)
{
    uint8_t *in = dup_exact(data, size);
    uint8_t *out = malloc(3 * size + 1), *ref = malloc(3 * size + 1);
    unsigned fl = 0;
    int replaced;
    size_t n, rn;
    if (!out || !ref)
        abort();
    n = ha_utf8_sanitize(in, size, out, &fl);
    rn = ref_sanitize(in, size, ref, &replaced);
    CHECK(n == rn && memcmp(out, ref, n) == 0);
    CHECK(n <= 3 * size && utf8_ok(out, n));
    CHECK((fl == HA_JSON_FLAG_BAD_UTF8) == replaced && (fl & ~HA_JSON_FLAG_BAD_UTF8) == 0);
    CHECK(replaced == !utf8_ok(in, size));
    free(in);
    free(out);
    free(ref);
}

/* ---- walking an accepted document ------------------------------------- */

typedef struct {
    const uint8_t *doc;
    size_t len;
    unsigned flags; /* from the parse */
} doc_t;

static int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* doc[from .. to) holds whitespace and exactly `want` separators `sep`. */
static void check_gap(const doc_t *d, size_t from, size_t to, uint8_t sep, int want)
{
    int seen = 0;
    CHECK(from <= to && to <= d->len);
    for (; from < to; from++) {
        if (d->doc[from] == sep)
            seen++;
        else
            CHECK(is_ws(d->doc[from]));
    }
    CHECK(seen == want);
}

/* Decode a string span into an exactly sized heap buffer and check it. The
 * caller frees *out. */
static size_t decode_checked(const doc_t *d, ha_json_val s, uint8_t **out)
{
    size_t max = ha_json_str_max(s), n = 7, n2;
    uint8_t *buf = malloc(max ? max : 1);
    unsigned fl = 0;
    size_t i;
    int has_bs = 0;

    if (!buf)
        abort();
    CHECK(max == 3 * (s.end - s.start - 2));
    CHECK(ha_json_str_decode(d->doc, s, buf, max, &n, &fl) == HA_JSON_OK);
    CHECK(n <= max && utf8_ok(buf, n));
    CHECK((fl & ~d->flags) == 0); /* the parse saw every flag */
    /* One byte short is ERR_SPACE with nothing reported. */
    if (n > 0) {
        CHECK(ha_json_str_decode(d->doc, s, buf, n - 1, &n2, NULL) == HA_JSON_ERR_SPACE &&
              n2 == 0);
        CHECK(ha_json_str_decode(d->doc, s, buf, n, &n2, NULL) == HA_JSON_OK && n2 == n);
    }
    /* Without escapes, decoding is sanitizing the raw body. */
    for (i = s.start + 1; i < s.end - 1; i++)
        has_bs |= d->doc[i] == '\\';
    if (!has_bs) {
        uint8_t *ref = malloc(max + 1);
        int replaced;
        size_t rn;
        if (!ref)
            abort();
        rn = ref_sanitize(d->doc + s.start + 1, s.end - s.start - 2, ref, &replaced);
        CHECK(rn == n && memcmp(ref, buf, n) == 0);
        CHECK(!!(fl & HA_JSON_FLAG_BAD_UTF8) == replaced);
        CHECK(!(fl & HA_JSON_FLAG_LONE_SURROGATE));
        free(ref);
    }
    *out = buf;
    return n;
}

/* A NUL-terminated heap copy of a span, for the libc references. */
static char *cstr(const doc_t *d, ha_json_val v)
{
    char *s = malloc(v.end - v.start + 1);
    if (!s)
        abort();
    memcpy(s, d->doc + v.start, v.end - v.start);
    s[v.end - v.start] = '\0';
    return s;
}

static void check_number(const doc_t *d, ha_json_val v)
{
    char *s = cstr(d, v), *end;
    int is_int = strpbrk(s, ".eE") == NULL;
    int64_t i = 0;
    double f = 0, rf;
    long long ri;
    ha_json_status st;

    st = ha_json_get_i64(d->doc, v, &i);
    if (!is_int) {
        CHECK(st == HA_JSON_ERR_TYPE);
    } else {
        errno = 0;
        ri = strtoll(s, &end, 10);
        CHECK(*end == '\0');
        if (errno == ERANGE)
            CHECK(st == HA_JSON_ERR_RANGE);
        else
            CHECK(st == HA_JSON_OK && i == ri);
    }
    /* glibc's strtod rounds correctly at any length: get_f64 must agree
     * bit for bit, and report RANGE exactly where strtod overflows. */
    st = ha_json_get_f64(d->doc, v, &f);
    rf = strtod(s, &end);
    CHECK(*end == '\0');
    if (isinf(rf))
        CHECK(st == HA_JSON_ERR_RANGE);
    else
        CHECK(st == HA_JSON_OK && memcmp(&f, &rf, sizeof f) == 0);
    free(s);
}

static void walk(const doc_t *d, ha_json_val v, unsigned depth);

static void check_child(const doc_t *d, ha_json_val parent, ha_json_val c)
{
    CHECK(parent.end <= d->len);
    CHECK(c.kind != HA_JSON_ABSENT);
    CHECK(c.start > parent.start && c.end < parent.end && c.start < c.end);
}

static void walk_array(const doc_t *d, ha_json_val v, unsigned depth)
{
    ha_json_iter it;
    ha_json_val e;
    size_t prev = v.start + 1;
    int first = 1;

    ha_json_iter_init(&it, d->doc, v);
    while (ha_json_arr_next(&it, &e)) {
        check_child(d, v, e);
        check_gap(d, prev, e.start, ',', first ? 0 : 1);
        walk(d, e, depth + 1);
        prev = e.end;
        first = 0;
    }
    CHECK(e.kind == HA_JSON_ABSENT);
    check_gap(d, prev, v.end - 1, ',', 0);
}

static void walk_object(const doc_t *d, ha_json_val v, unsigned depth)
{
    ha_json_iter it;
    ha_json_val k, val;
    ha_json_val keys[FUZZ_MEMBERS_MAX], vals[FUZZ_MEMBERS_MAX];
    uint8_t *dec[FUZZ_MEMBERS_MAX];
    size_t dlen[FUZZ_MEMBERS_MAX];
    size_t prev = v.start + 1, n = 0, i, j;
    int first = 1, capped = 0;

    ha_json_iter_init(&it, d->doc, v);
    while (ha_json_obj_next(&it, &k, &val)) {
        uint8_t *kd;
        size_t kn;
        check_child(d, v, k);
        check_child(d, v, val);
        CHECK(k.kind == HA_JSON_STRING && k.end <= val.start);
        check_gap(d, prev, k.start, ',', first ? 0 : 1);
        check_gap(d, k.end, val.start, ':', 1);
        kn = decode_checked(d, k, &kd);
        CHECK(ha_json_key_eq(d->doc, k, kd, kn));
        if (kn > 0)
            CHECK(!ha_json_key_eq(d->doc, k, kd, kn - 1));
        walk(d, val, depth + 1);
        if (n < FUZZ_MEMBERS_MAX) {
            keys[n] = k, vals[n] = val, dec[n] = kd, dlen[n] = kn;
            n++;
        } else {
            capped = 1;
            free(kd);
        }
        prev = val.end;
        first = 0;
    }
    CHECK(k.kind == HA_JSON_ABSENT && val.kind == HA_JSON_ABSENT);
    check_gap(d, prev, v.end - 1, ',', 0);
    /* obj_get(key) is the last member whose decoded key is equal. */
    for (i = 0; i < n && !capped; i++) {
        ha_json_val got = ha_json_obj_get(d->doc, v, dec[i], dlen[i]);
        for (j = n; j-- > 0;) {
            if (dlen[j] == dlen[i] && memcmp(dec[j], dec[i], dlen[i]) == 0)
                break;
        }
        CHECK(j >= i);
        CHECK(got.start == vals[j].start && got.end == vals[j].end &&
              got.kind == vals[j].kind);
        CHECK(ha_json_key_eq(d->doc, keys[j], dec[i], dlen[i]));
    }
    for (i = 0; i < n; i++)
        free(dec[i]);
}

static void walk(const doc_t *d, ha_json_val v, unsigned depth)
{
    int b;
    CHECK(depth <= HA_JSON_MAX_DEPTH);
    CHECK(v.start < v.end && v.end <= d->len);
    switch (v.kind) {
    case HA_JSON_OBJECT:
        CHECK(d->doc[v.start] == '{' && d->doc[v.end - 1] == '}');
        walk_object(d, v, depth);
        break;
    case HA_JSON_ARRAY:
        CHECK(d->doc[v.start] == '[' && d->doc[v.end - 1] == ']');
        walk_array(d, v, depth);
        break;
    case HA_JSON_STRING: {
        uint8_t *s;
        CHECK(v.end - v.start >= 2 && d->doc[v.start] == '"' && d->doc[v.end - 1] == '"');
        decode_checked(d, v, &s);
        free(s);
        break;
    }
    case HA_JSON_NUMBER:
        check_number(d, v);
        break;
    case HA_JSON_TRUE:
    case HA_JSON_FALSE:
        CHECK(v.end - v.start == (v.kind == HA_JSON_TRUE ? 4u : 5u));
        CHECK(ha_json_get_bool(v, &b) == HA_JSON_OK && b == (v.kind == HA_JSON_TRUE));
        break;
    case HA_JSON_NULL:
        CHECK(v.end - v.start == 4 && ha_json_get_bool(v, &b) == HA_JSON_ERR_TYPE);
        break;
    default:
        CHECK(0);
    }
    if (v.kind != HA_JSON_NUMBER) {
        int64_t i;
        double f;
        CHECK(ha_json_get_i64(d->doc, v, &i) == HA_JSON_ERR_TYPE);
        CHECK(ha_json_get_f64(d->doc, v, &f) == HA_JSON_ERR_TYPE);
    }
}

/* ---- rejected documents ------------------------------------------------ */

/* err_offset is the first byte that cannot continue a valid document, so
 * the bytes before it parse as a document or as one that ended too soon. */
static void check_rejected(const uint8_t *doc, size_t len, ha_json_status st, size_t off)
{
    ha_json_val r;
    size_t off2 = 0;
    unsigned fl;
    ha_json_status st2;

    CHECK(off <= len);
    if (st == HA_JSON_ERR_EMPTY) {
        CHECK(off == len);
        return;
    }
    if (st == HA_JSON_ERR_DEPTH) {
        CHECK(off < len && (doc[off] == '[' || doc[off] == '{'));
        return;
    }
    st2 = ha_json_parse(doc, off, 0, &r, &off2, &fl);
    if (st == HA_JSON_ERR_TRAILING)
        CHECK(st2 == HA_JSON_OK && off < len && !is_ws(doc[off]));
    else if (st == HA_JSON_ERR_SYNTAX)
        CHECK(st2 == HA_JSON_OK || st2 == HA_JSON_ERR_EMPTY ||
              (st2 == HA_JSON_ERR_SYNTAX && off2 == off));
    else
        CHECK(0);
}

/* ---- spans that were never validated ----------------------------------- */

static void raw_walk(const uint8_t *doc, ha_json_val c, unsigned depth)
{
    ha_json_iter it;
    ha_json_val k, v;
    unsigned steps = 0;
    uint8_t out[64];
    size_t n;
    int64_t i;
    double f;

    if (depth > 4)
        return;
    ha_json_iter_init(&it, doc, c);
    if (c.kind == HA_JSON_OBJECT) {
        while (steps++ < FUZZ_RAW_STEPS && ha_json_obj_next(&it, &k, &v)) {
            CHECK(k.start > c.start && k.end <= v.start && v.end < c.end);
            if (ha_json_str_decode(doc, k, out, sizeof out, &n, NULL) == HA_JSON_OK) {
                CHECK(utf8_ok(out, n));
                (void)ha_json_obj_get(doc, c, out, n);
            }
            raw_walk(doc, v, depth + 1);
        }
    } else if (c.kind == HA_JSON_ARRAY) {
        while (steps++ < FUZZ_RAW_STEPS && ha_json_arr_next(&it, &v)) {
            CHECK(v.start > c.start && v.end < c.end);
            raw_walk(doc, v, depth + 1);
        }
    } else {
        if (ha_json_str_decode(doc, c, out, sizeof out, &n, NULL) == HA_JSON_OK)
            CHECK(utf8_ok(out, n));
        (void)ha_json_get_i64(doc, c, &i);
        (void)ha_json_get_f64(doc, c, &f);
    }
}

static void check_raw(const uint8_t *data, size_t size)
{
    static const ha_json_kind kinds[] = {HA_JSON_OBJECT, HA_JSON_ARRAY, HA_JSON_STRING,
                                         HA_JSON_NUMBER};
    size_t i;
    if (size == 0)
        return;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        /* Copy only the span, so reading past container.end is caught. */
        uint8_t *doc = dup_exact(data, size);
        ha_json_val c = {0, size, kinds[i], HA_JSON_NO_TAPE};
        raw_walk(doc, c, 0);
        free(doc);
    }
}

/* ---- tape ------------------------------------------------------------- */

#define FUZZ_SPANS_MAX 4096u

typedef struct {
    size_t start[FUZZ_SPANS_MAX], end[FUZZ_SPANS_MAX];
    size_t n;
    int key_escape; /* some key holds a backslash */
} spans_t;

/* Every key and value span in document order, through the iterators. */
static void spans(const uint8_t *doc, ha_json_val v, const ha_json_tape *tape, spans_t *out)
{
    ha_json_iter it;
    ha_json_val k, m;
    if (out->n < FUZZ_SPANS_MAX) {
        out->start[out->n] = v.start;
        out->end[out->n++] = v.end;
    }
    ha_json_iter_init_tape(&it, doc, v, tape);
    if (v.kind == HA_JSON_OBJECT) {
        while (ha_json_obj_next(&it, &k, &m)) {
            if (memchr(doc + k.start, '\\', k.end - k.start))
                out->key_escape = 1;
            spans(doc, k, tape, out);
            spans(doc, m, tape, out);
        }
    } else if (v.kind == HA_JSON_ARRAY) {
        while (ha_json_arr_next(&it, &m))
            spans(doc, m, tape, out);
    }
}

/* Iterating with a tape (roomy, or too small: then scanning) finds exactly
 * the spans that scanning finds; the key-escape flag is exact. */
static void check_tape(const uint8_t *doc, size_t size, ha_json_val root, unsigned fl)
{
    static const size_t caps[] = {0, 3, 1024};
    ha_json_tape_entry *entries = malloc(1024 * sizeof *entries);
    spans_t *scan = calloc(1, sizeof *scan), *taped = calloc(1, sizeof *taped);
    size_t i, k;
    if (!entries || !scan || !taped)
        abort();
    spans(doc, root, NULL, scan);
    CHECK(scan->key_escape == ((fl & HA_JSON_FLAG_KEY_ESCAPE) != 0));
    for (i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        ha_json_tape tape = {entries, caps[i], 0};
        ha_json_val r;
        CHECK(ha_json_parse_tape(doc, size, 0, &r, NULL, NULL, &tape) == HA_JSON_OK);
        CHECK(r.start == root.start && r.end == root.end && r.kind == root.kind);
        CHECK((r.tape == 0) == (tape.n <= tape.cap));
        memset(taped, 0, sizeof *taped);
        spans(doc, r, &tape, taped);
        CHECK(taped->n == scan->n);
        for (k = 0; k < scan->n; k++)
            CHECK(taped->start[k] == scan->start[k] && taped->end[k] == scan->end[k]);
    }
    free(entries);
    free(scan);
    free(taped);
}

/* ---- entry ------------------------------------------------------------- */

/* The whole document in one call: the parser's status and flags; counted
 * alone, then written in an area of exactly that many values, a postorder
 * whose container counts rebuild one root; all text inside its area. */
static void check_flatten(const uint8_t *doc, size_t size, ha_json_status st, size_t off,
                          unsigned fl)
{
    size_t n = 0, n2 = 0, tl = 0, off2 = 0, i, depth = 0;
    unsigned fl2 = 0;
    uint8_t *text = malloc(3 * size + 1);
    ha_json_status got = ha_json_flatten(doc, size, 0, NULL, 0, &n, text, 3 * size + 1, &tl,
                                         &off2, &fl2);
    CHECK(text != NULL);
    if (st != HA_JSON_OK) {
        CHECK(got == st && off2 == off && n == 0);
        free(text);
        return;
    }
    CHECK(got == HA_JSON_ERR_SPACE && n > 0 && fl2 == fl);
    int64_t *w = malloc(n * HA_JSON_FLAT_WORDS * sizeof *w);
    CHECK(w != NULL);
    got = ha_json_flatten(doc, size, 0, w, n * HA_JSON_FLAT_WORDS, &n2, text, 3 * size + 1, &tl,
                          &off2, &fl2);
    CHECK(got == HA_JSON_OK || got == HA_JSON_ERR_RANGE);
    if (got == HA_JSON_OK) {
        CHECK(n2 == n && tl <= 3 * size);
        for (i = 0; i < n; i++) { /* depth: values on the builder's stack */
            const int64_t *v = w + i * HA_JSON_FLAT_WORDS;
            if (v[0] == HA_JSON_OBJECT || v[0] == HA_JSON_ARRAY) {
                size_t take = (size_t)v[1] * (v[0] == HA_JSON_OBJECT ? 2u : 1u);
                CHECK(take <= depth);
                depth -= take;
            } else if (v[0] == HA_JSON_STRING) {
                CHECK(v[1] <= v[2] && (size_t)v[2] <= tl);
            }
            depth++;
        }
        CHECK(depth == 1);
    }
    free(w);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *doc = dup_exact(data, size);
    ha_json_val root, root2;
    size_t off = 0, off2 = 0;
    unsigned fl = 0, fl2 = 0;
    ha_json_status st = ha_json_parse(doc, size, 0, &root, &off, &fl);
    ha_json_status st2 = ha_json_parse(doc, size, FUZZ_SHALLOW_DEPTH, &root2, &off2, &fl2);

    CHECK((fl & ~(HA_JSON_FLAG_BAD_UTF8 | HA_JSON_FLAG_LONE_SURROGATE |
                  HA_JSON_FLAG_KEY_ESCAPE)) == 0);
    /* A shallower limit can only turn outcomes into an earlier ERR_DEPTH. */
    if (st2 == HA_JSON_ERR_DEPTH)
        CHECK(st == HA_JSON_OK || st == HA_JSON_ERR_DEPTH || off > off2);
    else
        CHECK(st2 == st && (st != HA_JSON_OK ? off2 == off : fl2 == fl));

    if (st == HA_JSON_OK) {
        doc_t d = {doc, size, fl};
        size_t i;
        CHECK(root.start < root.end && root.end <= size);
        for (i = 0; i < root.start; i++)
            CHECK(is_ws(doc[i]));
        for (i = root.end; i < size; i++)
            CHECK(is_ws(doc[i]));
        CHECK(!is_ws(doc[root.end - 1]));
        walk(&d, root, 0);
        check_tape(doc, size, root, fl);
    } else {
        CHECK(root.kind == HA_JSON_ABSENT && root.start == 0 && root.end == 0);
        check_rejected(doc, size, st, off);
    }
    check_flatten(doc, size, st, off, fl);
    free(doc);
    check_sanitize(data, size);
    check_raw(data, size);
    return 0;
}

/* Strict JSON scanner: see json.h for the contract.
 *
 * ha_json_parse() is the hot path: one forward pass, a goto state machine
 * (no recursion), the container stack a bitset in its own frame, and string
 * bodies skipped 8 bytes at a time while they are plain ASCII. The span
 * functions trust that their document was accepted, so they only skip
 * bytes, but every read stays inside the span they were given.
 */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bits per word of the parser's container-kind stack. */
#define KIND_WORD_BITS 64u
/* Significant digits handed to strtod. A double rounding boundary has at
 * most 767 significant digits, so truncating to more than that and adding
 * a sticky nonzero digit never changes the correctly rounded result. */
#define F64_SIG_DIGITS 800u
/* Exponent digits are accumulated saturating here: far past any value that
 * can still be finite or nonzero, far from int64 overflow. */
#define F64_EXP_CLAMP 1000000000
/* M * 10^e with M of n digits is >= 10^(n-1+e): above this it overflows. */
#define F64_DEC_EXP_MAX 309
/* ... and < 10^(n+e): below this it is under half the least subnormal. */
#define F64_DEC_EXP_MIN (-330)
/* strtod input: sign, digits, sticky digit, 'e', sign, exponent digits. */
#define F64_BUF_LEN (F64_SIG_DIGITS + 32u)

/* The hot helpers must inline into the parser's loop: passed pointers to
 * its position would otherwise force it out of registers. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

#define U8_REPLACEMENT_LEN 3u

static const uint8_t u8_replacement[U8_REPLACEMENT_LEN] = {0xEF, 0xBF, 0xBD};

/* ---- byte classes ------------------------------------------------------ */

/* Only these four: JSON whitespace (RFC 8259 section 2). */
#define WS_MASK ((1ull << ' ') | (1ull << '\t') | (1ull << '\n') | (1ull << '\r'))

static inline int is_ws(uint8_t c)
{
    return c <= ' ' && ((WS_MASK >> c) & 1u);
}

static inline int is_digit(uint8_t c)
{
    return (unsigned)(c - '0') < 10u;
}

HOT size_t skip_ws(const uint8_t *d, size_t p, size_t len)
{
    while (p < len && is_ws(d[p]))
        p++;
    return p;
}

static inline int hex_val(uint8_t c)
{
    if (is_digit(c))
        return c - '0';
    c = (uint8_t)(c | 0x20u); /* fold case: 'A' -> 'a' */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* ---- word-at-a-time scanning ------------------------------------------ */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define SWAR_BYTES 8u

#if defined(__GNUC__) && defined(__BYTE_ORDER__) &&                           \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HA_SWAR_LE 1
#endif

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w); /* unaligned-safe; compiles to one load */
    return w;
}

/* High bit set in each byte of w equal to b. Bits above the first true hit
 * may be false positives; the lowest set bit is always exact. */
static inline uint64_t bytes_eq(uint64_t w, uint8_t b)
{
    uint64_t x = w ^ (ONES * b);
    return (x - ONES) & ~x & HIGHS;
}

/* Stops for the parser inside a string: '"', '\\', < 0x20, >= 0x80, in
 * three subtractions. Below the first stop every byte is in 0x20..0x7F and
 * no subtraction borrows or sets a high bit there, so the lowest set bit
 * is exact. At a stop: '"' or '\\' makes its difference 0xFF, < 0x20
 * wraps w - 0x20; >= 0x80 leaves w ^ '"' at 0x81 or more (high bit set
 * after - 1) except 0xA2, where w - 0x20 is 0x82. */
static inline uint64_t swar_parse_stops(uint64_t w)
{
    return (((w ^ ONES * '"') - ONES) | ((w ^ ONES * '\\') - ONES) | (w - ONES * 0x20u)) & HIGHS;
}

/* Stops for decoding: '\\' (when json) and >= 0x80. */
static inline uint64_t swar_decode_stops(uint64_t w, int json)
{
    return (w & HIGHS) | (json ? bytes_eq(w, '\\') : 0u);
}

/* Stops for skipping an accepted string: '"' and '\\'. */
static inline uint64_t swar_skip_stops(uint64_t w)
{
    return bytes_eq(w, '"') | bytes_eq(w, '\\');
}

/* The word loop of every scan below: p moves on by whole words while
 * STOPS, an expression of the word w, finds no stop in it. At a word that
 * has one, the scan returns the first stop's position (the lowest set bit
 * is exact); on a big-endian machine, where the lowest bit is not the
 * first byte, it leaves that word to the byte loop after it. */
#ifdef HA_SWAR_LE
#define SWAR_FOUND(p, m) return (p) + ((size_t)__builtin_ctzll(m) >> 3)
#else
#define SWAR_FOUND(p, m) break
#endif
#define SWAR_SCAN(d, p, end, STOPS)                                              \
    while ((end) - (p) >= SWAR_BYTES) {                                          \
        uint64_t w = load64((d) + (p));                                          \
        uint64_t stops = (STOPS);                                                \
        if (stops)                                                               \
            SWAR_FOUND(p, stops);                                                \
        (p) += SWAR_BYTES;                                                       \
    }

/* Plain string bytes for the parser: printable ASCII but '"' and '\\'. */
HOT size_t skip_plain(const uint8_t *d, size_t p, size_t end)
{
    SWAR_SCAN(d, p, end, swar_parse_stops(w));
    while (p < end && d[p] >= 0x20u && d[p] < 0x80u && d[p] != '"' && d[p] != '\\')
        p++;
    return p;
}

static inline size_t skip_ascii(const uint8_t *d, size_t p, size_t end, int json)
{
    SWAR_SCAN(d, p, end, swar_decode_stops(w, json));
    while (p < end && d[p] < 0x80u && !(json && d[p] == '\\'))
        p++;
    return p;
}

/* Position of the first '"' or '\\' at or after p, or end. */
static inline size_t skip_to_quote(const uint8_t *d, size_t p, size_t end)
{
    SWAR_SCAN(d, p, end, swar_skip_stops(w));
    while (p < end && d[p] != '"' && d[p] != '\\')
        p++;
    return p;
}

/* Position of the first '"', '[', ']', '{' or '}' at or after p, or end.
 * Setting bit 5 folds '[' onto '{' and ']' onto '}' (and nothing else). */
static inline size_t skip_to_struct(const uint8_t *d, size_t p, size_t end)
{
    SWAR_SCAN(d, p, end, bytes_eq(w, '"') | bytes_eq(w | (ONES * 0x20u), '{') |
                             bytes_eq(w | (ONES * 0x20u), '}'));
    while (p < end && d[p] != '"' && (d[p] | 0x20u) != '{' && (d[p] | 0x20u) != '}')
        p++;
    return p;
}

/* ---- UTF-8 ------------------------------------------------------------- */

/* The well-formed sequence at p[0 .. n) (Unicode table 3-7): returns its
 * length 1..4, or 0 with *bad = the length of the maximal subpart of an
 * ill-formed sequence (>= 1): the longest prefix that could still begin a
 * well-formed one. Python's "replace" emits one U+FFFD per maximal subpart. */
static inline size_t utf8_seq(const uint8_t *p, size_t n, size_t *bad)
{
    uint8_t c0 = p[0];
    uint8_t lo = 0x80u, hi = 0xBFu; /* range of the second byte */
    size_t need, i;

    if (c0 < 0x80u)
        return 1;
    if (c0 >= 0xC2u && c0 <= 0xDFu) {
        need = 1;
    } else if (c0 >= 0xE0u && c0 <= 0xEFu) {
        need = 2;
        if (c0 == 0xE0u)
            lo = 0xA0u; /* overlong */
        else if (c0 == 0xEDu)
            hi = 0x9Fu; /* encoded surrogate */
    } else if (c0 >= 0xF0u && c0 <= 0xF4u) {
        need = 3;
        if (c0 == 0xF0u)
            lo = 0x90u; /* overlong */
        else if (c0 == 0xF4u)
            hi = 0x8Fu; /* above U+10FFFF */
    } else {
        *bad = 1; /* continuation byte, C0/C1, F5..FF */
        return 0;
    }
    for (i = 1; i <= need; i++) {
        if (i >= n || p[i] < lo || p[i] > hi) {
            *bad = i;
            return 0;
        }
        lo = 0x80u;
        hi = 0xBFu;
    }
    return need + 1;
}

/* Skip plain ASCII (no '\\' when json) and well-formed UTF-8: the bytes a
 * decoder copies unchanged. */
static inline size_t skip_clean(const uint8_t *d, size_t p, size_t end, int json)
{
    for (;;) {
        size_t k, bad;
        p = skip_ascii(d, p, end, json);
        if (p >= end || d[p] < 0x80u)
            return p;
        k = utf8_seq(d + p, end - p, &bad);
        if (k == 0)
            return p;
        p += k;
    }
}

static inline size_t utf8_put(uint32_t cp, uint8_t *o)
{
    if (cp < 0x80u) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800u) {
        o[0] = (uint8_t)(0xC0u | (cp >> 6));
        o[1] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 2;
    }
    if (cp < 0x10000u) {
        o[0] = (uint8_t)(0xE0u | (cp >> 12));
        o[1] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
        o[2] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 3;
    }
    o[0] = (uint8_t)(0xF0u | (cp >> 18));
    o[1] = (uint8_t)(0x80u | ((cp >> 12) & 0x3Fu));
    o[2] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
    o[3] = (uint8_t)(0x80u | (cp & 0x3Fu));
    return 4;
}

/* ---- escapes ----------------------------------------------------------- */

#define U_ESC_LEN 6u /* \uXXXX */
#define HEX_DIGITS 4u
#define SURR_HI_MIN 0xD800u
#define SURR_LO_MIN 0xDC00u
#define SURR_MAX 0xDFFFu
#define SURR_BITS 10u
#define SUPPLEMENTARY_BASE 0x10000u

/* The 4 hex digits at d[p ..): their value, or -1 with *err at the first
 * byte that is not one (end when the span ends first). */
static inline int32_t hex4(const uint8_t *d, size_t p, size_t end, size_t *err)
{
    int32_t v = 0;
    unsigned i;
    for (i = 0; i < HEX_DIGITS; i++) {
        int h;
        if (p + i >= end) {
            *err = end;
            return -1;
        }
        h = hex_val(d[p + i]);
        if (h < 0) {
            *err = p + i;
            return -1;
        }
        v = (v << 4) | h;
    }
    return v;
}

static inline int is_hi_surr(int32_t cp)
{
    return cp >= (int32_t)SURR_HI_MIN && cp < (int32_t)SURR_LO_MIN;
}

static inline int is_lo_surr(int32_t cp)
{
    return cp >= (int32_t)SURR_LO_MIN && cp <= (int32_t)SURR_MAX;
}

/* A low surrogate escape at d[p ..), or -1. */
static inline int32_t low_escape_at(const uint8_t *d, size_t p, size_t end)
{
    size_t err = end;
    int32_t lo;
    if (end - p < U_ESC_LEN || d[p] != '\\' || d[p + 1] != 'u')
        return -1;
    lo = hex4(d, p + 2, end, &err);
    return is_lo_surr(lo) ? lo : -1;
}

static inline int simple_escape(uint8_t c, uint8_t *out)
{
    switch (c) {
    case '"': *out = '"'; return 1;
    case '\\': *out = '\\'; return 1;
    case '/': *out = '/'; return 1;
    case 'b': *out = '\b'; return 1;
    case 'f': *out = '\f'; return 1;
    case 'n': *out = '\n'; return 1;
    case 'r': *out = '\r'; return 1;
    case 't': *out = '\t'; return 1;
    default: return 0;
    }
}

/* Decode the escape or ill-formed UTF-8 at d[*pos] into u (up to 4 bytes),
 * advancing *pos. A malformed escape can only come from a span that was
 * never accepted: it gives U+FFFD for its backslash so output stays UTF-8. */
static size_t dec_unit(const uint8_t *d, size_t *pos, size_t end, uint8_t u[4],
                       unsigned *fl)
{
    size_t p = *pos, bad = 1, err;
    int32_t cp, lo;

    if (d[p] != '\\') {
        utf8_seq(d + p, end - p, &bad); /* only called on ill-formed bytes */
        *pos = p + bad;
        *fl |= HA_JSON_FLAG_BAD_UTF8;
        memcpy(u, u8_replacement, U8_REPLACEMENT_LEN);
        return U8_REPLACEMENT_LEN;
    }
    if (end - p >= 2 && simple_escape(d[p + 1], u)) {
        *pos = p + 2;
        return 1;
    }
    if (end - p < 2 || d[p + 1] != 'u' || (cp = hex4(d, p + 2, end, &err)) < 0) {
        *pos = p + 1;
        memcpy(u, u8_replacement, U8_REPLACEMENT_LEN);
        return U8_REPLACEMENT_LEN;
    }
    p += U_ESC_LEN;
    if (is_hi_surr(cp) && (lo = low_escape_at(d, p, end)) >= 0) {
        *pos = p + U_ESC_LEN;
        return utf8_put(SUPPLEMENTARY_BASE +
                            ((uint32_t)(cp - (int32_t)SURR_HI_MIN) << SURR_BITS) +
                            (uint32_t)(lo - (int32_t)SURR_LO_MIN),
                        u);
    }
    *pos = p;
    if (is_hi_surr(cp) || is_lo_surr(cp)) {
        *fl |= HA_JSON_FLAG_LONE_SURROGATE;
        memcpy(u, u8_replacement, U8_REPLACEMENT_LEN);
        return U8_REPLACEMENT_LEN;
    }
    return utf8_put((uint32_t)cp, u);
}

/* ---- parser ------------------------------------------------------------ */

/* p is just past the opening quote. On success *pos is past the closing
 * quote; on failure it is the error offset. An escape sets esc_flag in
 * *fl: HA_JSON_FLAG_KEY_ESCAPE for a key, nothing for a value. */
HOT ha_json_status scan_string(const uint8_t *d, size_t len, size_t *pos, unsigned *fl,
                               unsigned esc_flag)
{
    size_t p = *pos;
    for (;;) {
        uint8_t c;
        p = skip_plain(d, p, len);
        if (p >= len)
            break;
        c = d[p];
        if (c == '"') {
            *pos = p + 1;
            return HA_JSON_OK;
        }
        if (c == '\\') {
            int32_t cp;
            size_t err = len;
            *fl |= esc_flag;
            if (p + 1 >= len)
                break;
            if (d[p + 1] != 'u') {
                uint8_t dummy;
                if (!simple_escape(d[p + 1], &dummy)) {
                    *pos = p + 1;
                    return HA_JSON_ERR_SYNTAX;
                }
                p += 2;
                continue;
            }
            cp = hex4(d, p + 2, len, &err);
            if (cp < 0) {
                *pos = err;
                return HA_JSON_ERR_SYNTAX;
            }
            p += U_ESC_LEN;
            /* A pair only when the very next escape is a low surrogate;
             * anything else after a high one leaves it lone, and the next
             * escape is checked on its own by the next iteration. */
            if (is_hi_surr(cp) && low_escape_at(d, p, len) >= 0)
                p += U_ESC_LEN;
            else if (is_hi_surr(cp) || is_lo_surr(cp))
                *fl |= HA_JSON_FLAG_LONE_SURROGATE;
        } else if (c < 0x20u) {
            *pos = p;
            return HA_JSON_ERR_SYNTAX;
        } else {
            /* a run of multibyte characters (CJK text, say) is checked here
               character by character: a word scan would stop at each */
            do {
                size_t bad, k = utf8_seq(d + p, len - p, &bad);
                if (k) {
                    p += k;
                } else {
                    *fl |= HA_JSON_FLAG_BAD_UTF8; /* not a syntax error: json.h */
                    p += bad;
                }
            } while (p < len && d[p] >= 0x80u);
        }
    }
    *pos = len;
    return HA_JSON_ERR_SYNTAX;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? starting at *pos. */
HOT ha_json_status scan_number(const uint8_t *d, size_t len, size_t *pos)
{
    size_t p = *pos;
    if (d[p] == '-')
        p++;
    if (p >= len)
        goto fail;
    if (d[p] == '0') {
        p++;
        if (p < len && is_digit(d[p]))
            goto fail; /* leading zero */
    } else if (is_digit(d[p])) {
        while (p < len && is_digit(d[p]))
            p++;
    } else {
        goto fail;
    }
    if (p < len && d[p] == '.') {
        p++;
        if (p >= len || !is_digit(d[p]))
            goto fail;
        while (p < len && is_digit(d[p]))
            p++;
    }
    if (p < len && (d[p] | 0x20u) == 'e') {
        p++;
        if (p < len && (d[p] == '+' || d[p] == '-'))
            p++;
        if (p >= len || !is_digit(d[p]))
            goto fail;
        while (p < len && is_digit(d[p]))
            p++;
    }
    *pos = p;
    return HA_JSON_OK;
fail:
    *pos = p;
    return HA_JSON_ERR_SYNTAX;
}

HOT ha_json_status scan_literal(const uint8_t *d, size_t len, size_t *pos,
                                const char *lit, size_t n)
{
    size_t p = *pos, i;
    if (len - p >= n && memcmp(d + p, lit, n) == 0) { /* n is constant: no call */
        *pos = p + n;
        return HA_JSON_OK;
    }
    for (i = 0; i < n; i++) { /* where it goes wrong */
        if (p + i >= len || d[p + i] != (uint8_t)lit[i]) {
            *pos = p + i;
            return HA_JSON_ERR_SYNTAX;
        }
    }
    *pos = p + n;
    return HA_JSON_OK;
}

const uint8_t ha_json_kinds[256] = {
    ['{'] = HA_JSON_OBJECT, ['['] = HA_JSON_ARRAY, ['"'] = HA_JSON_STRING,
    ['t'] = HA_JSON_TRUE, ['f'] = HA_JSON_FALSE, ['n'] = HA_JSON_NULL,
    ['-'] = HA_JSON_NUMBER, ['0'] = HA_JSON_NUMBER, ['1'] = HA_JSON_NUMBER,
    ['2'] = HA_JSON_NUMBER, ['3'] = HA_JSON_NUMBER, ['4'] = HA_JSON_NUMBER,
    ['5'] = HA_JSON_NUMBER, ['6'] = HA_JSON_NUMBER, ['7'] = HA_JSON_NUMBER,
    ['8'] = HA_JSON_NUMBER, ['9'] = HA_JSON_NUMBER,
};

ha_json_status ha_json_parse(const uint8_t *doc, size_t len, unsigned max_depth,
                             ha_json_val *root, size_t *err_offset,
                             unsigned *flags)
{
    return ha_json_parse_tape(doc, len, max_depth, root, err_offset, flags, NULL);
}

/* The tape while parsing, in locals: stores through the caller's struct
 * would make the compiler reload it after every write (char aliasing). */
typedef struct {
    ha_json_tape_entry *e;
    size_t cap, n;
} tape_w;

/* How the parser keeps a tape: none, one that holds an entry per byte of
 * the document (every entry starts at a byte of its own, so it cannot
 * overflow: no check per entry), or one that may overflow. The parser is
 * instantiated once per mode. */
typedef enum { TAPE_NONE, TAPE_ROOMY, TAPE_CHECKED } tape_mode;

/* Open an entry for the value or key starting at pos; its index. */
static inline size_t tape_open(tape_w *t, size_t pos, tape_mode mode)
{
    size_t i = t->n++;
    if (mode == TAPE_ROOMY || i < t->cap)
        t->e[i].start = (uint32_t)pos;
    return i;
}

/* Close entry i: the value ends before end, its subtree before entry next. */
static inline void tape_close(tape_w *t, size_t i, size_t end, size_t next, tape_mode mode)
{
    if (mode == TAPE_ROOMY || i < t->cap) {
        t->e[i].end = (uint32_t)end;
        t->e[i].next = (uint32_t)next;
    }
}

HOT ha_json_status parse(const uint8_t *doc, size_t len, unsigned max_depth, ha_json_val *root,
                         size_t *err_offset, unsigned *flags, ha_json_tape *tape,
                         tape_mode mode)
{
    /* Bit i set: the container at depth i + 1 is an object. Only bits
     * below depth are ever read, and each is written on its push. */
    uint64_t kinds[HA_JSON_DEPTH_LIMIT / KIND_WORD_BITS];
    /* The tape entry of the container open at each depth (with a tape). */
    size_t entry[HA_JSON_DEPTH_LIMIT];
    size_t ti = 0; /* the tape entry of the scalar or key being scanned */
    tape_w tw;
    unsigned depth = 0;
    int in_obj = 0;
    unsigned fl = 0;
    size_t p, start;
    uint8_t c;
    ha_json_status st = HA_JSON_ERR_SYNTAX;

    if (max_depth == 0)
        max_depth = HA_JSON_MAX_DEPTH;
    else if (max_depth > HA_JSON_DEPTH_LIMIT)
        max_depth = HA_JSON_DEPTH_LIMIT;
    if (root) {
        root->start = root->end = 0;
        root->kind = HA_JSON_ABSENT;
        root->tape = HA_JSON_NO_TAPE;
    }
    tw.e = mode != TAPE_NONE ? tape->entries : NULL;
    tw.cap = mode != TAPE_NONE ? tape->cap : 0;
    tw.n = 0;

    p = skip_ws(doc, 0, len);
    if (p >= len) {
        st = HA_JSON_ERR_EMPTY;
        goto fail;
    }
    start = p;

value: /* p: the first byte of a value, whitespace skipped */
    if (p >= len)
        goto fail;
    c = doc[p];
    if ((c | 0x20u) == '{') { /* '{' or '[' */
        if (depth >= max_depth) {
            st = HA_JSON_ERR_DEPTH;
            goto fail;
        }
        in_obj = c == '{';
        if (in_obj)
            kinds[depth / KIND_WORD_BITS] |= 1ull << (depth % KIND_WORD_BITS);
        else
            kinds[depth / KIND_WORD_BITS] &= ~(1ull << (depth % KIND_WORD_BITS));
        if (mode != TAPE_NONE)
            entry[depth] = tape_open(&tw, p, mode);
        depth++;
        p = skip_ws(doc, p + 1, len);
        if (p < len && doc[p] == (in_obj ? '}' : ']')) {
            p++;
            goto close;
        }
        if (in_obj)
            goto key;
        goto value;
    }
    if (mode != TAPE_NONE)
        ti = tape_open(&tw, p, mode);
    switch (c) {
    case '"':
        p++;
        st = scan_string(doc, len, &p, &fl, 0);
        break;
    case 't':
        st = scan_literal(doc, len, &p, "true", 4);
        break;
    case 'f':
        st = scan_literal(doc, len, &p, "false", 5);
        break;
    case 'n':
        st = scan_literal(doc, len, &p, "null", 4);
        break;
    default:
        if (c != '-' && !is_digit(c))
            goto fail;
        st = scan_number(doc, len, &p);
        break;
    }
    if (st != HA_JSON_OK)
        goto fail;
    if (mode != TAPE_NONE)
        tape_close(&tw, ti, p, ti + 1, mode);

after: /* a value ended at p */
    if (depth == 0)
        goto done;
    /* compact JSON has its separator right there: test it before any
       whitespace */
    if (p >= len || doc[p] != ',') {
        p = skip_ws(doc, p, len);
        if (p >= len)
            goto fail;
    }
    if (doc[p] == ',') {
        p = skip_ws(doc, p + 1, len);
        if (in_obj)
            goto key;
        goto value;
    }
    if (doc[p] != (in_obj ? '}' : ']'))
        goto fail;
    p++;

close: /* a container closed just before p */
    depth--;
    if (mode != TAPE_NONE)
        tape_close(&tw, entry[depth], p, tw.n, mode);
    if (depth > 0)
        in_obj = (int)((kinds[(depth - 1) / KIND_WORD_BITS] >>
                        ((depth - 1) % KIND_WORD_BITS)) & 1u);
    goto after;

key: /* p: where a member's key must start, whitespace skipped */
    if (p >= len || doc[p] != '"')
        goto fail;
    if (mode != TAPE_NONE)
        ti = tape_open(&tw, p, mode);
    p++;
    st = scan_string(doc, len, &p, &fl, HA_JSON_FLAG_KEY_ESCAPE);
    if (st != HA_JSON_OK)
        goto fail;
    if (mode != TAPE_NONE)
        tape_close(&tw, ti, p, ti + 1, mode);
    if (p >= len || doc[p] != ':') { /* as after a value */
        p = skip_ws(doc, p, len);
        if (p >= len || doc[p] != ':')
            goto fail;
    }
    p = skip_ws(doc, p + 1, len);
    goto value;

done: {
        size_t end = p;
        p = skip_ws(doc, p, len);
        if (p < len) {
            st = HA_JSON_ERR_TRAILING;
            goto fail;
        }
        if (root) {
            root->start = start;
            root->end = end;
            root->kind = ha_json_kind_of(doc[start]);
            root->tape = mode != TAPE_NONE && tw.n <= tw.cap ? 0 : HA_JSON_NO_TAPE;
        }
        if (flags)
            *flags = fl;
        if (mode != TAPE_NONE)
            tape->n = tw.n;
        return HA_JSON_OK;
    }

fail:
    if (p > len)
        p = len;
    if (err_offset)
        *err_offset = p;
    if (flags)
        *flags = fl;
    /* Every syntax path jumps here with st still OK from its last success
     * or SYNTAX from a scanner: only EMPTY/DEPTH/TRAILING are explicit. */
    return st == HA_JSON_OK ? HA_JSON_ERR_SYNTAX : st;
}

ha_json_status ha_json_parse_tape(const uint8_t *doc, size_t len, unsigned max_depth,
                                  ha_json_val *root, size_t *err_offset,
                                  unsigned *flags, ha_json_tape *tape)
{
    if (tape) {
        tape->n = 0;
        if (len <= tape->cap)
            return parse(doc, len, max_depth, root, err_offset, flags, tape, TAPE_ROOMY);
        if (len <= UINT32_MAX) /* offsets are 32-bit: a longer document scans */
            return parse(doc, len, max_depth, root, err_offset, flags, tape, TAPE_CHECKED);
    }
    return parse(doc, len, max_depth, root, err_offset, flags, NULL, TAPE_NONE);
}

/* ---- spans ------------------------------------------------------------- */

/* End of the string whose body starts at p (past its quote), or 0. */
static inline size_t skip_string(const uint8_t *d, size_t p, size_t end)
{
    for (;;) {
        p = skip_to_quote(d, p, end);
        if (p >= end)
            return 0;
        if (d[p] == '"')
            return p + 1;
        p += 2; /* the backslash and the byte it escapes */
        if (p > end)
            return 0;
    }
}

/* The value starting at d[p], p < end: 1 with *v, or 0 if there is none. */
static inline int skip_value(const uint8_t *d, size_t p, size_t end, ha_json_val *v)
{
    size_t q = p;
    uint8_t c = d[p];
    ha_json_kind k = ha_json_kind_of(c);

    if (k == HA_JSON_ABSENT)
        return 0;
    if (k == HA_JSON_STRING) {
        q = skip_string(d, p + 1, end);
        if (q == 0)
            return 0;
    } else if (k == HA_JSON_OBJECT || k == HA_JSON_ARRAY) {
        size_t level = 0; /* a counter, not a stack: brackets match in accepted docs */
        for (;;) {
            q = skip_to_struct(d, q, end);
            if (q >= end)
                return 0;
            c = d[q];
            if (c == '"') {
                q = skip_string(d, q + 1, end);
                if (q == 0)
                    return 0;
                continue;
            }
            q++;
            if ((c | 0x20u) == '{') {
                level++;
            } else if (--level == 0) {
                break;
            }
        }
    } else if (k == HA_JSON_NUMBER) {
        q++;
        while (q < end && (is_digit(d[q]) || d[q] == '.' || (d[q] | 0x20u) == 'e' ||
                           d[q] == '+' || d[q] == '-'))
            q++;
    } else {
        /* Literals have their length: an accepted document spelled them. */
        q += k == HA_JSON_FALSE ? 5u : 4u;
        if (q > end)
            return 0;
    }
    v->start = p;
    v->end = q;
    v->kind = k;
    v->tape = HA_JSON_NO_TAPE;
    return 1;
}

void ha_json_iter_init(ha_json_iter *it, const uint8_t *doc, ha_json_val container)
{
    ha_json_iter_init_tape(it, doc, container, NULL);
}

void ha_json_iter_init_tape(ha_json_iter *it, const uint8_t *doc, ha_json_val container,
                            const ha_json_tape *tape)
{
    ha_json_iter_start(it, doc, container, tape);
}

/* Past whitespace and the comma that separates members. */
static inline size_t iter_sep(const ha_json_iter *it)
{
    size_t p = skip_ws(it->doc, it->pos, it->end);
    if (p < it->end && it->doc[p] == ',')
        p = skip_ws(it->doc, p + 1, it->end);
    return p;
}

static const ha_json_val absent_val = {0, 0, HA_JSON_ABSENT, HA_JSON_NO_TAPE};

static inline ha_json_val tape_val(const ha_json_iter *it, size_t t)
{
    const ha_json_tape_entry *e = &it->tape->entries[t];
    ha_json_val v = {e->start, e->end, ha_json_kind_of(it->doc[e->start]), (uint32_t)t};
    return v;
}

int ha_json_obj_next(ha_json_iter *it, ha_json_val *key, ha_json_val *value)
{
    size_t p;
    ha_json_val k, v;

    if (it->tape) { /* the parser saw every span: no bytes to look at */
        if (ha_json_obj_next_fast(it, key, value))
            return 1;
        goto stop;
    }
    p = iter_sep(it);
    if (p >= it->end || it->doc[p] != '"' || !skip_value(it->doc, p, it->end, &k))
        goto stop;
    p = skip_ws(it->doc, k.end, it->end);
    if (p >= it->end || it->doc[p] != ':')
        goto stop;
    p = skip_ws(it->doc, p + 1, it->end);
    if (p >= it->end || !skip_value(it->doc, p, it->end, &v))
        goto stop;
    it->pos = v.end;
    *key = k;
    *value = v;
    return 1;
stop:
    it->pos = it->end;
    it->t = it->t_end;
    *key = absent_val;
    *value = absent_val;
    return 0;
}

int ha_json_arr_next(ha_json_iter *it, ha_json_val *value)
{
    size_t p;
    ha_json_val v;

    if (it->tape) {
        if (it->t >= it->t_end) {
            *value = absent_val;
            return 0;
        }
        *value = tape_val(it, it->t);
        it->t = it->tape->entries[it->t].next;
        return 1;
    }
    p = iter_sep(it);
    if (p >= it->end || !skip_value(it->doc, p, it->end, &v)) {
        it->pos = it->end;
        *value = absent_val;
        return 0;
    }
    it->pos = v.end;
    *value = v;
    return 1;
}

static int str_body(ha_json_val s, size_t *p, size_t *end)
{
    if (s.kind != HA_JSON_STRING || s.end <= s.start || s.end - s.start < 2)
        return 0;
    *p = s.start + 1;
    *end = s.end - 1;
    return 1;
}

int ha_json_key_eq(const uint8_t *doc, ha_json_val key, const uint8_t *want,
                   size_t want_len)
{
    size_t p, end, w = 0;
    unsigned fl = 0;

    if (!str_body(key, &p, &end))
        return 0;
    /* Most keys differ in their first byte, which decodes to itself unless
     * it starts an escape or a multibyte sequence. */
    if (p < end && doc[p] < 0x80u && doc[p] != '\\' &&
        (want_len == 0 || doc[p] != want[0]))
        return 0;
    for (;;) {
        /* Compare the bytes that decode to themselves in one go: for a key
         * without escapes or bad UTF-8 this is the whole comparison. */
        size_t q = skip_clean(doc, p, end, 1), n = q - p, k;
        uint8_t u[4];
        if (want_len - w < n || (n && memcmp(want + w, doc + p, n) != 0))
            return 0;
        w += n;
        if (q >= end)
            return w == want_len;
        p = q;
        k = dec_unit(doc, &p, end, u, &fl);
        if (want_len - w < k || memcmp(want + w, u, k) != 0)
            return 0;
        w += k;
    }
}

ha_json_val ha_json_obj_get(const uint8_t *doc, ha_json_val obj, const uint8_t *want,
                            size_t want_len)
{
    return ha_json_obj_get_tape(doc, obj, want, want_len, NULL);
}

ha_json_val ha_json_obj_get_tape(const uint8_t *doc, ha_json_val obj, const uint8_t *want,
                                 size_t want_len, const ha_json_tape *tape)
{
    ha_json_iter it;
    ha_json_val k, v, found = absent_val;

    if (obj.kind != HA_JSON_OBJECT)
        return found;
    ha_json_iter_init_tape(&it, doc, obj, tape);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (ha_json_key_eq(doc, k, want, want_len))
            found = v; /* keep going: the last duplicate wins */
    }
    return found;
}

size_t ha_json_str_max(ha_json_val s)
{
    size_t p, end;
    if (!str_body(s, &p, &end))
        return 0;
    /* Per input byte at most 3 out: a lone bad byte becomes U+FFFD (3),
     * \uXXXX (6) at most 3, a pair (12) 4, an escape (2) 1. */
    return U8_REPLACEMENT_LEN * (end - p);
}

/* Position of the first '\\' at or after p, or end. */
static inline size_t skip_to_backslash(const uint8_t *d, size_t p, size_t end)
{
    SWAR_SCAN(d, p, end, bytes_eq(w, '\\'));
    while (p < end && d[p] != '\\')
        p++;
    return p;
}

/* The shared decoder: JSON string bodies (json) or raw bytes. valid: the
 * bytes are known to be well-formed UTF-8, so only escapes stop the copy. */
static ha_json_status decode(const uint8_t *d, size_t p, size_t end, int json, int valid,
                             uint8_t *out, size_t cap, size_t *out_len, unsigned *fl)
{
    size_t o = 0;
    for (;;) {
        size_t q = valid ? skip_to_backslash(d, p, end) : skip_clean(d, p, end, json);
        size_t n = q - p, k;
        uint8_t u[4];
        if (cap - o < n)
            return HA_JSON_ERR_SPACE;
        if (n)
            memcpy(out + o, d + p, n);
        o += n;
        if (q >= end)
            break;
        p = q;
        /* the usual escape (\" \\ \n ...) here, the rest in dec_unit */
        if (d[p] == '\\' && end - p >= 2 && o < cap && simple_escape(d[p + 1], out + o)) {
            p += 2;
            o++;
            continue;
        }
        k = dec_unit(d, &p, end, u, fl);
        if (cap - o < k)
            return HA_JSON_ERR_SPACE;
        memcpy(out + o, u, k);
        o += k;
    }
    *out_len = o;
    return HA_JSON_OK;
}

static ha_json_status str_decode(const uint8_t *doc, ha_json_val s, int valid, uint8_t *out,
                                 size_t cap, size_t *out_len, unsigned *flags)
{
    size_t p, end;
    unsigned fl = 0;
    ha_json_status st;

    *out_len = 0;
    if (!str_body(s, &p, &end))
        return HA_JSON_ERR_TYPE;
    st = decode(doc, p, end, 1, valid, out, cap, out_len, &fl);
    if (flags)
        *flags |= fl;
    if (st != HA_JSON_OK)
        *out_len = 0;
    return st;
}

ha_json_status ha_json_str_decode(const uint8_t *doc, ha_json_val s, uint8_t *out,
                                  size_t cap, size_t *out_len, unsigned *flags)
{
    return str_decode(doc, s, 0, out, cap, out_len, flags);
}

ha_json_status ha_json_str_decode_valid(const uint8_t *doc, ha_json_val s, uint8_t *out,
                                        size_t cap, size_t *out_len, unsigned *flags)
{
    return str_decode(doc, s, 1, out, cap, out_len, flags);
}

size_t ha_utf8_sanitize(const uint8_t *bytes, size_t n, uint8_t *out, unsigned *flags)
{
    size_t o = 0;
    unsigned fl = 0;
    /* Capacity 3n always suffices (json.h), so this cannot fail. */
    (void)decode(bytes, 0, n, 0, 0, out, U8_REPLACEMENT_LEN * n, &o, &fl);
    if (flags)
        *flags |= fl;
    return o;
}

size_t ha_utf8_count(const uint8_t *p, size_t n)
{
    size_t chars = n, i = 0;
    for (; n - i >= SWAR_BYTES; i += SWAR_BYTES) {
        uint64_t w = load64(p + i), cont = w & ~(w << 1) & HIGHS;
        chars -= (size_t)(((cont >> 7) * ONES) >> 56); /* the sum of its bytes */
    }
    for (; i < n; i++)
        chars -= (p[i] & 0xC0u) == 0x80u;
    return chars;
}

/* ---- numbers ----------------------------------------------------------- */

ha_json_status ha_json_get_i64(const uint8_t *doc, ha_json_val v, int64_t *out)
{
    size_t p = v.start, q;
    int neg = 0;
    uint64_t acc = 0, limit;

    if (v.kind != HA_JSON_NUMBER || v.end <= v.start)
        return HA_JSON_ERR_TYPE;
    if (doc[p] == '-') {
        neg = 1;
        p++;
    }
    if (p >= v.end)
        return HA_JSON_ERR_TYPE;
    /* Grammar first, so 1e999 and 1.5 are TYPE whatever their size. */
    for (q = p; q < v.end; q++) {
        if (!is_digit(doc[q]))
            return HA_JSON_ERR_TYPE;
    }
    /* Accumulate the magnitude unsigned: INT64_MIN's does not fit int64. */
    limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
    for (; p < v.end; p++) {
        unsigned dgt = (unsigned)(doc[p] - '0');
        if (acc > (limit - dgt) / 10u)
            return HA_JSON_ERR_RANGE;
        acc = acc * 10u + dgt;
    }
    if (neg)
        *out = acc == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)acc;
    else
        *out = (int64_t)acc;
    return HA_JSON_OK;
}

/* Writes the decimal digits of x (>= 0) at b, returns the count. */
static size_t put_dec(int64_t x, char *b)
{
    char tmp[24];
    size_t n = 0, i;
    do {
        tmp[n++] = (char)('0' + (int)(x % 10));
        x /= 10;
    } while (x);
    for (i = 0; i < n; i++)
        b[i] = tmp[n - 1 - i];
    return n;
}

/* The number is rewritten as [-]DIGITSe[-]EXP: significant digits only
 * (capped with a sticky digit, see F64_SIG_DIGITS) and no decimal point, so
 * strtod sees a bounded input that no locale can misread. */
ha_json_status ha_json_get_f64(const uint8_t *doc, ha_json_val v, double *out)
{
    char buf[F64_BUF_LEN];
    size_t p = v.start, n = 0, nd = 0, q;
    int neg = 0, sticky = 0, started = 0;
    int64_t e10 = 0, ex = 0;
    char *endp;
    double r;

    if (v.kind != HA_JSON_NUMBER || v.end <= v.start)
        return HA_JSON_ERR_TYPE;
    if (doc[p] == '-') {
        neg = 1;
        p++;
    }
    if (p >= v.end || !is_digit(doc[p]))
        return HA_JSON_ERR_TYPE;
    if (neg)
        buf[n++] = '-';
    /* value = DIGITS * 10^e10 */
    for (; p < v.end && is_digit(doc[p]); p++) {
        if (!started && doc[p] == '0')
            continue;
        started = 1;
        if (nd < F64_SIG_DIGITS) {
            buf[n++] = (char)doc[p];
            nd++;
        } else {
            sticky |= doc[p] != '0';
            e10++;
        }
    }
    if (p < v.end && doc[p] == '.') {
        p++;
        if (p >= v.end || !is_digit(doc[p]))
            return HA_JSON_ERR_TYPE;
        for (; p < v.end && is_digit(doc[p]); p++) {
            if (!started && doc[p] == '0') {
                e10--;
                continue;
            }
            started = 1;
            if (nd < F64_SIG_DIGITS) {
                buf[n++] = (char)doc[p];
                nd++;
                e10--;
            } else {
                sticky |= doc[p] != '0';
            }
        }
    }
    if (p < v.end && (doc[p] | 0x20u) == 'e') {
        int eneg = 0;
        p++;
        if (p < v.end && (doc[p] == '+' || doc[p] == '-')) {
            eneg = doc[p] == '-';
            p++;
        }
        if (p >= v.end || !is_digit(doc[p]))
            return HA_JSON_ERR_TYPE;
        for (; p < v.end && is_digit(doc[p]); p++) {
            if (ex < F64_EXP_CLAMP)
                ex = ex * 10 + (doc[p] - '0');
        }
        e10 += eneg ? -ex : ex;
    }
    if (p != v.end)
        return HA_JSON_ERR_TYPE;
    if (nd == 0) {
        *out = neg ? -0.0 : 0.0;
        return HA_JSON_OK;
    }
    if (sticky) {
        buf[n++] = '1'; /* strictly between the kept digits and the next */
        nd++;
        e10--;
    }
    if ((int64_t)nd - 1 + e10 > F64_DEC_EXP_MAX)
        return HA_JSON_ERR_RANGE;
    if ((int64_t)nd + e10 < F64_DEC_EXP_MIN) {
        *out = neg ? -0.0 : 0.0;
        return HA_JSON_OK;
    }
    buf[n++] = 'e';
    if (e10 < 0) {
        buf[n++] = '-';
        e10 = -e10;
    }
    n += put_dec(e10, buf + n);
    buf[n] = '\0';
    r = strtod(buf, &endp);
    q = (size_t)(endp - buf);
    if (q != n)
        return HA_JSON_ERR_TYPE; /* cannot happen with digits only; never guess */
    if (isinf(r))
        return HA_JSON_ERR_RANGE;
    *out = r;
    return HA_JSON_OK;
}

ha_json_status ha_json_get_bool(ha_json_val v, int *out)
{
    if (v.kind == HA_JSON_TRUE)
        *out = 1;
    else if (v.kind == HA_JSON_FALSE)
        *out = 0;
    else
        return HA_JSON_ERR_TYPE;
    return HA_JSON_OK;
}

/* ---- a whole document in one call -------------------------------------- */

/* A scalar of an accepted document at doc[p] into w (NULL: only counted);
 * returns the byte after it, or 0 with *st set. */
static size_t flat_scalar(const uint8_t *doc, size_t p, size_t end, int valid, int64_t *w,
                          uint8_t *text, size_t text_cap, size_t *t_len, size_t *t_chars,
                          ha_json_status *st)
{
    ha_json_val v;
    if (!skip_value(doc, p, end, &v)) { /* cannot happen once accepted */
        *st = HA_JSON_ERR_SYNTAX;
        return 0;
    }
    if (!w)
        return v.end;
    w[0] = v.kind;
    if (v.kind == HA_JSON_STRING) {
        size_t n = 0;
        if (ha_json_str_max(v) > text_cap - *t_len ||
            str_decode(doc, v, valid, text + *t_len, text_cap - *t_len, &n, NULL) != HA_JSON_OK) {
            *st = HA_JSON_ERR_SPACE;
            return 0;
        }
        w[1] = (int64_t)*t_chars;
        *t_chars += ha_utf8_count(text + *t_len, n);
        *t_len += n;
        w[2] = (int64_t)*t_chars;
    } else if (v.kind == HA_JSON_NUMBER) {
        double d;
        ha_json_status s = ha_json_get_i64(doc, v, &w[1]);
        if (s == HA_JSON_OK) {
            w[3] = HA_JSON_FLAT_INT;
        } else if (s == HA_JSON_ERR_RANGE) { /* integer grammar, beyond int64 */
            w[1] = (int64_t)v.start;
            w[2] = (int64_t)v.end;
            w[3] = HA_JSON_FLAT_BIG;
        } else if ((s = ha_json_get_f64(doc, v, &d)) == HA_JSON_OK) {
            memcpy(&w[1], &d, sizeof d);
            w[3] = HA_JSON_FLAT_F64;
        } else {
            *st = s;
            return 0;
        }
    }
    return v.end;
}

ha_json_status ha_json_flatten(const uint8_t *doc, size_t len, unsigned max_depth,
                               int64_t *words, size_t n_words, size_t *n_values,
                               uint8_t *text, size_t text_cap, size_t *text_len,
                               size_t *err_offset, unsigned *flags)
{
    /* each open container: its count so far, times 2, plus 1 for an object */
    size_t open[HA_JSON_DEPTH_LIMIT];
    size_t depth = 0, n = 0, cap = words ? n_words / HA_JSON_FLAT_WORDS : 0;
    size_t t_len = 0, t_chars = 0, p;
    int key_next = 0; /* in an object, after '{' or ',': a key comes */
    ha_json_val root;
    unsigned fl = 0;
    ha_json_status st = ha_json_parse(doc, len, max_depth, &root, err_offset, &fl);

    if (flags)
        *flags = fl;
    *n_values = 0;
    *text_len = 0;
    if (st != HA_JSON_OK)
        return st;
    /* The document is accepted: a walk of its bytes meets values, keys,
     * brackets and separators only, and brackets match. */
    for (p = root.start; p < root.end;) {
        uint8_t c = doc[p];
        size_t next;
        if (c == ',' || c == ':' || is_ws(c)) {
            if (c == ',')
                key_next = (int)(open[depth - 1] & 1u);
            p++;
            continue;
        }
        if (c == '}' || c == ']') { /* written when closed: after its contents */
            depth--;
            if (n < cap) {
                words[n * HA_JSON_FLAT_WORDS] = c == '}' ? HA_JSON_OBJECT : HA_JSON_ARRAY;
                words[n * HA_JSON_FLAT_WORDS + 1] = (int64_t)(open[depth] / 2);
            }
            n++;
            key_next = 0;
            p++;
            continue;
        }
        if (!key_next && depth > 0)
            open[depth - 1] += 2;
        if (c == '{' || c == '[') {
            open[depth++] = c == '{';
            key_next = c == '{';
            p++;
            continue;
        }
        key_next = 0;
        st = HA_JSON_OK;
        next = flat_scalar(doc, p, root.end, !(fl & HA_JSON_FLAG_BAD_UTF8),
                           n < cap ? words + n * HA_JSON_FLAT_WORDS : NULL, text, text_cap,
                           &t_len, &t_chars, &st);
        if (next == 0) {
            if (err_offset)
                *err_offset = p;
            return st;
        }
        n++;
        p = next;
    }
    *n_values = n;
    if (n > cap)
        return HA_JSON_ERR_SPACE;
    *text_len = t_len;
    return HA_JSON_OK;
}

/* ---- a member's key in bytes that may not parse (json.h) ---- */

void ha_json_keyscan_init(ha_json_keyscan *s, const char *key, size_t key_len, size_t depth)
{
    memset(s, 0, sizeof *s);
    s->key = key;
    s->key_len = key_len;
    s->depth_want = depth;
}

int ha_json_keyscan_feed(ha_json_keyscan *s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n && !s->found; i++) {
        uint8_t b = p[i];
        if (s->in_str) {
            if (!s->candidate && !s->escape) {
                /* not the key: on to the next quote or backslash */
                while (i < n && p[i] != '"' && p[i] != '\\')
                    i++;
                if (i == n)
                    break;
                b = p[i];
            }
            if (s->escape) {
                s->escape = 0;
            } else if (b == '\\') {
                s->escape = 1;
                s->candidate = 0;
            } else if (b == '"') {
                s->in_str = 0;
                s->colon = s->candidate && s->matched == s->key_len;
            } else if (s->candidate) {
                s->candidate = s->matched < s->key_len && b == (uint8_t)s->key[s->matched];
                s->matched++;
            }
            continue;
        }
        if (s->colon) {
            if (b == ' ' || b == '\t' || b == '\n' || b == '\r')
                continue;
            s->found = b == ':';
            s->colon = 0;
        }
        if (b == '"') {
            s->in_str = 1;
            s->candidate = s->depth == s->depth_want;
            s->matched = 0;
        } else if (b == '{' || b == '[') {
            s->depth++;
        } else if ((b == '}' || b == ']') && s->depth > 0) {
            s->depth--;
        }
    }
    return s->found;
}

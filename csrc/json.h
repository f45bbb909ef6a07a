/* Strict JSON (RFC 8259) scanner over a sized span.
 *
 * ha_json_parse() validates a whole document in one pass, with no
 * allocation, and returns the span of its top value. Everything else works
 * on spans of a document that ha_json_parse() accepted: iterating members
 * and elements, looking up keys, and extracting values on demand.
 *
 * Rules (each has a test):
 *  - RFC 8259 grammar exactly: no trailing commas, single quotes, comments,
 *    leading zeros, leading '+', NaN/Infinity, raw control characters
 *    (< 0x20) in strings, escapes other than \" \\ \/ \b \f \n \r \t \uXXXX,
 *    a BOM, or anything but whitespace after the top value.
 *  - nesting deeper than max_depth (HA_JSON_MAX_DEPTH by default) is
 *    HA_JSON_ERR_DEPTH, not a syntax error.
 *  - bytes >= 0x80 are allowed only inside strings. Invalid UTF-8 there is
 *    not a syntax error: decoding replaces each maximal invalid subsequence
 *    with U+FFFD exactly as Python's bytes.decode("utf-8", "replace") does,
 *    and HA_JSON_FLAG_BAD_UTF8 is set.
 *  - a \u escape of an unpaired surrogate is accepted (the grammar allows
 *    it); decoding gives U+FFFD and HA_JSON_FLAG_LONE_SURROGATE is set.
 *  - duplicate keys are allowed; lookup returns the last one.
 *  - numbers: any grammatical number is accepted by the scanner. Extraction
 *    of an integer outside int64 is HA_JSON_ERR_RANGE; of a float whose
 *    magnitude overflows a double is HA_JSON_ERR_RANGE; a float underflow
 *    rounds to zero (or the nearest subnormal) and is not an error.
 */
#ifndef HA_JSON_H
#define HA_JSON_H

#include <stddef.h>
#include <stdint.h>

#define HA_JSON_MAX_DEPTH 64u
/* Hard ceiling on max_depth: the parser's container stack is a bitset of
 * this many bits on its own stack frame (128 bytes). */
#define HA_JSON_DEPTH_LIMIT 1024u

typedef enum {
    HA_JSON_OK = 0,
    HA_JSON_ERR_EMPTY = 1,     /* nothing but whitespace */
    HA_JSON_ERR_SYNTAX = 2,    /* not RFC 8259; *err_offset says where */
    HA_JSON_ERR_DEPTH = 3,     /* nested deeper than max_depth */
    HA_JSON_ERR_TRAILING = 4,  /* a valid value followed by more than whitespace */
    HA_JSON_ERR_TYPE = 5,      /* extraction asked for another kind of value */
    HA_JSON_ERR_RANGE = 6,     /* number out of range for the requested type */
    HA_JSON_ERR_SPACE = 7      /* the output buffer is too small */
} ha_json_status;

typedef enum {
    HA_JSON_ABSENT = 0, /* no such member or element: distinct from null */
    HA_JSON_NULL = 1,
    HA_JSON_FALSE = 2,
    HA_JSON_TRUE = 3,
    HA_JSON_NUMBER = 4,
    HA_JSON_STRING = 5,
    HA_JSON_ARRAY = 6,
    HA_JSON_OBJECT = 7
} ha_json_kind;

#define HA_JSON_FLAG_BAD_UTF8 1u       /* a string holds invalid UTF-8 */
#define HA_JSON_FLAG_LONE_SURROGATE 2u /* a string escapes a lone surrogate */
#define HA_JSON_FLAG_KEY_ESCAPE 4u     /* a key holds an escape: keys must be
                                          decoded to compare (ha_json_key_eq);
                                          without it their raw bytes are exact */

#define HA_JSON_NO_TAPE UINT32_MAX

/* A value: byte offsets [start, end) into its document. A string's span
 * includes its quotes. kind == HA_JSON_ABSENT has start == end == 0. tape is
 * its entry in the document's tape, or HA_JSON_NO_TAPE. */
typedef struct {
    size_t start;
    size_t end;
    ha_json_kind kind;
    uint32_t tape;
} ha_json_val;

/* Validate doc[0 .. len). On success *root is the top value (surrounding
 * whitespace excluded) and *flags has the HA_JSON_FLAG_* bits of all its
 * strings, keys included. On failure *err_offset is the offset of the first
 * byte that cannot continue a valid document (len when it ends too soon).
 *
 * Depth counts open containers: a scalar is depth 0, `[]` depth 1, `[{}]`
 * depth 2; depth == max_depth is accepted, one more is HA_JSON_ERR_DEPTH
 * with *err_offset at the bracket that went too deep. max_depth 0 means
 * HA_JSON_MAX_DEPTH; above HA_JSON_DEPTH_LIMIT it is clamped to it.
 * HA_JSON_ERR_TRAILING and HA_JSON_ERR_EMPTY set *err_offset too (first
 * byte after the value; len). err_offset and flags may be NULL. */
ha_json_status ha_json_parse(const uint8_t *doc, size_t len, unsigned max_depth,
                             ha_json_val *root, size_t *err_offset,
                             unsigned *flags);

/* The spans the parser found, so that iteration reads them instead of
 * rescanning bytes: one entry per value and per key, in document order. A
 * container's `next` is the entry after its last descendant, so skipping
 * it is one step. The caller owns the entries; a document with more than
 * cap entries (n says how many) gets no tape and is iterated by scanning. */
typedef struct {
    uint32_t start, end; /* the span, as in ha_json_val */
    uint32_t next;       /* the entry after this value and all it holds */
} ha_json_tape_entry;

typedef struct {
    ha_json_tape_entry *entries;
    size_t cap;
    size_t n;
} ha_json_tape;

/* ha_json_parse that also fills *tape (which may be NULL). */
ha_json_status ha_json_parse_tape(const uint8_t *doc, size_t len, unsigned max_depth,
                                  ha_json_val *root, size_t *err_offset,
                                  unsigned *flags, ha_json_tape *tape);

/* Iteration over an array or object span of an accepted document. */
typedef struct {
    const uint8_t *doc;
    size_t pos;
    size_t end;
    const ha_json_tape *tape; /* NULL: spans are found by scanning */
    size_t t, t_end;          /* next tape entry, and the container's end */
} ha_json_iter;

void ha_json_iter_init(ha_json_iter *it, const uint8_t *doc, ha_json_val container);
/* The same with the tape ha_json_parse_tape filled for this document. */
void ha_json_iter_init_tape(ha_json_iter *it, const uint8_t *doc, ha_json_val container,
                            const ha_json_tape *tape);
/* ha_json_iter_init_tape() inline, for the extractors' hot paths. */
static inline void ha_json_iter_start(ha_json_iter *it, const uint8_t *doc, ha_json_val container,
                                      const ha_json_tape *tape)
{
    it->doc = doc;
    it->tape = NULL;
    it->t = it->t_end = 0;
    if ((container.kind == HA_JSON_ARRAY || container.kind == HA_JSON_OBJECT) &&
        container.end > container.start && container.end - container.start >= 2) {
        it->pos = container.start + 1;
        it->end = container.end - 1; /* the closing bracket */
        if (tape && tape->n <= tape->cap && container.tape < tape->n &&
            tape->entries[container.tape].start == container.start &&
            tape->entries[container.tape].end == container.end) {
            it->tape = tape;
            it->t = container.tape + 1;
            it->t_end = tape->entries[container.tape].next;
        }
    } else {
        it->pos = it->end = 0;
    }
}

/* Next member: 1 with *key (a string span) and *value, or 0 at the end. */
int ha_json_obj_next(ha_json_iter *it, ha_json_val *key, ha_json_val *value);

/* The kind of the value that starts with each byte; ABSENT when none can. */
extern const uint8_t ha_json_kinds[256];

static inline ha_json_kind ha_json_kind_of(uint8_t c)
{
    return (ha_json_kind)ha_json_kinds[c];
}

/* ha_json_obj_next() inline for an iterator on a tape, which is only loads:
 * a member lookup loop pays no call per member. 0 when there is no tape or
 * no member left (ha_json_obj_next() then tells which). */
static inline int ha_json_obj_next_fast(ha_json_iter *it, ha_json_val *key, ha_json_val *value)
{
    const ha_json_tape_entry *e;
    size_t t = it->t;
    if (!it->tape || t + 1 >= it->t_end)
        return 0;
    e = it->tape->entries;
    key->start = e[t].start;
    key->end = e[t].end;
    key->kind = HA_JSON_STRING;
    key->tape = (uint32_t)t;
    value->start = e[t + 1].start;
    value->end = e[t + 1].end;
    value->kind = ha_json_kind_of(it->doc[e[t + 1].start]);
    value->tape = (uint32_t)(t + 1);
    it->t = e[t + 1].next;
    return 1;
}
/* Next element: 1 with *value, or 0 at the end. */
int ha_json_arr_next(ha_json_iter *it, ha_json_val *value);

/* Whether key (a string span) decodes to exactly want[0 .. want_len). */
int ha_json_key_eq(const uint8_t *doc, ha_json_val key,
                   const uint8_t *want, size_t want_len);
/* The value of the last member named want, or an HA_JSON_ABSENT value. */
ha_json_val ha_json_obj_get(const uint8_t *doc, ha_json_val obj,
                            const uint8_t *want, size_t want_len);
ha_json_val ha_json_obj_get_tape(const uint8_t *doc, ha_json_val obj,
                                 const uint8_t *want, size_t want_len,
                                 const ha_json_tape *tape);

/* Largest decoded size of a string span: the out capacity that always fits. */
size_t ha_json_str_max(ha_json_val s);
/* Decode a string span as UTF-8 into out[0 .. cap). *out_len gets the
 * length (0 unless HA_JSON_OK); *flags gets the HA_JSON_FLAG_* bits of this
 * string (OR-ed in; flags may be NULL). */
ha_json_status ha_json_str_decode(const uint8_t *doc, ha_json_val s,
                                  uint8_t *out, size_t cap, size_t *out_len,
                                  unsigned *flags);
/* ha_json_str_decode() for a string of a document whose flags had no
 * HA_JSON_FLAG_BAD_UTF8: its bytes are copied as they are up to each
 * escape, not checked again. */
ha_json_status ha_json_str_decode_valid(const uint8_t *doc, ha_json_val s,
                                        uint8_t *out, size_t cap, size_t *out_len,
                                        unsigned *flags);
/* Integer grammar only: a fraction or exponent is HA_JSON_ERR_TYPE. */
ha_json_status ha_json_get_i64(const uint8_t *doc, ha_json_val v, int64_t *out);
/* Correctly rounded whatever the number's length, independent of the C
 * locale's decimal point. */
ha_json_status ha_json_get_f64(const uint8_t *doc, ha_json_val v, double *out);
ha_json_status ha_json_get_bool(ha_json_val v, int *out);

/* Append bytes[0 .. n) to out as UTF-8 with the same replacement rule as
 * strings (for SSE names and ids). Returns the bytes written (at most 3n);
 * sets HA_JSON_FLAG_BAD_UTF8 in *flags if anything was replaced. */
size_t ha_utf8_sanitize(const uint8_t *bytes, size_t n, uint8_t *out,
                        unsigned *flags);

/* Code points in n bytes of valid UTF-8: the bytes that are no
 * continuation byte (10xxxxxx). */
size_t ha_utf8_count(const uint8_t *p, size_t n);

/* ---- a whole document in one call ---- */

/* ha_json_flatten() writes each value as HA_JSON_FLAT_WORDS int64 words,
 * in postorder (a container after what it holds, so that a caller can
 * build it from a stack of the values before it): its kind
 * (ha_json_kind), then
 *   OBJECT, ARRAY  the number of members or elements, just before it (a
 *                  member as its key, a STRING, then its value)
 *   STRING         its decoded text: [start, end) in code points of text
 *   NUMBER         the value and its form in the last word:
 *                  HA_JSON_FLAT_INT an int64, HA_JSON_FLAT_F64 the bits of
 *                  a double, HA_JSON_FLAT_BIG an integer outside int64 as
 *                  its span [start, end) of doc
 * and nothing for null, false and true. */
#define HA_JSON_FLAT_WORDS 4
#define HA_JSON_FLAT_INT 0
#define HA_JSON_FLAT_F64 1
#define HA_JSON_FLAT_BIG 2

/* Parse doc[0 .. len) and write all its values, keys included, for a
 * caller that builds its own objects in one pass over them rather than one
 * call per value. The status, *err_offset and *flags are ha_json_parse()'s;
 * on an accepted document, a float that overflows a double is then
 * HA_JSON_ERR_RANGE with *err_offset at its first byte. *n_values gets the
 * number of values (keys included) whatever words can hold: when it is
 * more than n_words / HA_JSON_FLAT_WORDS (words may be NULL), the status is
 * HA_JSON_ERR_SPACE and nothing is usable. text takes every string decoded
 * (3 * len bytes always suffice); *text_len gets its length in bytes. */
ha_json_status ha_json_flatten(const uint8_t *doc, size_t len, unsigned max_depth,
                               int64_t *words, size_t n_words, size_t *n_values,
                               uint8_t *text, size_t text_cap, size_t *text_len,
                               size_t *err_offset, unsigned *flags);

/* ---- a member's key in bytes that may not parse ---- */

/* Whether JSON bytes, fed in pieces, hold a member named key at a depth (1:
 * the root object's members), for bytes that will not be parsed (a line
 * over a buffer, a document the parser rejected). Strings are told from
 * structure, so the name inside a string value is no member; no stack, a
 * counter for the depth, constant memory, each byte looked at once. Bytes
 * that are not JSON give some answer, never a fault. A key spelled with
 * escapes is not recognised. */
typedef struct {
    const char *key;
    size_t key_len;
    size_t depth_want;
    size_t depth;       /* containers open */
    size_t matched;     /* bytes of key the string so far matches */
    unsigned char in_str, escape, candidate, colon, found;
} ha_json_keyscan;

void ha_json_keyscan_init(ha_json_keyscan *s, const char *key, size_t key_len, size_t depth);
/* Scan the next n bytes; returns s->found, which stays once set. */
int ha_json_keyscan_feed(ha_json_keyscan *s, const uint8_t *p, size_t n);

#endif

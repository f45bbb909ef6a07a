/* libFuzzer target for the batch layer: any bytes, any protocol, any split,
 * a small output area so the output-full path is taken often.
 * Invariants (trap on violation):
 *  - the text area of each call is valid UTF-8 and records address it within
 *    its code points; raw spans lie within the raw bytes written;
 *  - the concatenated text of all text deltas is the same whatever the
 *    split and however full the output area gets (coalescing only merges
 *    neighbours, so their order is kept). */
#include <stdlib.h>
#include <string.h>

#include "extract.h"

#define CAP 256u
#define MAX_TEXT 65536u

typedef struct {
    ha_stream st;
    uint8_t sse[CAP];
    int64_t recs[HA_REC_HEADER + 8 * HA_REC_WORDS];
    uint8_t text[3 * CAP + 4096];
    uint8_t raw[CAP + 1024];
    uint8_t out[MAX_TEXT]; /* the text of every text delta, in order */
    size_t out_len;
} run;

static int valid_utf8(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        size_t need;
        uint32_t cp;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
            cp = b & 0x1Fu;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            cp = b & 0x0Fu;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            cp = b & 0x07u;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + k] & 0x3Fu);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* Byte offset of code point k in p[0 .. n). */
static size_t byte_of(const uint8_t *p, size_t n, int64_t k)
{
    size_t i = 0;
    for (int64_t c = 0; c < k; c++) {
        if (i >= n)
            __builtin_trap();
        i++;
        while (i < n && (p[i] & 0xC0) == 0x80)
            i++;
    }
    return i;
}

static void check_call(run *r, size_t n)
{
    size_t text_len = (size_t)r->recs[HA_HDR_TEXT];
    if (text_len > sizeof r->text || !valid_utf8(r->text, text_len))
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        const int64_t *w = r->recs + HA_REC_HEADER + i * HA_REC_WORDS;
        if (w[HA_WORD_KIND] < HA_REC_SSE_EVENT || w[HA_WORD_KIND] > HA_REC_TIMINGS)
            __builtin_trap();
        int counts = w[HA_WORD_KIND] == HA_REC_USAGE || w[HA_WORD_KIND] == HA_REC_TIMINGS;
        if (!counts)
            for (int s = HA_WORD_S1; s <= HA_WORD_S3; s += 2)
                if (w[s] != -1 && (w[s] > w[s + 1] || byte_of(r->text, text_len, w[s + 1]) > text_len))
                    __builtin_trap();
        if (!counts && w[HA_WORD_RAW] != -1 &&
            (w[HA_WORD_RAW] > w[HA_WORD_RAW_END] || w[HA_WORD_RAW_END] > (int64_t)sizeof r->raw))
            __builtin_trap();
        if (w[HA_WORD_KIND] == HA_REC_TEXT) {
            size_t a = byte_of(r->text, text_len, w[HA_WORD_S1]);
            size_t b = byte_of(r->text, text_len, w[HA_WORD_S1_END]);
            if (r->out_len + (b - a) > MAX_TEXT)
                __builtin_trap(); /* inputs are far smaller than this */
            memcpy(r->out + r->out_len, r->text + a, b - a);
            r->out_len += b - a;
        }
    }
}

/* ha_stream_feed_packed's return: a count, or the one plain delta it
 * packs, which must be the record written. */
static size_t unpack_count(const run *r, int64_t v)
{
    if (v >= 0)
        return (size_t)v;
    int64_t p = -1 - v;
    const int64_t *w = r->recs + HA_REC_HEADER;
    static const int64_t kinds[] = {[HA_PACKED_TEXT] = HA_REC_TEXT,
                                    [HA_PACKED_REASONING] = HA_REC_REASONING,
                                    [HA_PACKED_REFUSAL] = HA_REC_REFUSAL};
    int64_t kind = p & ((1 << HA_PACKED_KIND_BITS) - 1);
    if (kind > HA_PACKED_REFUSAL || w[HA_WORD_KIND] != kinds[kind] ||
        w[HA_WORD_INDEX] != (p >> HA_PACKED_KIND_BITS & (HA_PACKED_MAX_INDEX - 1)) ||
        r->recs[HA_HDR_TEXT] != p >> HA_PACKED_TEXT_SHIFT || r->recs[HA_HDR_FULL] ||
        w[HA_WORD_SUB] != -1 || w[HA_WORD_S2] != -1 || w[HA_WORD_S1] != 0)
        __builtin_trap();
    return 1;
}

/* Feed data in pieces of the given sizes, draining the output area; the
 * split run through ha_stream_feed_packed, which must write the same. */
static void feed_all(run *r, ha_protocol proto, const uint8_t *data, size_t size,
                     const uint8_t *splits, size_t n_splits)
{
    if (ha_stream_init(&r->st, proto, r->sse, CAP, r->recs,
                       sizeof r->recs / sizeof *r->recs, r->text, sizeof r->text,
                       r->raw, sizeof r->raw) != 0)
        __builtin_trap();
    size_t pos = 0, k = 0;
    while (pos < size) {
        size_t piece = n_splits ? (size_t)splits[k++ % n_splits] + 1 : size;
        if (piece > size - pos)
            piece = size - pos;
        const uint8_t *in = data + pos;
        size_t left = piece;
        for (;;) {
            size_t n = n_splits ? unpack_count(r, ha_stream_feed_packed(&r->st, in, left))
                                : ha_stream_feed(&r->st, in, left);
            check_call(r, n);
            size_t used = (size_t)r->recs[HA_HDR_CONSUMED];
            if (used > left)
                __builtin_trap();
            in += used;
            left -= used;
            if (!r->recs[HA_HDR_FULL])
                break;
        }
        if (left != 0)
            __builtin_trap();
        pos += piece;
    }
    check_call(r, ha_stream_close(&r->st));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    ha_protocol proto = (ha_protocol)(data[0] % (HA_PROTO_OLLAMA + 1));
    size_t n_splits = data[1] % 8;
    if (size < 2 + n_splits)
        return 0;
    const uint8_t *splits = data + 2;
    const uint8_t *body = data + 2 + n_splits;
    size_t body_len = size - 2 - n_splits;

    run *whole = calloc(1, sizeof *whole);
    run *split = calloc(1, sizeof *split);
    if (!whole || !split)
        abort();
    feed_all(whole, proto, body, body_len, NULL, 0);
    feed_all(split, proto, body, body_len, splits, n_splits);
    if (whole->out_len != split->out_len || memcmp(whole->out, split->out, whole->out_len) != 0)
        __builtin_trap();
    free(whole);
    free(split);
    return 0;
}

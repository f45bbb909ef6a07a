/* libFuzzer target for the SSE framer.
 *
 * Input: byte 0 picks the data buffer capacity (16..300, small so that the
 * overflow paths are hit), byte 1 the way the rest is split into reads, the
 * rest is the stream. Traps when:
 *  (a) the stream fed whole and fed in pieces give different outcomes
 *      (status, data, name, id, size) or different ha_sse_finish() results;
 *  (b) a report breaks its bounds (data_len > capacity, name, id, preview);
 *  (c) *pos moves back, passes len, a report consumes nothing, or
 *      NEED_INPUT leaves input unconsumed;
 *  (d) the outcomes differ from a naive reference that splits the whole
 *      stream into lines first (the specification read literally).
 */
#include "sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "olog.h"

/* ---- outcome log ---- */

static void log_size(olog *l, uint64_t v)
{
    log_add(l, &v, sizeof v);
}

static void log_bytes(olog *l, const uint8_t *p, size_t n)
{
    log_size(l, n);
    log_add(l, p, n);
}

static void log_status(olog *l, int st)
{
    uint8_t b = (uint8_t)st;
    log_add(l, &b, 1);
}

static void log_event(olog *l, const uint8_t *data, size_t data_len,
                      const uint8_t *name, size_t name_len, const uint8_t *id,
                      size_t id_len, int has_id)
{
    log_status(l, HA_SSE_EVENT);
    log_bytes(l, data, data_len);
    log_bytes(l, name, name_len);
    log_size(l, (uint64_t)has_id);
    if (has_id)
        log_bytes(l, id, id_len);
}

static void log_unknown(olog *l, const uint8_t *name, size_t name_len,
                        const uint8_t *preview, size_t preview_len,
                        size_t size)
{
    log_status(l, HA_SSE_UNKNOWN_FIELD);
    log_bytes(l, name, name_len);
    log_bytes(l, preview, preview_len);
    log_size(l, size);
}

static void log_error(olog *l, int st, size_t size)
{
    log_status(l, st);
    log_size(l, size);
}

static void log_end(olog *l, unsigned flags, size_t pending, int64_t retry)
{
    log_status(l, 0xFF);
    log_size(l, flags);
    log_size(l, pending);
    log_size(l, (uint64_t)retry);
}

/* ---- the framer, fed in pieces ---- */

static void feed(ha_sse *s, const uint8_t *in, size_t len, size_t cap,
                 olog *l)
{
    size_t pos = 0;
    for (;;) {
        ha_sse_event ev;
        size_t before = pos;
        ha_sse_status st = ha_sse_next(s, in, len, &pos, &ev);
        if (pos < before || pos > len) /* (c) */
            __builtin_trap();
        if (st == HA_SSE_NEED_INPUT) {
            if (pos != len)
                __builtin_trap();
            return;
        }
        if (pos == before)
            __builtin_trap();
        switch (st) {
        case HA_SSE_EVENT:
            if (ev.data_len > cap || ev.name_len > HA_SSE_NAME_MAX ||
                ev.id_len > HA_SSE_ID_MAX) /* (b) */
                __builtin_trap();
            log_event(l, ev.data, ev.data_len, ev.name, ev.name_len, ev.id,
                      ev.id_len, ev.has_id);
            break;
        case HA_SSE_UNKNOWN_FIELD:
            if (ev.name_len > HA_SSE_FIELD_MAX ||
                ev.data_len > HA_SSE_PREVIEW_MAX ||
                ev.data_len > ev.size)
                __builtin_trap();
            log_unknown(l, ev.name, ev.name_len, ev.data, ev.data_len,
                        ev.size);
            break;
        case HA_SSE_ERR_EVENT_TOO_LARGE:
        case HA_SSE_ERR_NAME_TOO_LONG:
        case HA_SSE_ERR_ID_TOO_LONG:
            log_error(l, st, ev.size);
            break;
        default:
            __builtin_trap();
        }
    }
}

/* Split pattern from byte 1: low two bits choose the kind. */
static size_t next_cut(unsigned mode, uint32_t *rng, const uint8_t *in,
                       size_t at, size_t len)
{
    size_t n;
    switch (mode & 3u) {
    case 0: /* byte by byte */
        return at + 1;
    case 1: /* fixed size reads */
        n = 1 + (mode >> 2) % 17u;
        return len - at < n ? len : at + n;
    case 2: /* random sizes, empty reads included */
        *rng ^= *rng << 13;
        *rng ^= *rng >> 17;
        *rng ^= *rng << 5;
        n = *rng % 12u;
        return len - at < n ? len : at + n;
    default: /* right after each CR and each BOM byte: pairs split */
        n = at;
        while (n < len && in[n] != '\r' && in[n] != 0xEF && in[n] != 0xBB)
            n++;
        return n < len ? n + 1 : len;
    }
}

static void run_framer(const uint8_t *in, size_t len, size_t cap,
                       int pieces, unsigned mode, olog *l)
{
    uint8_t *buf = malloc(cap);
    uint32_t rng = 0x9E3779B9u ^ mode;
    ha_sse s;
    size_t at = 0, pending = 0, pending2 = 1;
    unsigned flags;
    ha_sse_init(&s, buf, cap);
    if (!pieces) {
        feed(&s, in, len, cap, l);
    } else {
        while (at < len) {
            size_t end = next_cut(mode, &rng, in, at, len);
            /* A fresh copy per read: nothing may point into old input. */
            uint8_t *piece = malloc(end - at + 1);
            memcpy(piece, in + at, end - at);
            feed(&s, piece, end - at, cap, l);
            free(piece);
            at = end;
        }
    }
    flags = ha_sse_finish(&s, &pending);
    if (ha_sse_finish(&s, &pending2) != flags || pending2 != pending)
        __builtin_trap();
    log_end(l, flags, pending, ha_sse_retry(&s));
    free(buf);
}

/* ---- naive reference: whole stream, lines first ---- */

static int utf8_cut_short(const uint8_t *in, size_t len)
{
    size_t back;
    /* The last lead byte within 3 bytes of the end, if its sequence is a
     * valid prefix that needs more bytes than the stream has. */
    for (back = 1; back <= 3 && back <= len; back++) {
        uint8_t b = in[len - back];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0x80 && b < 0xC0)
            continue;
        if (b >= 0xC2 && b <= 0xDF)
            need = 2;
        else if (b >= 0xE0 && b <= 0xEF)
            need = 3;
        else if (b >= 0xF0 && b <= 0xF4)
            need = 4;
        else
            return 0;
        if (back >= need)
            return 0;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
        return back == 1 ||
               (in[len - back + 1] >= lo && in[len - back + 1] <= hi);
    }
    return 0;
}

static int is(const uint8_t *p, size_t n, const char *w)
{
    return n == strlen(w) && memcmp(p, w, n) == 0;
}

static void run_reference(const uint8_t *in, size_t len, size_t cap, olog *l)
{
    uint8_t *data = malloc(len + 1), *name = malloc(len + 1);
    uint8_t id[HA_SSE_ID_MAX];
    size_t p = 0, data_len = 0, name_len = 0, id_len = 0;
    int has_data = 0, skipping = 0, has_id = 0;
    int64_t retry = -1;
    unsigned flags = 0;
    size_t pending = 0;

    if (len >= 3 && in[0] == 0xEF && in[1] == 0xBB && in[2] == 0xBF)
        p = 3;
    for (;;) {
        size_t ls = p, le = p, colon, vs, vlen;
        const uint8_t *v;
        while (le < len && in[le] != '\r' && in[le] != '\n')
            le++;
        if (le == len) { /* unterminated last line */
            if (ls < len) {
                flags |= HA_SSE_TAIL_PARTIAL_LINE;
                colon = ls;
                while (colon < len && in[colon] != ':')
                    colon++;
                if (!skipping && colon < len &&
                    is(in + ls, colon - ls, "data")) {
                    vs = colon + 1 < len && in[colon + 1] == ' ' ? colon + 2
                                                                 : colon + 1;
                    pending = (has_data ? data_len + 1 : 0) + (len - vs);
                    flags |= HA_SSE_TAIL_UNTERMINATED_EVENT;
                    has_data = 0;
                }
            }
            if (has_data) {
                flags |= HA_SSE_TAIL_UNTERMINATED_EVENT;
                pending = data_len;
            }
            break;
        }
        p = le + 1;
        if (in[le] == '\r' && p < len && in[p] == '\n')
            p++;
        if (ls == le) { /* blank line */
            if (!skipping && has_data)
                log_event(l, data, data_len, name, name_len, id, id_len,
                          has_id);
            skipping = has_data = 0;
            data_len = name_len = 0;
            continue;
        }
        if (skipping || in[ls] == ':')
            continue;
        colon = ls;
        while (colon < le && in[colon] != ':')
            colon++;
        vs = colon < le ? colon + 1 : le;
        if (vs < le && in[vs] == ' ')
            vs++;
        v = in + vs;
        vlen = le - vs;
        if (is(in + ls, colon - ls, "data")) {
            size_t need = (has_data ? data_len + 1 : 0) + vlen;
            if (need > cap) {
                log_error(l, HA_SSE_ERR_EVENT_TOO_LARGE, need);
                skipping = 1;
                has_data = 0;
                data_len = name_len = 0;
                continue;
            }
            if (has_data)
                data[data_len++] = '\n';
            memcpy(data + data_len, v, vlen);
            data_len += vlen;
            has_data = 1;
        } else if (is(in + ls, colon - ls, "event")) {
            if (vlen > HA_SSE_NAME_MAX) {
                log_error(l, HA_SSE_ERR_NAME_TOO_LONG, vlen);
                skipping = 1;
                has_data = 0;
                data_len = name_len = 0;
                continue;
            }
            memcpy(name, v, vlen);
            name_len = vlen;
        } else if (is(in + ls, colon - ls, "id")) {
            if (vlen > HA_SSE_ID_MAX)
                log_error(l, HA_SSE_ERR_ID_TOO_LONG, vlen);
            else if (vlen == 0 || memchr(v, 0, vlen) == NULL) {
                memcpy(id, v, vlen);
                id_len = vlen;
                has_id = 1;
            }
        } else {
            if (is(in + ls, colon - ls, "retry") && vlen > 0) {
                int64_t r = 0;
                size_t i;
                for (i = 0; i < vlen; i++) {
                    int d = v[i] - '0';
                    if (d < 0 || d > 9 || r > (INT64_MAX - d) / 10)
                        break;
                    r = r * 10 + d;
                }
                if (i == vlen) {
                    retry = r;
                    continue;
                }
            }
            log_unknown(l, in + ls,
                        colon - ls < HA_SSE_FIELD_MAX ? colon - ls
                                                      : HA_SSE_FIELD_MAX,
                        v,
                        vlen < HA_SSE_PREVIEW_MAX ? vlen : HA_SSE_PREVIEW_MAX,
                        vlen);
        }
    }
    if (utf8_cut_short(in, len))
        flags |= HA_SSE_TAIL_INCOMPLETE_UTF8;
    log_end(l, flags, pending, retry);
    free(data);
    free(name);
}

static void same(const olog *a, const olog *b)
{
    if (a->len != b->len || memcmp(a->p, b->p, a->len) != 0)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    olog whole = {NULL, 0, 0}, split = {NULL, 0, 0}, ref = {NULL, 0, 0};
    size_t cap;
    unsigned mode;
    if (size < 2)
        return 0;
    cap = HA_SSE_MIN_CAPACITY + data[0] % 285u;
    mode = data[1];
    data += 2;
    size -= 2;
    run_framer(data, size, cap, 0, mode, &whole);
    run_framer(data, size, cap, 1, mode, &split);
    run_reference(data, size, cap, &ref);
    same(&whole, &split); /* (a) */
    same(&whole, &ref);   /* (d) */
    free(whole.p);
    free(split.p);
    free(ref.p);
    return 0;
}

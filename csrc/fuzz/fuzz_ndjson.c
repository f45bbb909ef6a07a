/* libFuzzer target for the NDJSON framer.
 *
 * Input: byte 0 picks the buffer capacity (16..271, small so that the
 * too-large path is hit), byte 1 the way the rest is split into reads, the
 * rest is the stream. Traps when:
 *  (a) the stream fed whole and fed in pieces give different outcomes
 *      (status, line, size, finish flags);
 *  (b) a line breaks its bounds (data_len > capacity, data outside the
 *      buffer and the read);
 *  (c) *pos moves back, passes len, or NEED_INPUT leaves input unconsumed;
 *  (d) the outcomes differ from a naive reference that splits the whole
 *      stream at every LF first (ndjson.h's rules read literally), and
 *      scans a line too large whole for the watched key (WATCH_KEY at
 *      depth 1) where the framer scans it in pieces as it passes.
 */
#include "ndjson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "olog.h"

#define WATCH_KEY "k"

static void log_outcome(olog *l, int st, const uint8_t *data, size_t data_len, size_t size,
                        int held)
{
    uint64_t words[4] = {(uint64_t)st, data_len, size, (uint64_t)held};
    log_add(l, words, sizeof words);
    log_add(l, data, data_len);
}

/* A line lies at the start of the buffer, or (whole in one read) in that
 * read: in[0 .. len). */
static void check_line(const ha_ndjson_line *line, const uint8_t *buf, size_t cap,
                       const uint8_t *in, size_t len)
{
    int in_read = in && line->data >= in && line->data_len <= len &&
                  (size_t)(line->data - in) <= len - line->data_len;
    if (line->data_len > cap || (line->data != buf && !in_read))
        __builtin_trap();
}

/* Feed in pieces whose sizes come from the split pattern (0: whole). */
static void frame(olog *l, uint8_t *buf, size_t cap, const uint8_t *in, size_t len,
                  const uint8_t *splits, size_t n_splits)
{
    ha_ndjson n;
    ha_ndjson_line line;
    ha_ndjson_init(&n, buf, cap);
    ha_ndjson_watch(&n, WATCH_KEY, sizeof WATCH_KEY - 1, 1);
    size_t at = 0, k = 0;
    while (at < len) {
        size_t piece = n_splits ? (size_t)splits[k++ % n_splits] % 17 + 1 : len;
        if (piece > len - at)
            piece = len - at;
        size_t pos = 0;
        for (;;) {
            size_t before = pos;
            ha_ndjson_status st = ha_ndjson_next(&n, in + at, piece, &pos, &line);
            if (pos < before || pos > piece)
                __builtin_trap();
            if (st == HA_NDJSON_NEED_INPUT) {
                if (pos != piece)
                    __builtin_trap();
                break;
            }
            check_line(&line, buf, cap, in + at, piece);
            log_outcome(l, st, line.data, line.data_len, line.size,
                        st == HA_NDJSON_ERR_LINE_TOO_LARGE && line.held);
        }
        at += piece;
    }
    unsigned flags;
    ha_ndjson_status st = ha_ndjson_finish(&n, &line, &flags);
    if ((st == HA_NDJSON_NEED_INPUT) != (flags == 0))
        __builtin_trap();
    if (st != HA_NDJSON_NEED_INPUT) {
        check_line(&line, buf, cap, NULL, 0);
        log_outcome(l, st, line.data, line.data_len, line.size,
                    st == HA_NDJSON_ERR_LINE_TOO_LARGE && line.held);
    }
    log_outcome(l, (int)flags, NULL, 0, 0, 0);
    /* finish empties the framer */
    if (ha_ndjson_finish(&n, &line, &flags) != HA_NDJSON_NEED_INPUT || flags != 0)
        __builtin_trap();
}

static int blank(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return 0;
    return 1;
}

static void reference(olog *l, size_t cap, const uint8_t *in, size_t len)
{
    size_t start = 0;
    unsigned flags = 0;
    while (start < len) {
        const uint8_t *lf = memchr(in + start, '\n', len - start);
        size_t end = lf ? (size_t)(lf - in) : len;
        size_t n = end - start;
        if (n > 0 && in[end - 1] == '\r')
            n--;
        if (!blank(in + start, n)) {
            if (n > cap) {
                ha_json_keyscan scan;
                ha_json_keyscan_init(&scan, WATCH_KEY, sizeof WATCH_KEY - 1, 1);
                log_outcome(l, HA_NDJSON_ERR_LINE_TOO_LARGE, NULL, 0, n,
                            ha_json_keyscan_feed(&scan, in + start, n));
            } else {
                log_outcome(l, HA_NDJSON_LINE, in + start, n, n, 0);
            }
            if (!lf)
                flags = HA_NDJSON_TAIL_PARTIAL_LINE;
        }
        start = end + 1;
    }
    log_outcome(l, (int)flags, NULL, 0, 0, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t cap = HA_NDJSON_MIN_CAPACITY + data[0];
    size_t n_splits = data[1] % 8;
    if (size < 2 + n_splits)
        return 0;
    const uint8_t *splits = data + 2, *in = data + 2 + n_splits;
    size_t len = size - 2 - n_splits;
    uint8_t *buf = malloc(cap);
    olog whole = {0}, pieces = {0}, ref = {0};
    if (!buf)
        abort();
    frame(&whole, buf, cap, in, len, NULL, 0);
    frame(&pieces, buf, cap, in, len, splits, n_splits);
    reference(&ref, cap, in, len);
    if (whole.len != pieces.len || memcmp(whole.p, pieces.p, whole.len) != 0 ||
        whole.len != ref.len || memcmp(whole.p, ref.p, whole.len) != 0)
        __builtin_trap();
    free(whole.p);
    free(pieces.p);
    free(ref.p);
    free(buf);
    return 0;
}

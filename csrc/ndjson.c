/* Newline-delimited JSON framer, see ndjson.h for the contract.
 *
 * A line that starts and ends within one read is reported where it lies,
 * never copied. Otherwise the line in progress goes straight into the
 * caller's buffer; bytes past it are only counted. Whether a line is too large, blank or ends in CR is
 * decided at its LF from what was counted, so every outcome is the same
 * however the reads were split.
 */
#include "ndjson.h"

#include <string.h>

void ha_ndjson_init(ha_ndjson *n, uint8_t *buf, size_t cap)
{
    memset(n, 0, sizeof *n);
    n->buf = buf;
    n->cap = cap;
    n->blank = 1;
}

void ha_ndjson_watch(ha_ndjson *n, const char *key, size_t key_len, size_t depth)
{
    ha_json_keyscan_init(&n->scan_start, key, key_len, depth);
    n->scan = n->scan_start;
    n->watching = 1;
}

static void append(ha_ndjson *n, const uint8_t *p, size_t k)
{
    size_t room = n->cap > n->size ? n->cap - n->size : 0;
    if (k == 0)
        return;
    if (room > 0)
        memcpy(n->buf + n->size, p, k < room ? k : room);
    if (n->watching && k > room) {
        /* past the buffer: scan its head once, the line just left it, then
           every byte that is only counted */
        if (n->size <= n->cap)
            ha_json_keyscan_feed(&n->scan, n->buf, n->cap);
        ha_json_keyscan_feed(&n->scan, p + room, k - room);
    }
    /* only until the first other byte: a line of JSON starts with one */
    for (size_t i = 0; n->blank && i < k; i++)
        n->blank = p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
    n->last_cr = p[k - 1] == '\r';
    n->size = n->size > SIZE_MAX - k ? SIZE_MAX : n->size + k;
}

/* The line in progress has ended (LF or end of stream): what to report. */
static ha_ndjson_status end_line(ha_ndjson *n, ha_ndjson_line *line)
{
    size_t len = n->size - (size_t)n->last_cr;
    ha_ndjson_status st = HA_NDJSON_NEED_INPUT;
    if (n->blank) {
        /* skipped */
    } else if (len > n->cap) {
        line->data = n->buf;
        line->data_len = 0;
        line->size = len;
        line->held = n->scan.found;
        st = HA_NDJSON_ERR_LINE_TOO_LARGE;
    } else {
        line->data = n->buf;
        line->data_len = len;
        line->size = len;
        line->held = 0;
        st = HA_NDJSON_LINE;
    }
    if (n->size > n->cap)
        n->scan = n->scan_start;
    n->size = 0;
    n->blank = 1;
    n->last_cr = 0;
    return st;
}

ha_ndjson_status ha_ndjson_next(ha_ndjson *n, const uint8_t *in, size_t len,
                                size_t *pos, ha_ndjson_line *line)
{
    size_t p = *pos;
    while (p < len) {
        const uint8_t *lf = memchr(in + p, '\n', len - p);
        size_t run = lf ? (size_t)(lf - (in + p)) : len - p;
        if (lf && n->size == 0 && run <= n->cap) {
            /* the whole line is in the read: framed where it lies, as
               end_line() would have it from the buffer */
            const uint8_t *s = in + p;
            size_t i = 0;
            p += run + 1;
            while (i < run && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
                i++;
            if (i == run)
                continue; /* blank */
            line->data = s;
            line->data_len = line->size = run - (s[run - 1] == '\r');
            line->held = 0;
            *pos = p;
            return HA_NDJSON_LINE;
        }
        append(n, in + p, run);
        p += run;
        if (!lf)
            break;
        p++; /* the LF */
        ha_ndjson_status st = end_line(n, line);
        if (st != HA_NDJSON_NEED_INPUT) {
            *pos = p;
            return st;
        }
    }
    *pos = p;
    return HA_NDJSON_NEED_INPUT;
}

const uint8_t *ha_ndjson_hold(ha_ndjson *n, const uint8_t *data, size_t len)
{
    if (data != n->buf)
        memmove(n->buf, data, len);
    return n->buf;
}

ha_ndjson_status ha_ndjson_finish(ha_ndjson *n, ha_ndjson_line *line, unsigned *flags)
{
    *flags = n->blank ? 0u : HA_NDJSON_TAIL_PARTIAL_LINE;
    return end_line(n, line);
}

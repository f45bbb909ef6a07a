/* Server-sent events framer, see sse.h for the contract.
 *
 * One pass over the input, each byte looked at once: a line is never held,
 * its field name goes to a small fixed buffer and its value streams straight
 * to where it belongs (the caller's data buffer, the event type, the pending
 * id, or a preview). Everything a report depends on is decided at a line
 * end, so outcomes are the same however the reads were split.
 */
#include "sse.h"

#include <string.h>

/* Where the current line is. */
enum {
    ST_BOM,         /* very start: matching a UTF-8 BOM */
    ST_LINE,        /* at the start of a line */
    ST_FIELD,       /* in a field name */
    ST_VALUE_START, /* just after the colon: one space may be dropped */
    ST_VALUE,       /* in a field value */
    ST_IGNORE       /* a comment, or a line of a skipped event */
};

/* Where the string elider is in the event's JSON. Nesting does not matter:
 * only strings are elided, and a quote not escaped always opens or closes
 * one, so five states see every string through escapes and split reads. */
enum { EL_OUT, EL_STRING, EL_STRING_ESCAPE, EL_SKIP, EL_SKIP_ESCAPE };

/* What the field in progress is. */
enum { K_DATA, K_EVENT, K_ID, K_RETRY, K_OTHER };

static const uint8_t bom[3] = {0xEF, 0xBB, 0xBF};

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* Copy what still fits of p[0..n) into dst[have..max): the fixed buffers keep
 * the first max bytes of a value while its full length is counted apart. */
static void keep(uint8_t *dst, size_t max, size_t have, const uint8_t *p,
                 size_t n)
{
    if (have < max) {
        size_t k = max - have < n ? max - have : n;
        memcpy(dst + have, p, k);
    }
}

/* Length of the run before the first CR or LF. libc's memchr is vectorised
 * on every target we build for: two calls beat one byte-wise or SWAR loop. */
static size_t scan_eol(const uint8_t *p, size_t n)
{
    const uint8_t *lf = memchr(p, '\n', n);
    size_t run = lf ? (size_t)(lf - p) : n;
    const uint8_t *cr = memchr(p, '\r', run);
    return cr ? (size_t)(cr - p) : run;
}

/* Last bytes fed, across reads: enough for any unfinished UTF-8 sequence. */
static void tail_push(ha_sse *s, const uint8_t *p, size_t n)
{
    size_t i;
    if (n >= 3) {
        memcpy(s->tail, p + n - 3, 3);
        s->tail_len = 3;
        return;
    }
    for (i = 0; i < n; i++) {
        if (s->tail_len == 3) {
            s->tail[0] = s->tail[1];
            s->tail[1] = s->tail[2];
            s->tail_len = 2;
        }
        s->tail[s->tail_len++] = p[i];
    }
}

/* Do t[0..n) end in a valid but unfinished multi-byte UTF-8 sequence?
 * Invalid leads (C0, C1, F5..FF) and bad second bytes (overlongs,
 * surrogates, beyond U+10FFFF) are not prefixes of anything: no. */
static int utf8_unfinished(const uint8_t *t, size_t n)
{
    size_t k = 0, need;
    uint8_t lead, lo = 0x80, hi = 0xBF;
    while (k < n && (t[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return 0;
    lead = t[n - 1 - k];
    if (lead >= 0xC2 && lead <= 0xDF)
        need = 1;
    else if (lead >= 0xE0 && lead <= 0xEF)
        need = 2;
    else if (lead >= 0xF0 && lead <= 0xF4)
        need = 3;
    else
        return 0;
    if (k >= need)
        return 0;
    if (lead == 0xE0)
        lo = 0xA0;
    else if (lead == 0xED)
        hi = 0x9F;
    else if (lead == 0xF0)
        lo = 0x90;
    else if (lead == 0xF4)
        hi = 0x8F;
    return k == 0 || (t[n - k] >= lo && t[n - k] <= hi);
}

void ha_sse_init(ha_sse *s, uint8_t *buf, size_t cap)
{
    memset(s, 0, sizeof *s);
    s->buf = buf;
    s->cap = cap;
    s->state = ST_BOM;
    s->retry_ms = -1;
}

void ha_sse_elide(ha_sse *s, int on)
{
    s->elide = on;
}

int64_t ha_sse_retry(const ha_sse *s)
{
    return s->retry_ms;
}

/* Forget the event being built. The bytes stay where they are, so a report
 * just made still points at valid storage until the next call writes. */
static void reset_event(ha_sse *s)
{
    s->data_len = 0;
    s->event_size = 0;
    s->has_data = 0;
    s->overflow = 0;
    s->name_len = 0;
    s->eliding = 0;
    s->elide_state = EL_OUT;
    s->elided = 0;
}

/* One byte to data_len, counted even past the buffer: a string's content
 * past it may still be elided; anything else there is an overflow. */
static void elide_put(ha_sse *s, uint8_t b)
{
    if (s->data_len < s->cap)
        s->buf[s->data_len] = b;
    s->data_len++;
}

static void elide_keep(ha_sse *s, uint8_t b)
{
    elide_put(s, b);
    if (s->data_len > s->cap)
        s->overflow = 1;
}

/* Data through the elider: a string whose content passes ELIDE_AFTER bytes
 * is rolled back to its opening quote and gets the ELIDED content; the rest
 * of it is skipped up to its closing quote. Writes never pass the byte
 * being read (the marker is shorter than what it replaces), so the buffered
 * data can be elided in place. */
static void elide_bytes(ha_sse *s, const uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n && !s->overflow; i++) {
        uint8_t b = p[i];
        switch (s->elide_state) {
        case EL_OUT:
            elide_keep(s, b);
            if (b == '"') {
                s->elide_state = EL_STRING;
                s->elide_start = s->data_len;
            }
            break;
        case EL_STRING:
        case EL_STRING_ESCAPE:
            if (s->elide_state == EL_STRING && b == '"') {
                elide_keep(s, b);
                s->elide_state = EL_OUT;
                break;
            }
            s->elide_state = s->elide_state == EL_STRING && b == '\\'
                                 ? EL_STRING_ESCAPE : EL_STRING;
            elide_put(s, b);
            if (s->data_len - s->elide_start > HA_SSE_ELIDE_AFTER) {
                s->data_len = s->elide_start;
                memcpy(s->buf + s->data_len, HA_SSE_ELIDED, HA_SSE_ELIDED_LEN);
                s->data_len += HA_SSE_ELIDED_LEN;
                s->elided++;
                s->elide_state = s->elide_state == EL_STRING_ESCAPE ? EL_SKIP_ESCAPE
                                                                    : EL_SKIP;
            }
            break;
        case EL_SKIP:
            if (b == '\\') {
                s->elide_state = EL_SKIP_ESCAPE;
            } else if (b == '"') {
                elide_keep(s, b);
                s->elide_state = EL_OUT;
            }
            break;
        default: /* EL_SKIP_ESCAPE */
            s->elide_state = EL_SKIP;
            break;
        }
    }
}

static void append_data(ha_sse *s, const uint8_t *p, size_t n)
{
    if (!s->overflow && !s->eliding && n <= s->cap - s->data_len) {
        if (n > 0)
            memcpy(s->buf + s->data_len, p, n);
        s->data_len += n;
        s->event_size = s->data_len;
        return;
    }
    s->event_size = add_sat(s->event_size, n);
    if (!s->overflow && s->elide) {
        if (!s->eliding) {
            /* the first overflow: elide what is buffered, from the start */
            size_t held = s->data_len;
            s->eliding = 1;
            s->data_len = 0;
            elide_bytes(s, s->buf, held);
        }
        elide_bytes(s, p, n);
        return;
    }
    /* Past the buffer: only count, the report waits for the line end. */
    s->overflow = 1;
}

static int field_is(const ha_sse *s, const char *name, size_t n)
{
    return s->field_len == n && memcmp(s->field, name, n) == 0;
}

/* The field name is complete (colon or line end): get ready for its value.
 * Names are matched over their full length, so "dataX" is not "data". */
static void begin_value(ha_sse *s)
{
    if (field_is(s, "data", 4))
        s->field_kind = K_DATA;
    else if (field_is(s, "event", 5))
        s->field_kind = K_EVENT;
    else if (field_is(s, "id", 2))
        s->field_kind = K_ID;
    else if (field_is(s, "retry", 5))
        s->field_kind = K_RETRY;
    else
        s->field_kind = K_OTHER;
    s->value_len = 0;
    s->value_has_nul = 0;
    s->retry_valid = 1;
    s->retry_value = 0;
    if (s->field_kind == K_DATA) {
        /* The LF joining lines is stored when the next line starts, so the
         * final LF the dispatch would drop never takes buffer space. */
        if (s->has_data)
            append_data(s, (const uint8_t *)"\n", 1);
        s->has_data = 1;
    }
}

static void value_bytes(ha_sse *s, const uint8_t *p, size_t n)
{
    size_t i;
    switch (s->field_kind) {
    case K_DATA:
        append_data(s, p, n);
        break;
    case K_EVENT:
        /* Written in place: a too long name skips the event anyway. */
        keep(s->name, HA_SSE_NAME_MAX, s->value_len, p, n);
        break;
    case K_ID:
        /* Pending: a rejected id must leave the last one intact. */
        keep(s->id_pending, HA_SSE_ID_MAX, s->value_len, p, n);
        if (n > 0 && memchr(p, 0, n) != NULL)
            s->value_has_nul = 1;
        break;
    case K_RETRY:
        for (i = 0; i < n && s->retry_valid; i++) {
            int64_t d = (int64_t)p[i] - '0';
            if (d < 0 || d > 9 || s->retry_value > (INT64_MAX - d) / 10)
                s->retry_valid = 0;
            else
                s->retry_value = s->retry_value * 10 + d;
        }
        keep(s->preview, HA_SSE_PREVIEW_MAX, s->value_len, p, n);
        break;
    default:
        keep(s->preview, HA_SSE_PREVIEW_MAX, s->value_len, p, n);
        break;
    }
    s->value_len = add_sat(s->value_len, n);
}

static void report_base(const ha_sse *s, ha_sse_event *ev)
{
    ev->data = s->preview;
    ev->data_len = 0;
    ev->name = s->name;
    ev->name_len = 0;
    ev->id = s->id;
    ev->id_len = s->id_len;
    ev->has_id = s->has_id;
    ev->elided = 0;
    ev->size = 0;
}

/* A field line has ended: apply it, or say what is wrong with it. */
static ha_sse_status end_field(ha_sse *s, ha_sse_event *ev)
{
    switch (s->field_kind) {
    case K_DATA:
        if (s->data_len > s->cap) /* a string past the buffer, not elided */
            s->overflow = 1;
        if (!s->overflow)
            return HA_SSE_NEED_INPUT;
        report_base(s, ev);
        ev->size = s->event_size;
        reset_event(s);
        s->skipping = 1;
        return HA_SSE_ERR_EVENT_TOO_LARGE;
    case K_EVENT:
        if (s->value_len <= HA_SSE_NAME_MAX) {
            s->name_len = s->value_len;
            return HA_SSE_NEED_INPUT;
        }
        report_base(s, ev);
        ev->size = s->value_len;
        reset_event(s);
        s->skipping = 1;
        return HA_SSE_ERR_NAME_TOO_LONG;
    case K_ID:
        if (s->value_len > HA_SSE_ID_MAX) {
            report_base(s, ev);
            ev->size = s->value_len;
            return HA_SSE_ERR_ID_TOO_LONG;
        }
        if (!s->value_has_nul) { /* the specification ignores such an id */
            memcpy(s->id, s->id_pending, s->value_len);
            s->id_len = s->value_len;
            s->has_id = 1;
        }
        return HA_SSE_NEED_INPUT;
    case K_RETRY:
        if (s->retry_valid && s->value_len > 0) {
            s->retry_ms = s->retry_value;
            return HA_SSE_NEED_INPUT;
        }
        break; /* an invalid retry is reported like an unknown field */
    default:
        break;
    }
    report_base(s, ev);
    ev->name = s->field;
    ev->name_len = s->field_len < HA_SSE_FIELD_MAX ? s->field_len
                                                   : HA_SSE_FIELD_MAX;
    ev->data_len = s->value_len < HA_SSE_PREVIEW_MAX ? s->value_len
                                                     : HA_SSE_PREVIEW_MAX;
    ev->size = s->value_len;
    return HA_SSE_UNKNOWN_FIELD;
}

/* A blank line: dispatch if any data field was seen. The event type resets
 * either way; a skipped event ends here. */
static ha_sse_status blank_line(ha_sse *s, ha_sse_event *ev)
{
    if (s->skipping || !s->has_data) {
        s->skipping = 0;
        reset_event(s);
        return HA_SSE_NEED_INPUT;
    }
    report_base(s, ev);
    ev->data = s->buf;
    ev->data_len = s->data_len;
    ev->name_len = s->name_len;
    ev->elided = s->elided;
    reset_event(s);
    return HA_SSE_EVENT;
}

ha_sse_status ha_sse_next(ha_sse *s, const uint8_t *in, size_t len,
                          size_t *pos, ha_sse_event *ev)
{
    size_t p = *pos, start = p;
    ha_sse_status st = HA_SSE_NEED_INPUT;

    if (p >= len)
        return HA_SSE_NEED_INPUT;
    while (p < len && st == HA_SSE_NEED_INPUT) {
        uint8_t c = in[p];
        size_t n;
        /* CR ended the last line, possibly in the previous read: an LF
         * right after it belongs to the same line end. */
        if (s->after_cr) {
            s->after_cr = 0;
            if (c == '\n') {
                p++;
                continue;
            }
        }
        switch (s->state) {
        case ST_BOM:
            if (c == bom[s->bom_matched]) {
                p++;
                if (++s->bom_matched == 3)
                    s->state = ST_LINE;
            } else if (s->bom_matched > 0) {
                /* Not a BOM after all: the bytes matched so far (EF, EF BB,
                 * none of them a colon or line end) start a field name. The
                 * current byte is taken from there. */
                memcpy(s->field, bom, (size_t)s->bom_matched);
                s->field_len = (size_t)s->bom_matched;
                s->state = ST_FIELD;
            } else {
                s->state = ST_LINE;
            }
            break;
        case ST_LINE:
            if (c == '\r' || c == '\n') {
                p++;
                s->after_cr = c == '\r';
                st = blank_line(s, ev);
            } else if (c == ':' || s->skipping) {
                s->state = ST_IGNORE;
            } else {
                s->field_len = 0;
                s->state = ST_FIELD;
            }
            break;
        case ST_FIELD:
            n = p;
            while (n < len && in[n] != ':' && in[n] != '\r' && in[n] != '\n')
                n++;
            keep(s->field, HA_SSE_FIELD_MAX, s->field_len, in + p, n - p);
            s->field_len = add_sat(s->field_len, n - p);
            p = n;
            if (p == len)
                break;
            c = in[p++];
            begin_value(s);
            if (c == ':') {
                s->state = ST_VALUE_START;
            } else { /* no colon: the whole line is the name, value empty */
                s->after_cr = c == '\r';
                s->state = ST_LINE;
                st = end_field(s, ev);
            }
            break;
        case ST_VALUE_START:
            if (c == ' ')
                p++;
            s->state = ST_VALUE;
            break;
        case ST_VALUE:
            n = scan_eol(in + p, len - p);
            value_bytes(s, in + p, n);
            p += n;
            if (p == len)
                break;
            s->after_cr = in[p++] == '\r';
            s->state = ST_LINE;
            st = end_field(s, ev);
            break;
        default: /* ST_IGNORE */
            p += scan_eol(in + p, len - p);
            if (p == len)
                break;
            s->after_cr = in[p++] == '\r';
            s->state = ST_LINE;
            break;
        }
    }
    tail_push(s, in + start, p - start);
    *pos = p;
    return st;
}

/* Const: the stream may still be fed after asking. A data line in progress
 * counts as undelivered data; a line still in its field name does not (it
 * is not known to be data yet). pending is the length the event's data
 * would have had if dispatched now, as event_size counts it. */
unsigned ha_sse_finish(const ha_sse *s, size_t *pending)
{
    unsigned flags = 0;
    size_t pend = 0;
    if (s->has_data) {
        flags |= HA_SSE_TAIL_UNTERMINATED_EVENT;
        pend = s->event_size;
    }
    if (s->state == ST_BOM ? s->bom_matched > 0 : s->state != ST_LINE)
        flags |= HA_SSE_TAIL_PARTIAL_LINE;
    if (utf8_unfinished(s->tail, s->tail_len))
        flags |= HA_SSE_TAIL_INCOMPLETE_UTF8;
    if (pending != NULL)
        *pending = pend;
    return flags;
}

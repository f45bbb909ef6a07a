/* Server-sent events framer: raw network reads in, complete events out.
 *
 * Implements the WHATWG "event stream interpretation" over bytes, with a
 * fixed buffer supplied by the caller: no allocation, no globals, linear
 * time whatever the read sizes. Field values stream straight into the data
 * buffer as they arrive, so no line is ever held or rescanned.
 *
 * Named outcomes beyond the specification:
 *  - data larger than the buffer: HA_SSE_ERR_EVENT_TOO_LARGE once, at the
 *    end of the line that no longer fits (so its size does not depend on
 *    how reads were split); the rest of that event is skipped up to its
 *    blank line and framing resumes with the next event.
 *  - with eliding on (ha_sse_elide, the JSON protocols): data that would
 *    overflow the buffer is kept framing instead, every JSON string of the
 *    event whose content passes HA_SSE_ELIDE_AFTER bytes replaced by the
 *    content HA_SSE_ELIDED, so the event stays strict JSON within the
 *    buffer and its small fields (ids, status, usage) still arrive;
 *    ev->elided counts the strings so replaced. Only when the event is too
 *    large even so is it HA_SSE_ERR_EVENT_TOO_LARGE, as above.
 *  - an `event` value over HA_SSE_NAME_MAX: HA_SSE_ERR_NAME_TOO_LONG, event
 *    skipped the same way.
 *  - an `id` value over HA_SSE_ID_MAX: HA_SSE_ERR_ID_TOO_LONG, the field is
 *    ignored (the last id is kept) and the event is still dispatched.
 *  - a field the specification ignores (anything but data/event/id/retry,
 *    and an invalid retry): HA_SSE_UNKNOWN_FIELD with its name and the first
 *    HA_SSE_PREVIEW_MAX bytes of its value, so the caller can report it
 *    (older llama.cpp sends a bare `error:` field).
 *  - end of stream: ha_sse_finish() reports an unterminated event, a
 *    partial line and a truncated UTF-8 sequence instead of dropping them.
 */
#ifndef HA_SSE_H
#define HA_SSE_H

#include <stddef.h>
#include <stdint.h>

#define HA_SSE_DEFAULT_CAPACITY (64u * 1024u)
#define HA_SSE_MIN_CAPACITY 16u
#define HA_SSE_NAME_MAX 128u    /* longest `event` value kept */
#define HA_SSE_ID_MAX 256u      /* longest `id` value kept */
#define HA_SSE_FIELD_MAX 32u    /* longest unknown field name reported */
#define HA_SSE_PREVIEW_MAX 256u /* bytes of an unknown field's value reported */
#define HA_SSE_ELIDE_AFTER 1024u /* string content kept in an oversize event */
/* The content an elided string gets (raw JSON, 6 bytes): U+0000, which no
 * provider sends in a field the extractors read. Meaningful only in an event
 * whose elided count is not zero. */
#define HA_SSE_ELIDED "\\u0000"
#define HA_SSE_ELIDED_LEN 6u

typedef enum {
    HA_SSE_NEED_INPUT = 0,      /* the read is consumed; nothing to report */
    HA_SSE_EVENT = 1,           /* a complete event, see ha_sse_event */
    HA_SSE_UNKNOWN_FIELD = 2,   /* an ignored field: name and value preview */
    HA_SSE_ERR_EVENT_TOO_LARGE = 3,
    HA_SSE_ERR_NAME_TOO_LONG = 4,
    HA_SSE_ERR_ID_TOO_LONG = 5
} ha_sse_status;

/* Flags returned by ha_sse_finish(). */
#define HA_SSE_TAIL_UNTERMINATED_EVENT 1u /* data lines never dispatched */
#define HA_SSE_TAIL_PARTIAL_LINE 2u       /* the stream ended mid-line */
#define HA_SSE_TAIL_INCOMPLETE_UTF8 4u    /* the last bytes start a UTF-8
                                             sequence that never finished */

/* What ha_sse_next() reports. Pointers are into the framer's own storage
 * and stay valid until the next call on the same framer. */
typedef struct {
    const uint8_t *data; size_t data_len; /* HA_SSE_EVENT: data, the final LF
                                             removed. UNKNOWN_FIELD: value
                                             preview (at most PREVIEW_MAX) */
    const uint8_t *name; size_t name_len; /* HA_SSE_EVENT: the event type,
                                             empty means "message".
                                             UNKNOWN_FIELD: the field name
                                             (at most FIELD_MAX bytes) */
    const uint8_t *id; size_t id_len;     /* HA_SSE_EVENT: last event id */
    int has_id;                           /* an id field has been accepted */
    size_t elided;                        /* HA_SSE_EVENT: strings elided */
    size_t size; /* ERR_EVENT_TOO_LARGE: the event's data length (joining
                    LFs included) at the end of the line that overflowed;
                    ERR_NAME_TOO_LONG / ERR_ID_TOO_LONG: value length seen;
                    UNKNOWN_FIELD: full value length */
} ha_sse_event;

/* The framer. Every member is private to sse.c; the definition is here only
 * so that callers can place it (stack, struct member, cffi allocation). */
typedef struct {
    uint8_t *buf;       /* caller's data buffer */
    size_t cap;
    size_t data_len;    /* data bytes stored in buf (joining LFs included) */
    size_t event_size;  /* data bytes the event has reached, stored or not */
    int state;          /* where the current line is */
    int bom_matched;    /* leading BOM bytes matched so far */
    int after_cr;       /* last line ended in CR: a following LF is its pair */
    int has_data;       /* a data field has been seen since the last dispatch */
    int overflow;       /* the data line in progress no longer fits */
    int skipping;       /* event too large: ignore lines up to its blank line */
    int elide;          /* elide long strings of an oversize event */
    int eliding;        /* this event overflowed: its data goes through the
                           string elider */
    int elide_state;    /* where the elider is in the JSON */
    size_t elide_start; /* buffer offset of the current string's content */
    size_t elided;      /* strings of this event elided */
    uint8_t field[HA_SSE_FIELD_MAX];
    size_t field_len;   /* full field name length (saturating) */
    int field_kind;
    size_t value_len;   /* full value length of the line in progress */
    int value_has_nul;
    int retry_valid;
    int64_t retry_value;
    uint8_t name[HA_SSE_NAME_MAX];
    size_t name_len;
    uint8_t id[HA_SSE_ID_MAX];
    size_t id_len;
    int has_id;
    uint8_t id_pending[HA_SSE_ID_MAX];
    uint8_t preview[HA_SSE_PREVIEW_MAX];
    int64_t retry_ms;
    uint8_t tail[3];    /* last bytes fed, for the truncated UTF-8 check */
    size_t tail_len;
} ha_sse;

/* Start a stream with a caller-owned buffer of cap bytes (>= MIN_CAPACITY).
 * The buffer bounds one event's data, the LFs that join its lines included. */
void ha_sse_init(ha_sse *s, uint8_t *buf, size_t cap);

/* Elide long strings of oversize events (for JSON data) instead of
 * dropping them. Off after ha_sse_init. */
void ha_sse_elide(ha_sse *s, int on);

/* Frame bytes in[*pos .. len). Returns as soon as there is something to
 * report (filling *ev) or when the input is used up (HA_SSE_NEED_INPUT);
 * *pos is advanced past what was consumed. Call again with the same input
 * and *pos until HA_SSE_NEED_INPUT, then feed the next read. Reads may be
 * split anywhere, even inside a CRLF pair or a UTF-8 character. */
ha_sse_status ha_sse_next(ha_sse *s, const uint8_t *in, size_t len,
                          size_t *pos, ha_sse_event *ev);

/* End of stream: flags describing what was left undelivered (0 when the
 * stream ended cleanly); *pending gets the undispatched event's size. */
unsigned ha_sse_finish(const ha_sse *s, size_t *pending);

/* The last valid `retry` value in milliseconds, or -1 if none. */
int64_t ha_sse_retry(const ha_sse *s);

#endif

/* Batch decoding (extract.h): frame (SSE, or NDJSON for Ollama), scan and
 * dispatch every event of one network read to its protocol's extractor (one file each, on the record
 * machinery of record.h).
 *
 * Each event's output is a transaction: when the output area cannot take
 * it, it is rolled back and the event waits as "pending" for the next call.
 */
#include "record.h"

#define TEXT_SLACK 4096u /* SSE name and id (raw mode), field paths */
#define RAW_SLACK 1024u  /* an unknown field's preview */

size_t ha_stream_text_size(size_t sse_cap) { return 3 * sse_cap + TEXT_SLACK; }
size_t ha_stream_raw_size(size_t sse_cap) { return sse_cap + RAW_SLACK; }

int ha_stream_init(ha_stream *st, ha_protocol proto, uint8_t *sse_buf,
                   size_t sse_cap, int64_t *recs, size_t rec_words,
                   uint8_t *text, size_t text_cap, uint8_t *raw, size_t raw_cap)
{
    if (sse_cap < HA_SSE_MIN_CAPACITY || rec_words < HA_REC_HEADER + HA_REC_WORDS ||
        text_cap < ha_stream_text_size(sse_cap) ||
        raw_cap < ha_stream_raw_size(sse_cap) || proto > HA_PROTO_OLLAMA)
        return -1;
    memset(st, 0, sizeof *st);
    /* one buffer, one framer fed: the other stays empty */
    ha_sse_init(&st->sse, sse_buf, sse_cap);
    ha_ndjson_init(&st->nd, sse_buf, sse_cap);
    if (proto == HA_PROTO_OLLAMA)
        ha_ndjson_watch(&st->nd, HA_OLLAMA_CALLS_KEY, sizeof HA_OLLAMA_CALLS_KEY - 1,
                        HA_OLLAMA_CALLS_DEPTH);
    /* JSON data: an oversize event keeps its small fields */
    ha_sse_elide(&st->sse, proto != HA_PROTO_SSE);
    st->proto = proto;
    st->recs = recs;
    st->rec_words = rec_words;
    st->text = text;
    st->text_cap = text_cap;
    st->raw = raw;
    st->raw_cap = raw_cap;
    st->out.co_rec = -1;
    st->tape.entries = st->tape_entries;
    st->tape.cap = HA_TAPE_MAX;
    return 0;
}

int64_t ha_stream_retry(const ha_stream *st) { return ha_sse_retry(&st->sse); }

static void sse_record(ev_ctx *c, const ha_sse_event *ev)
{
    unsigned flags = 0;
    int64_t *r = ev_rec(c, HA_REC_SSE_EVENT, -1, -1);
    if (!r)
        return;
    r[HA_WORD_CODE] = ev->has_id;
    ev_text_bytes(c, ev->name, ev->name_len, r + HA_WORD_S1, &flags);
    ev_text_bytes(c, ev->id, ev->id_len, r + HA_WORD_S2, &flags);
    ev_raw_span(c, 0, c->len, r);
    if (flags)
        ev_warn(c, HA_WARN_REPLACED_UTF8, "event name or id");
}

/* Whether an Ollama line that will not be decoded held a tool_calls member. */
static int calls_within(const uint8_t *line, size_t len)
{
    ha_json_keyscan scan;
    ha_json_keyscan_init(&scan, HA_OLLAMA_CALLS_KEY, sizeof HA_OLLAMA_CALLS_KEY - 1,
                         HA_OLLAMA_CALLS_DEPTH);
    return ha_json_keyscan_feed(&scan, line, len);
}

static void json_event(ev_ctx *c)
{
    ha_json_val root;
    size_t offset = 0;
    unsigned flags = 0;
    ha_json_tape *tape = &c->st->tape;
    ha_json_status status = ha_json_parse_tape(c->doc, c->len, HA_JSON_MAX_DEPTH, &root,
                                               &offset, &flags, tape);
    if (status != HA_JSON_OK) {
        int64_t *r = ev_rec(c, HA_REC_WARNING, (int64_t)offset, status);
        if (r) {
            r[HA_WORD_CODE] = HA_WARN_BAD_JSON;
            ev_raw_span(c, 0, c->len, r);
            if (c->st->proto == HA_PROTO_OLLAMA && calls_within(c->doc, c->len))
                ev_text_lit(c, HA_OLLAMA_CALLS_PATH, r + HA_WORD_S1);
        }
        return;
    }
    if (root.kind != HA_JSON_OBJECT) {
        ev_warn(c, HA_WARN_NOT_OBJECT, NULL);
        return;
    }
    c->tape = tape;
    c->key_escapes = (flags & HA_JSON_FLAG_KEY_ESCAPE) != 0;
    c->utf8_ok = (flags & HA_JSON_FLAG_BAD_UTF8) == 0;
    /* first: a warning after an end record would read as data after the end */
    if (flags & (HA_JSON_FLAG_BAD_UTF8 | HA_JSON_FLAG_LONE_SURROGATE))
        ev_warn(c, HA_WARN_REPLACED_UTF8, NULL);
    switch (c->st->proto) {
    case HA_PROTO_OPENAI_CHAT:
        ev_openai_chat_event(c, root);
        break;
    case HA_PROTO_ANTHROPIC:
        ev_anthropic_event(c, root);
        break;
    case HA_PROTO_OPENAI_RESPONSES:
        ev_openai_responses_event(c, root);
        break;
    case HA_PROTO_OLLAMA:
        ev_ollama_event(c, root);
        break;
    case HA_PROTO_SSE:
        break;
    }
}

_Static_assert((int)HA_NDJSON_LINE == (int)HA_SSE_EVENT, "a line is dispatched as an event");
_Static_assert((int)HA_NDJSON_ERR_LINE_TOO_LARGE > (int)HA_SSE_ERR_ID_TOO_LONG,
               "framer statuses are distinct (SSE's are 0..5)");
_Static_assert(HA_NDJSON_TAIL_PARTIAL_LINE == HA_SSE_TAIL_PARTIAL_LINE,
               "one tail flag for a stream cut mid-line");

static void extract(ev_ctx *c, int status, const ha_sse_event *ev)
{
    int64_t *r;
    unsigned flags = 0;
    switch (status) {
    case HA_SSE_EVENT:
        if (c->st->proto == HA_PROTO_SSE)
            sse_record(c, ev);
        else if (c->st->proto == HA_PROTO_OPENAI_CHAT && c->len == 6 && memcmp(c->doc, "[DONE]", 6) == 0)
            ev_rec(c, HA_REC_END, -1, -1);
        else
            json_event(c);
        break;
    case HA_SSE_UNKNOWN_FIELD:
        if ((r = ev_rec(c, HA_REC_UNKNOWN_FIELD, (int64_t)ev->size, -1))) {
            ev_text_bytes(c, ev->name, ev->name_len, r + HA_WORD_S1, &flags);
            ev_raw_put(c, ev->data, ev->data_len, r + HA_WORD_RAW);
            if (flags)
                ev_warn(c, HA_WARN_REPLACED_UTF8, "field name");
        }
        break;
    case HA_SSE_ERR_EVENT_TOO_LARGE:
    case HA_SSE_ERR_NAME_TOO_LONG:
    case HA_SSE_ERR_ID_TOO_LONG:
    case HA_NDJSON_ERR_LINE_TOO_LARGE:
        if ((r = ev_rec(c, HA_REC_FRAMING_ERROR, (int64_t)ev->size, -1))) {
            r[HA_WORD_CODE] = status;
            if (c->st->pending_held)
                ev_text_lit(c, HA_OLLAMA_CALLS_PATH, r + HA_WORD_S1);
        }
        break;
    default: /* HA_SSE_NEED_INPUT */
        break;
    }
}

/* Extract the pending event. 0 when the area is too full to take it. */
static int deliver(ha_stream *st)
{
    ev_ctx c;
    const ha_sse_event *ev = &st->ev;
    ev_begin(&c, st, ev->data, ev->data_len);
    c.elided = st->pending_status == HA_SSE_EVENT && ev->elided > 0;
    extract(&c, st->pending_status, ev);
    if (c.full) {
        ev_rollback(&c);
        if (!ev_started_empty(&c))
            return 0;
        /* cannot fit even alone: say so instead of looping */
        ev_begin(&c, st, ev->data, ev->data_len);
        int64_t *r = ev_rec(&c, HA_REC_FRAMING_ERROR, (int64_t)ev->data_len, -1);
        if (r)
            r[HA_WORD_CODE] = HA_ERR_OUTPUT_TOO_LARGE;
    } else if (c.meta_set) {
        ev_meta_commit(&c);
    }
    if (st->pending_status == HA_SSE_EVENT)
        st->events++;
    st->pending = 0;
    return 1;
}

/* The next event of the protocol's framing, into st->ev. */
static int frame_next(ha_stream *st, const uint8_t *in, size_t len, size_t *pos)
{
    ha_ndjson_line line;
    ha_ndjson_status status;
    if (st->proto != HA_PROTO_OLLAMA)
        return ha_sse_next(&st->sse, in, len, pos, &st->ev);
    status = ha_ndjson_next(&st->nd, in, len, pos, &line);
    if (status != HA_NDJSON_NEED_INPUT) {
        st->ev = (ha_sse_event){.data = line.data, .data_len = line.data_len, .size = line.size};
        st->pending_held = status == HA_NDJSON_ERR_LINE_TOO_LARGE && line.held;
    }
    return status;
}

static void begin_call(ha_stream *st)
{
    st->out.n_recs = 0;
    st->out.text_len = 0;
    st->out.text_chars = 0;
    st->out.raw_len = 0;
    st->events = 0;
    st->out.co_rec = -1;
}

static size_t end_call(ha_stream *st, size_t consumed, int full)
{
    st->recs[HA_HDR_EVENTS] = (int64_t)st->events;
    st->recs[HA_HDR_TEXT] = (int64_t)st->out.text_len;
    st->recs[HA_HDR_CONSUMED] = (int64_t)consumed;
    st->recs[HA_HDR_FULL] = full;
    return st->out.n_recs;
}

size_t ha_stream_feed(ha_stream *st, const uint8_t *in, size_t len)
{
    size_t pos = 0;
    begin_call(st);
    if (st->pending && !deliver(st))
        return end_call(st, 0, 1);
    for (;;) {
        int status = frame_next(st, in, len, &pos);
        if (status == HA_SSE_NEED_INPUT)
            return end_call(st, pos, 0);
        st->pending = 1;
        st->pending_status = status;
        if (!deliver(st)) {
            if (st->proto == HA_PROTO_OLLAMA) /* the line may lie in this read */
                st->ev.data = ha_ndjson_hold(&st->nd, st->ev.data, st->ev.data_len);
            return end_call(st, pos, 1);
        }
    }
}

int64_t ha_stream_feed_packed(ha_stream *st, const uint8_t *in, size_t len)
{
    size_t n = ha_stream_feed(st, in, len);
    const int64_t *r = st->recs + HA_REC_HEADER;
    int64_t kind;
    if (n != 1 || st->recs[HA_HDR_FULL] || r[HA_WORD_SUB] >= 0 || r[HA_WORD_S2] >= 0 ||
        r[HA_WORD_INDEX] < 0 || r[HA_WORD_INDEX] >= HA_PACKED_MAX_INDEX ||
        r[HA_WORD_S1] != 0 || r[HA_WORD_S1_END] != (int64_t)st->out.text_chars)
        return (int64_t)n;
    switch (r[HA_WORD_KIND]) {
    case HA_REC_TEXT: kind = HA_PACKED_TEXT; break;
    case HA_REC_REASONING: kind = HA_PACKED_REASONING; break;
    case HA_REC_REFUSAL: kind = HA_PACKED_REFUSAL; break;
    default: return (int64_t)n;
    }
    return -1 - (st->recs[HA_HDR_TEXT] << HA_PACKED_TEXT_SHIFT |
                 r[HA_WORD_INDEX] << HA_PACKED_KIND_BITS | kind);
}

size_t ha_stream_close(ha_stream *st)
{
    size_t pending = 0;
    unsigned flags;
    begin_call(st);
    if (st->pending)
        deliver(st); /* an empty area always takes it, or reports why not */
    if (st->proto == HA_PROTO_OLLAMA) {
        ha_ndjson_line line;
        /* no partial line behind a pending one: the framer stopped at its
           LF, so the area is still empty for the last line */
        int status = ha_ndjson_finish(&st->nd, &line, &flags);
        if (status != HA_NDJSON_NEED_INPUT) {
            pending = line.size;
            st->ev = (ha_sse_event){.data = line.data, .data_len = line.data_len, .size = line.size};
            st->pending_held = status == HA_NDJSON_ERR_LINE_TOO_LARGE && line.held;
            st->pending = 1;
            st->pending_status = status;
            deliver(st);
        }
    } else {
        flags = ha_sse_finish(&st->sse, &pending);
    }
    if (flags) {
        ev_ctx c;
        ev_begin(&c, st, NULL, 0);
        int64_t *r = ev_rec(&c, HA_REC_TAIL, (int64_t)pending, -1);
        if (r)
            r[HA_WORD_CODE] = flags;
    }
    return end_call(st, 0, 0);
}


/* Batch decoding: frame, scan and extract every event of one network read.
 *
 * Each event's output is a transaction: its records, text and raw bytes are
 * committed together, or rolled back when the output area cannot take them
 * (the event then waits as "pending" for the next call). The extraction
 * tables below read each object in one pass over its members.
 */
#include "extract.h"

#include <string.h>

#define W HA_REC_WORDS
#define TEXT_SLACK 4096u /* SSE name and id (raw mode), field paths */
#define RAW_SLACK 1024u  /* an unknown field's preview */

size_t ha_stream_text_size(size_t sse_cap) { return 3 * sse_cap + TEXT_SLACK; }
size_t ha_stream_raw_size(size_t sse_cap) { return sse_cap + RAW_SLACK; }

int ha_stream_init(ha_stream *st, ha_protocol proto, uint8_t *sse_buf,
                   size_t sse_cap, int64_t *recs, size_t rec_words,
                   uint8_t *text, size_t text_cap, uint8_t *raw, size_t raw_cap)
{
    if (sse_cap < HA_SSE_MIN_CAPACITY || rec_words < HA_REC_HEADER + W ||
        text_cap < ha_stream_text_size(sse_cap) ||
        raw_cap < ha_stream_raw_size(sse_cap) || proto > HA_PROTO_OPENAI_RESPONSES)
        return -1;
    memset(st, 0, sizeof *st);
    ha_sse_init(&st->sse, sse_buf, sse_cap);
    st->proto = proto;
    st->recs = recs;
    st->rec_words = rec_words;
    st->text = text;
    st->text_cap = text_cap;
    st->raw = raw;
    st->raw_cap = raw_cap;
    st->co_rec = -1;
    st->tape.entries = st->tape_entries;
    st->tape.cap = HA_TAPE_MAX;
    return 0;
}

int64_t ha_stream_retry(const ha_stream *st) { return ha_sse_retry(&st->sse); }

static const ha_json_val absent = {0, 0, HA_JSON_ABSENT, HA_JSON_NO_TAPE};

/* ---- one event's output, as a transaction ---- */

typedef struct {
    ha_stream *st;
    const uint8_t *doc; /* the event data */
    size_t len;
    const ha_json_tape *tape; /* of the event's JSON, once parsed */
    int key_escapes;    /* some key of the event's JSON holds an escape */
    int full;           /* something did not fit: roll back */
    long raw_base;      /* where the event data was copied to raw, or -1 */
    /* META to remember on commit */
    int meta_set;
    ha_json_val meta_id, meta_model;
    /* state to restore on rollback */
    size_t n_recs, text_len, text_chars, raw_len, co_end, co_id_start, co_id_end;
    long co_rec;
    int co_has_id;
    int64_t co_s1_end;
} ev_ctx;

static int64_t *rec_at(ha_stream *st, size_t i)
{
    return st->recs + HA_REC_HEADER + i * W;
}

static void ctx_begin(ev_ctx *c, ha_stream *st, const uint8_t *doc, size_t len)
{
    memset(c, 0, sizeof *c);
    c->st = st;
    c->doc = doc;
    c->len = len;
    c->raw_base = -1;
    c->n_recs = st->n_recs;
    c->text_len = st->text_len;
    c->text_chars = st->text_chars;
    c->raw_len = st->raw_len;
    c->co_rec = st->co_rec;
    c->co_end = st->co_end;
    c->co_id_start = st->co_id_start;
    c->co_id_end = st->co_id_end;
    c->co_has_id = st->co_has_id;
    c->co_s1_end = st->co_rec >= 0 ? rec_at(st, (size_t)st->co_rec)[5] : 0;
}

static void ctx_rollback(ev_ctx *c)
{
    ha_stream *st = c->st;
    st->n_recs = c->n_recs;
    st->text_len = c->text_len;
    st->text_chars = c->text_chars;
    st->raw_len = c->raw_len;
    st->co_rec = c->co_rec;
    st->co_end = c->co_end;
    st->co_id_start = c->co_id_start;
    st->co_id_end = c->co_id_end;
    st->co_has_id = c->co_has_id;
    if (c->co_rec >= 0)
        rec_at(st, (size_t)c->co_rec)[5] = c->co_s1_end;
}

static int ctx_started_empty(const ev_ctx *c)
{
    return c->n_recs == 0 && c->text_len == 0 && c->raw_len == 0;
}

/* A new record with every span absent; NULL (and c->full) when out of room. */
static int64_t *rec_add(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub)
{
    ha_stream *st = c->st;
    if (c->full)
        return NULL;
    if (HA_REC_HEADER + (st->n_recs + 1) * W > st->rec_words) {
        c->full = 1;
        return NULL;
    }
    int64_t *r = rec_at(st, st->n_recs++);
    r[0] = kind;
    r[1] = index;
    r[2] = sub;
    r[3] = 0;
    for (int k = 4; k < W; k++)
        r[k] = -1;
    st->co_rec = -1;
    return r;
}

static size_t count_chars(const uint8_t *p, size_t n)
{
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += (p[i] & 0xC0) != 0x80;
    return chars;
}

/* Commit n bytes just written at the end of the text area; span gets their
 * code-point offsets. */
static void text_commit(ha_stream *st, size_t n, int64_t *span)
{
    size_t chars = count_chars(st->text + st->text_len, n);
    span[0] = (int64_t)st->text_chars;
    st->text_len += n;
    st->text_chars += chars;
    span[1] = (int64_t)st->text_chars;
}

/* Decode a JSON string value into the text area. */
static int text_json(ev_ctx *c, ha_json_val v, int64_t *span)
{
    ha_stream *st = c->st;
    size_t room = st->text_cap - st->text_len, n = 0;
    unsigned flags = 0;
    if (c->full || !span)
        return 0;
    if (ha_json_str_max(v) > room ||
        ha_json_str_decode(c->doc, v, st->text + st->text_len, room, &n, &flags) != HA_JSON_OK) {
        c->full = 1;
        return 0;
    }
    text_commit(st, n, span);
    return 1;
}

/* Raw bytes (SSE names, ids, field names) into the text area, made valid. */
static int text_bytes(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span, unsigned *flags)
{
    ha_stream *st = c->st;
    if (c->full || !span)
        return 0;
    if (3 * n > st->text_cap - st->text_len) {
        c->full = 1;
        return 0;
    }
    text_commit(st, ha_utf8_sanitize(p, n, st->text + st->text_len, flags), span);
    return 1;
}

static int text_lit(ev_ctx *c, const char *s, int64_t *span)
{
    unsigned flags = 0;
    return text_bytes(c, (const uint8_t *)s, strlen(s), span, &flags);
}

static int raw_put(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span)
{
    ha_stream *st = c->st;
    if (c->full || !span)
        return 0;
    if (n > st->raw_cap - st->raw_len) {
        c->full = 1;
        return 0;
    }
    memcpy(st->raw + st->raw_len, p, n);
    span[0] = (int64_t)st->raw_len;
    st->raw_len += n;
    span[1] = (int64_t)st->raw_len;
    return 1;
}

/* A part of the event data as raw bytes: the data is copied once per event
 * and every raw span of the event points into that copy. */
static void raw_span(ev_ctx *c, size_t start, size_t end, int64_t *r)
{
    if (!r)
        return;
    if (c->raw_base < 0) {
        int64_t whole[2];
        if (!raw_put(c, c->doc, c->len, whole))
            return;
        c->raw_base = (long)whole[0];
    }
    r[10] = c->raw_base + (int64_t)start;
    r[11] = c->raw_base + (int64_t)end;
}

static void raw_val(ev_ctx *c, ha_json_val v, int64_t *r)
{
    raw_span(c, v.start, v.end, r);
}

/* ---- records shared by the protocols ---- */

static void warn(ev_ctx *c, ha_warning code, const char *detail)
{
    int64_t *r = rec_add(c, HA_REC_WARNING, -1, -1);
    if (!r)
        return;
    r[3] = code;
    if (detail)
        text_lit(c, detail, r + 4);
    raw_span(c, 0, c->len, r);
}

static int is_kind(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path)
{
    if (v.kind == want)
        return 1;
    if (v.kind != HA_JSON_ABSENT && v.kind != HA_JSON_NULL)
        warn(c, HA_WARN_FIELD_TYPE, path);
    return 0;
}

/* A member the event type needs: absent or null warns MISSING_FIELD, another
 * kind FIELD_TYPE. */
static int required(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path)
{
    if (v.kind == HA_JSON_ABSENT || v.kind == HA_JSON_NULL) {
        warn(c, HA_WARN_MISSING_FIELD, path);
        return 0;
    }
    return is_kind(c, v, want, path);
}

/* A member the event type needs, of any kind: absent or null warns. */
static int present(ev_ctx *c, ha_json_val v, const char *path)
{
    if (v.kind != HA_JSON_ABSENT && v.kind != HA_JSON_NULL)
        return 1;
    warn(c, HA_WARN_MISSING_FIELD, path);
    return 0;
}

/* A type we do not know: the warning names it. */
static void warn_type(ev_ctx *c, ha_warning code, ha_json_val type)
{
    int64_t *r = rec_add(c, HA_REC_WARNING, -1, -1);
    if (!r)
        return;
    r[3] = code;
    text_json(c, type, r + 4);
    raw_span(c, 0, c->len, r);
}

/* An integer member: the value, or -1 when absent, null or of a wrong type
 * (which warns). */
static int64_t int_field(ev_ctx *c, ha_json_val v, const char *path)
{
    int64_t out = -1;
    if (v.kind == HA_JSON_ABSENT || v.kind == HA_JSON_NULL)
        return -1;
    if (v.kind != HA_JSON_NUMBER || ha_json_get_i64(c->doc, v, &out) != HA_JSON_OK || out < 0) {
        warn(c, HA_WARN_FIELD_TYPE, path);
        return -1;
    }
    return out;
}

/* A delta piece (text, reasoning, refusal, tool arguments). It
 * extends the previous record when that is a delta of the same kind, index,
 * sub and item id whose text ends where this one starts. */
static void delta(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub,
                  ha_json_val piece, ha_json_val item_id, const char *path)
{
    ha_stream *st = c->st;
    if (!is_kind(c, piece, HA_JSON_STRING, path) || piece.end - piece.start == 2 || c->full)
        return;
    size_t start = st->text_len, start_chars = st->text_chars;
    int64_t id_span[2] = {-1, -1};
    int has_id = item_id.kind == HA_JSON_STRING;
    if (has_id && !text_json(c, item_id, id_span))
        return;
    size_t id_end = st->text_len;
    if (st->co_rec >= 0 && st->co_end == start) {
        int64_t *p = rec_at(st, (size_t)st->co_rec);
        if (p[0] == kind && p[1] == index && p[2] == sub && st->co_has_id == has_id &&
            (!has_id || (st->co_id_end - st->co_id_start == id_end - start &&
                         memcmp(st->text + st->co_id_start, st->text + start, id_end - start) == 0))) {
            int64_t piece_span[2];
            st->text_len = start; /* the id is already there */
            st->text_chars = start_chars;
            if (!text_json(c, piece, piece_span))
                return;
            p[5] = piece_span[1];
            st->co_end = st->text_len;
            return;
        }
    }
    int64_t *r = rec_add(c, kind, index, sub);
    if (!r || !text_json(c, piece, r + 4))
        return;
    r[6] = id_span[0];
    r[7] = id_span[1];
    st->co_rec = (long)st->n_recs - 1;
    st->co_end = st->text_len;
    st->co_id_start = start;
    st->co_id_end = id_end;
    st->co_has_id = has_id;
}

static void text_opt(ev_ctx *c, ha_json_val v, int64_t *span, const char *path)
{
    if (is_kind(c, v, HA_JSON_STRING, path))
        text_json(c, v, span);
}

/* A thinking block's signature is opaque and whole in each delta (a later
 * one replaces it): never merged with a neighbour. */
static void signature(ev_ctx *c, int64_t index, ha_json_val v, const char *path)
{
    int64_t *r;
    if (is_kind(c, v, HA_JSON_STRING, path) && v.end - v.start > 2 &&
        (r = rec_add(c, HA_REC_SIGNATURE, index, -1)))
        text_json(c, v, r + 4);
}

static void meta(ev_ctx *c, ha_json_val id, ha_json_val model)
{
    ha_stream *st = c->st;
    int has_id = is_kind(c, id, HA_JSON_STRING, "id");
    int has_model = is_kind(c, model, HA_JSON_STRING, "model");
    if (!has_id && !has_model)
        return;
    size_t id_len = has_id ? id.end - id.start : 0;
    size_t model_len = has_model ? model.end - model.start : 0;
    /* compare the raw string bytes, quotes included: escapes decode the same */
    if (id_len == st->meta_id_len && model_len == st->meta_model_len &&
        memcmp(st->meta_id, c->doc + id.start, id_len) == 0 &&
        memcmp(st->meta_model, c->doc + model.start, model_len) == 0)
        return;
    int64_t *r = rec_add(c, HA_REC_META, -1, -1);
    if (!r)
        return;
    if (has_id)
        text_json(c, id, r + 4);
    if (has_model)
        text_json(c, model, r + 6);
    if (id_len <= HA_META_MAX && model_len <= HA_META_MAX) {
        c->meta_set = 1;
        c->meta_id = has_id ? id : absent;
        c->meta_model = has_model ? model : absent;
    }
}

static void meta_commit(ev_ctx *c)
{
    ha_stream *st = c->st;
    st->meta_id_len = c->meta_id.end - c->meta_id.start;
    memcpy(st->meta_id, c->doc + c->meta_id.start, st->meta_id_len);
    st->meta_model_len = c->meta_model.end - c->meta_model.start;
    memcpy(st->meta_model, c->doc + c->meta_model.start, st->meta_model_len);
}

static void iter(const ev_ctx *c, ha_json_iter *it, ha_json_val container)
{
    ha_json_iter_init_tape(it, c->doc, container, c->tape);
}

/* Whether string span s decodes to lit. Its raw bytes decide at once in all
 * but one case: raw longer than lit can still decode to lit through escapes.
 * For keys the parser tells whether any key of the event has an escape. */
static inline int str_is(const ev_ctx *c, ha_json_val s, const char *lit, size_t n,
                         int may_escape)
{
    size_t raw = s.end - s.start - 2;
    if (raw == n)
        return memcmp(c->doc + s.start + 1, lit, n) == 0;
    return raw > n && may_escape && ha_json_key_eq(c->doc, s, (const uint8_t *)lit, n);
}

static int has_members(const ev_ctx *c, ha_json_val obj)
{
    ha_json_iter it;
    ha_json_val k, v;
    iter(c, &it, obj);
    return ha_json_obj_next(&it, &k, &v);
}

#define KEY(k, lit) str_is(c, (k), (lit), sizeof(lit) - 1, c->key_escapes)
#define IS(v, lit) str_is(c, (v), (lit), sizeof(lit) - 1, 1)

/* An error object: {type|code, message}, or a bare string message. */
static void error_record(ev_ctx *c, ha_json_val err)
{
    int64_t *r = rec_add(c, HA_REC_ERROR, -1, -1);
    if (!r)
        return;
    raw_val(c, err, r);
    if (err.kind == HA_JSON_STRING) {
        text_json(c, err, r + 6);
        return;
    }
    if (err.kind != HA_JSON_OBJECT)
        return;
    ha_json_val k, v, type = absent, code = absent, message = absent;
    ha_json_iter it;
    iter(c, &it, err);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "type"))
            type = v;
        else if (KEY(k, "code"))
            code = v;
        else if (KEY(k, "message"))
            message = v;
    }
    /* a flat Responses error event is {"type": "error", "code": ...}: there
       the type says only that it is an error, the code says which */
    if (type.kind == HA_JSON_STRING && !(IS(type, "error") && code.kind != HA_JSON_ABSENT &&
                                         code.kind != HA_JSON_NULL))
        text_json(c, type, r + 4);
    else if (code.kind == HA_JSON_STRING)
        text_json(c, code, r + 4);
    else if (code.kind == HA_JSON_NUMBER) /* e.g. llama.cpp's HTTP-like codes */
        text_bytes(c, c->doc + code.start, code.end - code.start, r + 4, &(unsigned){0});
    if (message.kind == HA_JSON_STRING)
        text_json(c, message, r + 6);
}

/* Usage counts: names[] maps each HA_USAGE_* word to a member name. Nested
 * detail objects ("prompt_tokens_details": {"cached_tokens"}) are handled by
 * the callers. */
typedef struct {
    const char *name;
    int word;
} usage_key;

static int64_t *usage_record(ev_ctx *c, ha_json_val u, const usage_key *keys, size_t n_keys)
{
    int64_t *r = rec_add(c, HA_REC_USAGE, -1, -1);
    if (!r)
        return NULL;
    ha_json_val k, v;
    ha_json_iter it;
    iter(c, &it, u);
    while (ha_json_obj_next(&it, &k, &v))
        for (size_t i = 0; i < n_keys; i++)
            if (ha_json_key_eq(c->doc, k, (const uint8_t *)keys[i].name, strlen(keys[i].name))) {
                int64_t n = int_field(c, v, keys[i].name);
                if (n >= 0)
                    r[keys[i].word] = n;
            }
    return r;
}

static void usage_detail(ev_ctx *c, int64_t *r, ha_json_val u, const char *obj,
                         const char *member, int word)
{
    ha_json_val d = ha_json_obj_get_tape(c->doc, u, (const uint8_t *)obj, strlen(obj), c->tape);
    if (!r || !is_kind(c, d, HA_JSON_OBJECT, obj))
        return;
    int64_t n = int_field(c, ha_json_obj_get_tape(c->doc, d, (const uint8_t *)member, strlen(member), c->tape), member);
    if (n >= 0)
        r[word] = n;
}

/* ---- OpenAI Chat Completions (and compatible servers) ---- */

static void chat_tool_call(ev_ctx *c, int64_t choice, ha_json_val call)
{
    ha_json_val k, v, index = absent, id = absent, type = absent, fn = absent;
    ha_json_val name = index, args = index;
    ha_json_iter it;
    if (!is_kind(c, call, HA_JSON_OBJECT, "choices[].delta.tool_calls[]"))
        return;
    iter(c, &it, call);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "index"))
            index = v;
        else if (KEY(k, "id"))
            id = v;
        else if (KEY(k, "type"))
            type = v;
        else if (KEY(k, "function"))
            fn = v;
    }
    if (is_kind(c, fn, HA_JSON_OBJECT, "choices[].delta.tool_calls[].function")) {
        iter(c, &it, fn);
        while (ha_json_obj_next(&it, &k, &v)) {
            if (KEY(k, "name"))
                name = v;
            else if (KEY(k, "arguments"))
                args = v;
        }
    }
    /* "" is no id and no name: a later chunk may still bring the real one */
    if (id.kind == HA_JSON_STRING && id.end - id.start == 2)
        id = absent;
    if (name.kind == HA_JSON_STRING && name.end - name.start == 2)
        name = absent;
    int64_t tool = int_field(c, index, "choices[].delta.tool_calls[].index");
    int has_id = is_kind(c, id, HA_JSON_STRING, "choices[].delta.tool_calls[].id");
    int has_name = is_kind(c, name, HA_JSON_STRING, "choices[].delta.tool_calls[].function.name");
    int has_type = is_kind(c, type, HA_JSON_STRING, "choices[].delta.tool_calls[].type");
    if (has_id || has_name || has_type) {
        int64_t *r = rec_add(c, HA_REC_TOOL_START, choice, tool);
        if (r) {
            if (has_id)
                text_json(c, id, r + 4);
            if (has_name)
                text_json(c, name, r + 6);
            if (has_type)
                text_json(c, type, r + 8);
        }
    }
    delta(c, HA_REC_TOOL_ARGS, choice, tool, args, absent,
          "choices[].delta.tool_calls[].function.arguments");
}

static void chat_choice(ev_ctx *c, ha_json_val choice, int64_t position)
{
    ha_json_val k, v, index = absent, d = absent, finish = absent;
    ha_json_iter it;
    if (!is_kind(c, choice, HA_JSON_OBJECT, "choices[]"))
        return;
    iter(c, &it, choice);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "delta"))
            d = v;
        else if (KEY(k, "index"))
            index = v;
        else if (KEY(k, "finish_reason"))
            finish = v;
    }
    int64_t at = int_field(c, index, "choices[].index");
    if (at < 0)
        at = position;
    if (is_kind(c, d, HA_JSON_OBJECT, "choices[].delta")) {
        /* members first (a duplicate key: the last wins), records after, in
           the order a reader expects: reasoning, text, refusal, tool calls */
        ha_json_val content = absent, reasoning_content = absent, reasoning = absent;
        ha_json_val refusal = absent, calls = absent;
        iter(c, &it, d);
        while (ha_json_obj_next(&it, &k, &v)) {
            if (KEY(k, "content"))
                content = v;
            else if (KEY(k, "reasoning_content"))
                reasoning_content = v;
            else if (KEY(k, "reasoning"))
                reasoning = v;
            else if (KEY(k, "refusal"))
                refusal = v;
            else if (KEY(k, "tool_calls"))
                calls = v;
        }
        /* DeepSeek and llama.cpp say reasoning_content, vLLM reasoning; a
           gateway may mirror one into the other: take it once */
        if (reasoning_content.kind == HA_JSON_STRING && reasoning_content.end - reasoning_content.start > 2) {
            delta(c, HA_REC_REASONING, at, -1, reasoning_content, absent, "choices[].delta.reasoning_content");
        } else {
            is_kind(c, reasoning_content, HA_JSON_STRING, "choices[].delta.reasoning_content");
            delta(c, HA_REC_REASONING, at, -1, reasoning, absent, "choices[].delta.reasoning");
        }
        delta(c, HA_REC_TEXT, at, -1, content, absent, "choices[].delta.content");
        delta(c, HA_REC_REFUSAL, at, -1, refusal, absent, "choices[].delta.refusal");
        if (is_kind(c, calls, HA_JSON_ARRAY, "choices[].delta.tool_calls")) {
            ha_json_iter list;
            ha_json_val call;
            iter(c, &list, calls);
            while (ha_json_arr_next(&list, &call))
                chat_tool_call(c, at, call);
        }
    }
    /* "" on every chunk (sglang, older Ollama) is not a stop */
    if (is_kind(c, finish, HA_JSON_STRING, "choices[].finish_reason") && finish.end - finish.start > 2) {
        int64_t *r = rec_add(c, HA_REC_FINISH, at, HA_FINISH_STOP);
        if (r)
            text_json(c, finish, r + 4);
    }
}

static const usage_key chat_usage[] = {
    {"prompt_tokens", HA_USAGE_INPUT},
    {"completion_tokens", HA_USAGE_OUTPUT},
    {"total_tokens", HA_USAGE_TOTAL},
};

static void chat_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val k, v, id = absent, model = absent, choices = absent, usage = absent, error = absent;
    ha_json_iter it;
    iter(c, &it, root);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "choices"))
            choices = v;
        else if (KEY(k, "id"))
            id = v;
        else if (KEY(k, "model"))
            model = v;
        else if (KEY(k, "usage"))
            usage = v;
        else if (KEY(k, "error"))
            error = v;
    }
    /* an error is an object with members or a message string; false, "",
       {} and null are what some servers send when there is none */
    if ((error.kind == HA_JSON_OBJECT && has_members(c, error)) ||
        (error.kind == HA_JSON_STRING && error.end - error.start > 2)) {
        error_record(c, error);
        return;
    }
    if (error.kind != HA_JSON_OBJECT && error.kind != HA_JSON_STRING && error.kind != HA_JSON_FALSE)
        is_kind(c, error, HA_JSON_OBJECT, "error");
    /* Azure's prompt-filter chunk has "id": "": not an id */
    if (id.kind == HA_JSON_STRING && id.end - id.start == 2)
        id = absent;
    if (model.kind == HA_JSON_STRING && model.end - model.start == 2)
        model = absent;
    meta(c, id, model);
    if (is_kind(c, choices, HA_JSON_ARRAY, "choices")) {
        ha_json_iter list;
        ha_json_val choice;
        int64_t position = 0;
        iter(c, &list, choices);
        while (ha_json_arr_next(&list, &choice))
            chat_choice(c, choice, position++);
    }
    if (is_kind(c, usage, HA_JSON_OBJECT, "usage")) {
        int64_t *r = usage_record(c, usage, chat_usage, sizeof chat_usage / sizeof *chat_usage);
        usage_detail(c, r, usage, "prompt_tokens_details", "cached_tokens", HA_USAGE_CACHE_READ);
        usage_detail(c, r, usage, "completion_tokens_details", "reasoning_tokens", HA_USAGE_REASONING);
    }
}

/* ---- Anthropic Messages ---- */

static const usage_key anthropic_usage[] = {
    {"input_tokens", HA_USAGE_INPUT},
    {"output_tokens", HA_USAGE_OUTPUT},
    {"cache_read_input_tokens", HA_USAGE_CACHE_READ},
    {"cache_creation_input_tokens", HA_USAGE_CACHE_WRITE},
};

static void anthropic_usage_of(ev_ctx *c, ha_json_val u)
{
    if (is_kind(c, u, HA_JSON_OBJECT, "usage"))
        usage_record(c, u, anthropic_usage, sizeof anthropic_usage / sizeof *anthropic_usage);
}

#define GET(obj, lit) ha_json_obj_get_tape(c->doc, (obj), (const uint8_t *)(lit), sizeof(lit) - 1, c->tape)

static void anthropic_block_start(ev_ctx *c, int64_t index, ha_json_val block)
{
    ha_json_val type = GET(block, "type");
    if (!required(c, type, HA_JSON_STRING, "content_block.type"))
        return;
    int64_t *r;
    if (IS(type, "text")) {
        if (rec_add(c, HA_REC_BLOCK_START, index, HA_ITEM_TEXT))
            delta(c, HA_REC_TEXT, index, -1, GET(block, "text"), absent, "content_block.text");
    } else if (IS(type, "thinking")) {
        if (rec_add(c, HA_REC_BLOCK_START, index, HA_ITEM_THINKING)) {
            delta(c, HA_REC_REASONING, index, -1, GET(block, "thinking"), absent, "content_block.thinking");
            signature(c, index, GET(block, "signature"), "content_block.signature");
        }
    } else if (IS(type, "redacted_thinking")) {
        if ((r = rec_add(c, HA_REC_BLOCK_START, index, HA_ITEM_REDACTED_THINKING)))
            text_opt(c, GET(block, "data"), r + 4, "content_block.data");
    } else if (IS(type, "tool_use") || IS(type, "server_tool_use")) {
        if ((r = rec_add(c, HA_REC_BLOCK_START, index, HA_ITEM_TOOL_USE))) {
            text_opt(c, GET(block, "id"), r + 4, "content_block.id");
            text_opt(c, GET(block, "name"), r + 6, "content_block.name");
        }
    } else if ((r = rec_add(c, HA_REC_BLOCK_START, index, HA_ITEM_OTHER))) {
        r[3] = 1;
        text_json(c, type, r + 8);
        raw_val(c, block, r);
    }
}

/* A delta's piece: required, then added (an empty piece adds nothing). */
static void piece(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub, ha_json_val v,
                  ha_json_val item_id, const char *path)
{
    if (required(c, v, HA_JSON_STRING, path))
        delta(c, kind, index, sub, v, item_id, path);
}

static void anthropic_block_delta(ev_ctx *c, int64_t index, ha_json_val d)
{
    ha_json_val type = GET(d, "type");
    if (!required(c, type, HA_JSON_STRING, "delta.type"))
        return;
    if (IS(type, "text_delta")) {
        piece(c, HA_REC_TEXT, index, -1, GET(d, "text"), absent, "delta.text");
    } else if (IS(type, "input_json_delta")) {
        piece(c, HA_REC_TOOL_ARGS, index, -1, GET(d, "partial_json"), absent, "delta.partial_json");
    } else if (IS(type, "thinking_delta")) {
        piece(c, HA_REC_REASONING, index, -1, GET(d, "thinking"), absent, "delta.thinking");
    } else if (IS(type, "signature_delta")) {
        ha_json_val sig = GET(d, "signature");
        if (required(c, sig, HA_JSON_STRING, "delta.signature"))
            signature(c, index, sig, "delta.signature");
    } else if (IS(type, "citations_delta")) {
        ha_json_val cite = GET(d, "citation");
        int64_t *r;
        if (required(c, cite, HA_JSON_OBJECT, "delta.citation") &&
            (r = rec_add(c, HA_REC_CITATION, index, -1)))
            raw_val(c, cite, r);
    } else {
        warn_type(c, HA_WARN_UNKNOWN_DELTA, type);
    }
}

static void anthropic_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val k, v, type = absent, index = absent, message = absent, block = absent;
    ha_json_val error = absent, d = absent, usage = absent;
    ha_json_iter it;
    iter(c, &it, root);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "type"))
            type = v;
        else if (KEY(k, "index"))
            index = v;
        else if (KEY(k, "delta"))
            d = v;
        else if (KEY(k, "usage"))
            usage = v;
        else if (KEY(k, "content_block"))
            block = v;
        else if (KEY(k, "message"))
            message = v;
        else if (KEY(k, "error"))
            error = v;
    }
    if (!required(c, type, HA_JSON_STRING, "type"))
        return;
    /* an index of a wrong type warns and the block is kept as -1 (int_field) */
    if (IS(type, "content_block_delta")) {
        if (present(c, index, "index") && required(c, d, HA_JSON_OBJECT, "delta"))
            anthropic_block_delta(c, int_field(c, index, "index"), d);
    } else if (IS(type, "content_block_start")) {
        if (present(c, index, "index") && required(c, block, HA_JSON_OBJECT, "content_block"))
            anthropic_block_start(c, int_field(c, index, "index"), block);
    } else if (IS(type, "content_block_stop")) {
        if (present(c, index, "index"))
            rec_add(c, HA_REC_BLOCK_STOP, int_field(c, index, "index"), -1);
    } else if (IS(type, "message_start")) {
        if (required(c, message, HA_JSON_OBJECT, "message")) {
            meta(c, GET(message, "id"), GET(message, "model"));
            anthropic_usage_of(c, GET(message, "usage"));
        }
    } else if (IS(type, "message_delta")) {
        if (required(c, d, HA_JSON_OBJECT, "delta")) {
            ha_json_val reason = GET(d, "stop_reason");
            int64_t *r;
            if (is_kind(c, reason, HA_JSON_STRING, "delta.stop_reason") &&
                (r = rec_add(c, HA_REC_FINISH, -1, HA_FINISH_STOP))) {
                text_json(c, reason, r + 4);
                text_opt(c, GET(d, "stop_sequence"), r + 6, "delta.stop_sequence");
            }
        }
        anthropic_usage_of(c, usage);
    } else if (IS(type, "message_stop")) {
        int64_t *r = rec_add(c, HA_REC_END, -1, -1);
        if (r)
            r[3] = 1;
    } else if (IS(type, "ping")) {
        /* keep-alive: nothing to report */
    } else if (IS(type, "error")) {
        error_record(c, error.kind == HA_JSON_ABSENT ? root : error);
    } else {
        warn_type(c, HA_WARN_UNKNOWN_EVENT, type);
    }
}

/* ---- OpenAI Responses ---- */

static const usage_key responses_usage[] = {
    {"input_tokens", HA_USAGE_INPUT},
    {"output_tokens", HA_USAGE_OUTPUT},
    {"total_tokens", HA_USAGE_TOTAL},
};

static ha_item_kind responses_item_kind(ev_ctx *c, ha_json_val type)
{
    if (IS(type, "message"))
        return HA_ITEM_TEXT;
    if (IS(type, "reasoning"))
        return HA_ITEM_THINKING;
    if (IS(type, "function_call"))
        return HA_ITEM_TOOL_USE;
    return HA_ITEM_OTHER;
}

/* output_item.added (stop = 0) and output_item.done (stop = 1) */
static void responses_item(ev_ctx *c, int64_t index, ha_json_val item, int stop)
{
    if (!required(c, item, HA_JSON_OBJECT, "item"))
        return;
    ha_json_val type = GET(item, "type");
    if (!required(c, type, HA_JSON_STRING, "item.type"))
        return;
    ha_item_kind kind = responses_item_kind(c, type);
    int64_t *r = rec_add(c, stop ? HA_REC_BLOCK_STOP : HA_REC_BLOCK_START, index, kind);
    if (!r)
        return;
    if (kind == HA_ITEM_TOOL_USE) {
        text_opt(c, GET(item, "call_id"), r + 4, "item.call_id");
        if (stop)
            text_opt(c, GET(item, "arguments"), r + 6, "item.arguments");
        else
            text_opt(c, GET(item, "name"), r + 6, "item.name");
    }
    if (stop) {
        text_opt(c, GET(item, "id"), r + 8, "item.id");
        raw_val(c, item, r);
    } else if (kind == HA_ITEM_OTHER) {
        r[3] = 1;
        text_json(c, type, r + 8);
        raw_val(c, item, r);
    } else {
        text_opt(c, GET(item, "id"), r + 8, "item.id");
    }
}

/* response.completed / incomplete / failed: the event type alone says how
 * the response ended, so the finish record comes whatever its body holds. */
static void responses_final(ev_ctx *c, ha_json_val response, ha_finish_status status)
{
    /* the reason when the body names none: the event type's own word */
    const char *said = status == HA_FINISH_COMPLETED    ? "completed"
                       : status == HA_FINISH_INCOMPLETE ? "incomplete"
                                                        : "failed";
    int64_t *r;
    if (!required(c, response, HA_JSON_OBJECT, "response")) {
        if ((r = rec_add(c, HA_REC_FINISH, -1, status)))
            text_lit(c, said, r + 4);
        return;
    }
    meta(c, GET(response, "id"), GET(response, "model"));
    ha_json_val u = GET(response, "usage");
    if (is_kind(c, u, HA_JSON_OBJECT, "response.usage")) {
        int64_t *counts = usage_record(c, u, responses_usage, sizeof responses_usage / sizeof *responses_usage);
        usage_detail(c, counts, u, "input_tokens_details", "cached_tokens", HA_USAGE_CACHE_READ);
        usage_detail(c, counts, u, "output_tokens_details", "reasoning_tokens", HA_USAGE_REASONING);
    }
    ha_json_val err = GET(response, "error");
    if (is_kind(c, err, HA_JSON_OBJECT, "response.error"))
        error_record(c, err);
    ha_json_val details = GET(response, "incomplete_details"), reason = absent;
    if (is_kind(c, details, HA_JSON_OBJECT, "response.incomplete_details")) {
        reason = GET(details, "reason");
        if (!is_kind(c, reason, HA_JSON_STRING, "response.incomplete_details.reason"))
            reason = absent;
    }
    if (reason.kind != HA_JSON_STRING) {
        reason = GET(response, "status");
        if (!is_kind(c, reason, HA_JSON_STRING, "response.status"))
            reason = absent;
    }
    /* last, so that the warnings of this event come before its end */
    if ((r = rec_add(c, HA_REC_FINISH, -1, status))) {
        if (reason.kind == HA_JSON_STRING)
            text_json(c, reason, r + 4);
        else
            text_lit(c, said, r + 4);
    }
}

static void responses_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val k, v, type = absent, out = absent, part = absent, summary = absent;
    ha_json_val item_id = absent, text = absent, item = absent, response = absent;
    ha_json_iter it;
    iter(c, &it, root);
    while (ha_json_obj_next(&it, &k, &v)) {
        if (KEY(k, "type"))
            type = v;
        else if (KEY(k, "delta"))
            text = v;
        else if (KEY(k, "item_id"))
            item_id = v;
        else if (KEY(k, "output_index"))
            out = v;
        else if (KEY(k, "content_index"))
            part = v;
        else if (KEY(k, "summary_index"))
            summary = v;
        else if (KEY(k, "item"))
            item = v;
        else if (KEY(k, "response"))
            response = v;
    }
    if (!required(c, type, HA_JSON_STRING, "type"))
        return;
    if (item_id.kind != HA_JSON_STRING) {
        is_kind(c, item_id, HA_JSON_STRING, "item_id");
        item_id = absent;
    }
    if (IS(type, "response.output_text.delta")) {
        piece(c, HA_REC_TEXT, int_field(c, out, "output_index"), int_field(c, part, "content_index"),
              text, item_id, "delta");
    } else if (IS(type, "response.function_call_arguments.delta")) {
        piece(c, HA_REC_TOOL_ARGS, int_field(c, out, "output_index"), -1, text, item_id, "delta");
    } else if (IS(type, "response.reasoning_summary_text.delta")) {
        piece(c, HA_REC_REASONING, int_field(c, out, "output_index"),
              int_field(c, summary, "summary_index"), text, item_id, "delta");
    } else if (IS(type, "response.reasoning_text.delta")) {
        piece(c, HA_REC_REASONING, int_field(c, out, "output_index"), -1, text, item_id, "delta");
    } else if (IS(type, "response.refusal.delta")) {
        piece(c, HA_REC_REFUSAL, int_field(c, out, "output_index"), int_field(c, part, "content_index"),
              text, item_id, "delta");
    } else if (IS(type, "response.output_item.added")) {
        responses_item(c, int_field(c, out, "output_index"), item, 0);
    } else if (IS(type, "response.output_item.done")) {
        responses_item(c, int_field(c, out, "output_index"), item, 1);
    } else if (IS(type, "response.output_text.annotation.added")) {
        ha_json_val note = GET(root, "annotation");
        int64_t *r;
        if (required(c, note, HA_JSON_OBJECT, "annotation") &&
            (r = rec_add(c, HA_REC_CITATION, int_field(c, out, "output_index"), -1)))
            raw_val(c, note, r);
    } else if (IS(type, "response.created") || IS(type, "response.in_progress") ||
               IS(type, "response.queued")) {
        if (required(c, response, HA_JSON_OBJECT, "response"))
            meta(c, GET(response, "id"), GET(response, "model"));
    } else if (IS(type, "response.completed")) {
        responses_final(c, response, HA_FINISH_COMPLETED);
    } else if (IS(type, "response.incomplete")) {
        responses_final(c, response, HA_FINISH_INCOMPLETE);
    } else if (IS(type, "response.failed")) {
        responses_final(c, response, HA_FINISH_FAILED);
    } else if (IS(type, "error")) {
        ha_json_val nested = GET(root, "error");
        error_record(c, nested.kind == HA_JSON_OBJECT ? nested : root);
    } else if (IS(type, "response.content_part.added") || IS(type, "response.content_part.done") ||
               IS(type, "response.output_text.done") || IS(type, "response.refusal.done") ||
               IS(type, "response.function_call_arguments.done") ||
               IS(type, "response.reasoning_summary_part.added") ||
               IS(type, "response.reasoning_summary_part.done") ||
               IS(type, "response.reasoning_summary_text.done") ||
               IS(type, "response.reasoning_text.done")) {
        /* repeats what the deltas and output_item.done carry */
    } else {
        warn_type(c, HA_WARN_UNKNOWN_EVENT, type);
    }
}

/* ---- dispatch ---- */

static void sse_record(ev_ctx *c, const ha_sse_event *ev)
{
    unsigned flags = 0;
    int64_t *r = rec_add(c, HA_REC_SSE_EVENT, -1, -1);
    if (!r)
        return;
    r[3] = ev->has_id;
    text_bytes(c, ev->name, ev->name_len, r + 4, &flags);
    text_bytes(c, ev->id, ev->id_len, r + 6, &flags);
    raw_span(c, 0, c->len, r);
    if (flags)
        warn(c, HA_WARN_REPLACED_UTF8, "event name or id");
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
        int64_t *r = rec_add(c, HA_REC_WARNING, (int64_t)offset, status);
        if (r) {
            r[3] = HA_WARN_BAD_JSON;
            raw_span(c, 0, c->len, r);
        }
        return;
    }
    if (root.kind != HA_JSON_OBJECT) {
        warn(c, HA_WARN_NOT_OBJECT, NULL);
        return;
    }
    c->tape = tape;
    c->key_escapes = (flags & HA_JSON_FLAG_KEY_ESCAPE) != 0;
    /* first: a warning after an end record would read as data after the end */
    if (flags & (HA_JSON_FLAG_BAD_UTF8 | HA_JSON_FLAG_LONE_SURROGATE))
        warn(c, HA_WARN_REPLACED_UTF8, NULL);
    switch (c->st->proto) {
    case HA_PROTO_OPENAI_CHAT:
        chat_event(c, root);
        break;
    case HA_PROTO_ANTHROPIC:
        anthropic_event(c, root);
        break;
    case HA_PROTO_OPENAI_RESPONSES:
        responses_event(c, root);
        break;
    case HA_PROTO_SSE:
        break;
    }
}

static void extract(ev_ctx *c, ha_sse_status status, const ha_sse_event *ev)
{
    int64_t *r;
    unsigned flags = 0;
    switch (status) {
    case HA_SSE_EVENT:
        if (c->st->proto == HA_PROTO_SSE)
            sse_record(c, ev);
        else if (c->st->proto == HA_PROTO_OPENAI_CHAT && c->len == 6 && memcmp(c->doc, "[DONE]", 6) == 0)
            rec_add(c, HA_REC_END, -1, -1);
        else
            json_event(c);
        break;
    case HA_SSE_UNKNOWN_FIELD:
        if ((r = rec_add(c, HA_REC_UNKNOWN_FIELD, (int64_t)ev->size, -1))) {
            text_bytes(c, ev->name, ev->name_len, r + 4, &flags);
            raw_put(c, ev->data, ev->data_len, r + 10);
            if (flags)
                warn(c, HA_WARN_REPLACED_UTF8, "field name");
        }
        break;
    case HA_SSE_ERR_EVENT_TOO_LARGE:
    case HA_SSE_ERR_NAME_TOO_LONG:
    case HA_SSE_ERR_ID_TOO_LONG:
        if ((r = rec_add(c, HA_REC_FRAMING_ERROR, (int64_t)ev->size, -1)))
            r[3] = status;
        break;
    case HA_SSE_NEED_INPUT:
        break;
    }
}

/* Extract the pending event. 0 when the area is too full to take it. */
static int deliver(ha_stream *st)
{
    ev_ctx c;
    const ha_sse_event *ev = &st->ev;
    ctx_begin(&c, st, ev->data, ev->data_len);
    extract(&c, st->pending_status, ev);
    if (c.full) {
        ctx_rollback(&c);
        if (!ctx_started_empty(&c))
            return 0;
        /* cannot fit even alone: say so instead of looping */
        ctx_begin(&c, st, ev->data, ev->data_len);
        int64_t *r = rec_add(&c, HA_REC_FRAMING_ERROR, (int64_t)ev->data_len, -1);
        if (r)
            r[3] = HA_ERR_OUTPUT_TOO_LARGE;
    } else if (c.meta_set) {
        meta_commit(&c);
    }
    if (st->pending_status == HA_SSE_EVENT)
        st->events++;
    st->pending = 0;
    return 1;
}

static void begin_call(ha_stream *st)
{
    st->n_recs = 0;
    st->text_len = 0;
    st->text_chars = 0;
    st->raw_len = 0;
    st->events = 0;
    st->co_rec = -1;
}

static size_t end_call(ha_stream *st, size_t consumed, int full)
{
    st->recs[HA_HDR_EVENTS] = (int64_t)st->events;
    st->recs[HA_HDR_TEXT] = (int64_t)st->text_len;
    st->recs[HA_HDR_CONSUMED] = (int64_t)consumed;
    st->recs[HA_HDR_FULL] = full;
    return st->n_recs;
}

size_t ha_stream_feed(ha_stream *st, const uint8_t *in, size_t len)
{
    size_t pos = 0;
    begin_call(st);
    if (st->pending && !deliver(st))
        return end_call(st, 0, 1);
    for (;;) {
        ha_sse_status status = ha_sse_next(&st->sse, in, len, &pos, &st->ev);
        if (status == HA_SSE_NEED_INPUT)
            return end_call(st, pos, 0);
        st->pending = 1;
        st->pending_status = status;
        if (!deliver(st))
            return end_call(st, pos, 1);
    }
}

size_t ha_stream_close(ha_stream *st)
{
    size_t pending = 0;
    begin_call(st);
    if (st->pending)
        deliver(st); /* an empty area always takes it, or reports why not */
    unsigned flags = ha_sse_finish(&st->sse, &pending);
    if (flags) {
        ev_ctx c;
        ctx_begin(&c, st, NULL, 0);
        int64_t *r = rec_add(&c, HA_REC_TAIL, (int64_t)pending, -1);
        if (r)
            r[3] = flags;
    }
    return end_call(st, 0, 0);
}

/* The record machinery (record.h): one event's output as a transaction,
 * the text and raw areas, the checks that write warnings, the records the
 * protocols share, and the member tables every extractor reads through.
 */
#include "record.h"

const ha_json_val ev_absent = {0, 0, HA_JSON_ABSENT, HA_JSON_NO_TAPE};

/* ---- the transaction ---- */

static int64_t *rec_at(ha_stream *st, size_t i)
{
    return st->recs + HA_REC_HEADER + i * HA_REC_WORDS;
}

void ev_begin(ev_ctx *c, ha_stream *st, const uint8_t *doc, size_t len)
{
    memset(c, 0, sizeof *c);
    c->st = st;
    c->doc = doc;
    c->len = len;
    c->raw_base = -1;
    c->saved = st->out;
    c->co_s1_end = st->out.co_rec >= 0 ? rec_at(st, (size_t)st->out.co_rec)[HA_WORD_S1_END] : 0;
}

void ev_rollback(ev_ctx *c)
{
    ha_stream *st = c->st;
    st->out = c->saved;
    if (c->saved.co_rec >= 0)
        rec_at(st, (size_t)c->saved.co_rec)[HA_WORD_S1_END] = c->co_s1_end;
}

int ev_started_empty(const ev_ctx *c)
{
    return c->saved.n_recs == 0 && c->saved.text_len == 0 && c->saved.raw_len == 0;
}

/* A new record with every span absent; NULL (and c->full) when out of room. */
int64_t *ev_rec(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub)
{
    ha_stream *st = c->st;
    if (c->full)
        return NULL;
    if (HA_REC_HEADER + (st->out.n_recs + 1) * HA_REC_WORDS > st->rec_words) {
        c->full = 1;
        return NULL;
    }
    int64_t *r = rec_at(st, st->out.n_recs++);
    r[HA_WORD_KIND] = kind;
    r[HA_WORD_INDEX] = index;
    r[HA_WORD_SUB] = sub;
    r[HA_WORD_CODE] = 0;
    for (int k = HA_WORD_S1; k < HA_REC_WORDS; k++)
        r[k] = -1;
    st->out.co_rec = -1;
    return r;
}

/* ---- spans ---- */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* A string body of a document without invalid UTF-8 (the parser checked)
 * decodes to its own bytes unless it holds an escape: copy it a word at a
 * time; 0 at the first backslash. */
static int copy_plain(uint8_t *out, const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; n - i >= sizeof(uint64_t); i += sizeof(uint64_t)) {
        uint64_t w = load64(p + i), x = w ^ (ONES * '\\');
        if ((x - ONES) & ~x & HIGHS) /* a zero byte: a backslash */
            return 0;
        memcpy(out + i, &w, sizeof w);
    }
    for (; i < n; i++) {
        if (p[i] == '\\')
            return 0;
        out[i] = p[i];
    }
    return 1;
}

/* Commit n bytes just written at the end of the text area; span gets their
 * code-point offsets. */
static void text_commit(ha_stream *st, size_t n, int64_t *span)
{
    size_t chars = ha_utf8_count(st->text + st->out.text_len, n);
    span[0] = (int64_t)st->out.text_chars;
    st->out.text_len += n;
    st->out.text_chars += chars;
    span[1] = (int64_t)st->out.text_chars;
}

int ev_text(ev_ctx *c, ha_json_val v, int64_t *span)
{
    ha_stream *st = c->st;
    size_t room = st->text_cap - st->out.text_len, n = 0;
    unsigned flags = 0;
    if (c->full || !span)
        return 0;
    if (ha_json_str_max(v) > room) {
        c->full = 1;
        return 0;
    }
    if (c->utf8_ok && v.kind == HA_JSON_STRING &&
        copy_plain(st->text + st->out.text_len, c->doc + v.start + 1, v.end - v.start - 2)) {
        text_commit(st, v.end - v.start - 2, span);
        return 1;
    }
    if ((c->utf8_ok ? ha_json_str_decode_valid : ha_json_str_decode)(
            c->doc, v, st->text + st->out.text_len, room, &n, &flags) != HA_JSON_OK) {
        c->full = 1;
        return 0;
    }
    text_commit(st, n, span);
    return 1;
}

int ev_text_bytes(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span, unsigned *flags)
{
    ha_stream *st = c->st;
    if (c->full || !span)
        return 0;
    if (3 * n > st->text_cap - st->out.text_len) {
        c->full = 1;
        return 0;
    }
    text_commit(st, ha_utf8_sanitize(p, n, st->text + st->out.text_len, flags), span);
    return 1;
}

int ev_text_lit(ev_ctx *c, const char *s, int64_t *span)
{
    unsigned flags = 0;
    return ev_text_bytes(c, (const uint8_t *)s, strlen(s), span, &flags);
}

int ev_raw_put(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span)
{
    ha_stream *st = c->st;
    if (c->full || !span)
        return 0;
    if (n > st->raw_cap - st->out.raw_len) {
        c->full = 1;
        return 0;
    }
    memcpy(st->raw + st->out.raw_len, p, n);
    span[0] = (int64_t)st->out.raw_len;
    st->out.raw_len += n;
    span[1] = (int64_t)st->out.raw_len;
    return 1;
}

/* A part of the event data as raw bytes: the data is copied once per event
 * and every raw span of the event points into that copy. */
void ev_raw_span(ev_ctx *c, size_t start, size_t end, int64_t *r)
{
    if (!r)
        return;
    if (c->raw_base < 0) {
        int64_t whole[2];
        if (!ev_raw_put(c, c->doc, c->len, whole))
            return;
        c->raw_base = (long)whole[0];
    }
    r[HA_WORD_RAW] = c->raw_base + (int64_t)start;
    r[HA_WORD_RAW_END] = c->raw_base + (int64_t)end;
}

void ev_raw_val(ev_ctx *c, ha_json_val v, int64_t *r)
{
    ev_raw_span(c, v.start, v.end, r);
}

/* ---- checks ---- */

void ev_warn(ev_ctx *c, ha_warning code, const char *detail)
{
    int64_t *r = ev_rec(c, HA_REC_WARNING, -1, -1);
    if (!r)
        return;
    r[HA_WORD_CODE] = code;
    if (detail)
        ev_text_lit(c, detail, r + HA_WORD_S1);
    ev_raw_span(c, 0, c->len, r);
}

int ev_is_kind(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path)
{
    if (v.kind == want)
        return 1;
    if (v.kind != HA_JSON_ABSENT && v.kind != HA_JSON_NULL)
        ev_warn(c, HA_WARN_FIELD_TYPE, path);
    return 0;
}

int ev_required(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path)
{
    if (v.kind == HA_JSON_ABSENT || v.kind == HA_JSON_NULL) {
        ev_warn(c, HA_WARN_MISSING_FIELD, path);
        return 0;
    }
    return ev_is_kind(c, v, want, path);
}

int ev_present(ev_ctx *c, ha_json_val v, const char *path)
{
    if (v.kind != HA_JSON_ABSENT && v.kind != HA_JSON_NULL)
        return 1;
    ev_warn(c, HA_WARN_MISSING_FIELD, path);
    return 0;
}

void ev_warn_type(ev_ctx *c, ha_warning code, ha_json_val type)
{
    int64_t *r = ev_rec(c, HA_REC_WARNING, -1, -1);
    if (!r)
        return;
    r[HA_WORD_CODE] = code;
    ev_text(c, type, r + HA_WORD_S1);
    ev_raw_span(c, 0, c->len, r);
}

int64_t ev_int(ev_ctx *c, ha_json_val v, const char *path)
{
    int64_t out = -1;
    if (v.kind == HA_JSON_ABSENT || v.kind == HA_JSON_NULL)
        return -1;
    if (v.kind != HA_JSON_NUMBER || ha_json_get_i64(c->doc, v, &out) != HA_JSON_OK || out < 0) {
        ev_warn(c, HA_WARN_FIELD_TYPE, path);
        return -1;
    }
    return out;
}

/* ---- records shared by the protocols ---- */

/* A piece extends the previous record when that is a delta of the same
 * kind, index, sub and item id whose text ends where this one starts. */
/* A string the framer elided: in an event it elided strings of, the raw
 * content HA_SSE_ELIDED (a provider's own "\u0000" there reads the same). */
static int ev_elided(const ev_ctx *c, ha_json_val v)
{
    return c->elided && v.kind == HA_JSON_STRING && v.end - v.start == HA_SSE_ELIDED_LEN + 2 &&
           memcmp(c->doc + v.start + 1, HA_SSE_ELIDED, HA_SSE_ELIDED_LEN) == 0;
}

void ev_delta(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub,
              ha_json_val piece, ha_json_val item_id, const char *path)
{
    ha_stream *st = c->st;
    if (ev_elided(c, piece)) {
        ev_warn(c, HA_WARN_DELTA_ELIDED, path); /* this piece is lost */
        return;
    }
    if (!ev_is_kind(c, piece, HA_JSON_STRING, path) || piece.end - piece.start == 2 || c->full)
        return;
    size_t start = st->out.text_len, start_chars = st->out.text_chars;
    int64_t id_span[2] = {-1, -1};
    int has_id = item_id.kind == HA_JSON_STRING;
    if (has_id && !ev_text(c, item_id, id_span))
        return;
    size_t id_end = st->out.text_len;
    if (st->out.co_rec >= 0 && st->out.co_end == start) {
        int64_t *p = rec_at(st, (size_t)st->out.co_rec);
        if (p[HA_WORD_KIND] == kind && p[HA_WORD_INDEX] == index && p[HA_WORD_SUB] == sub &&
            st->out.co_has_id == has_id &&
            (!has_id || (st->out.co_id_end - st->out.co_id_start == id_end - start &&
                         memcmp(st->text + st->out.co_id_start, st->text + start, id_end - start) == 0))) {
            int64_t piece_span[2];
            st->out.text_len = start; /* the id is already there */
            st->out.text_chars = start_chars;
            if (!ev_text(c, piece, piece_span))
                return;
            p[HA_WORD_S1_END] = piece_span[1];
            st->out.co_end = st->out.text_len;
            return;
        }
    }
    int64_t *r = ev_rec(c, kind, index, sub);
    if (!r || !ev_text(c, piece, r + HA_WORD_S1))
        return;
    r[HA_WORD_S2] = id_span[0];
    r[HA_WORD_S2_END] = id_span[1];
    st->out.co_rec = (long)st->out.n_recs - 1;
    st->out.co_end = st->out.text_len;
    st->out.co_id_start = start;
    st->out.co_id_end = id_end;
    st->out.co_has_id = has_id;
}

int ev_elided_within(ev_ctx *c, ha_json_val v, const char *path)
{
    static const char marker[] = "\"" HA_SSE_ELIDED "\"";
    size_t n = v.end - v.start, m = sizeof marker - 1;
    const uint8_t *p = c->doc + v.start, *q;
    if (!c->elided)
        return 0;
    /* an elided string reads "\u0000" quoted, never so inside another */
    for (size_t i = 0; i + m <= n && (q = memchr(p + i, '"', n - i - m + 1)) != NULL;
         i = (size_t)(q - p) + 1) {
        if (memcmp(q, marker, m) == 0) {
            ev_warn(c, HA_WARN_DELTA_ELIDED, path);
            return 1;
        }
    }
    return 0;
}

int ev_has_members(const ev_ctx *c, ha_json_val obj)
{
    ha_json_iter it;
    ha_json_val k, v;
    ev_iter(c, &it, obj);
    return ha_json_obj_next(&it, &k, &v);
}

void ev_text_opt(ev_ctx *c, ha_json_val v, int64_t *span, const char *path)
{
    if (ev_elided(c, v))
        ev_warn(c, HA_WARN_ELIDED, path); /* absent: the deltas carried it */
    else if (ev_is_kind(c, v, HA_JSON_STRING, path))
        ev_text(c, v, span);
}

void ev_meta(ev_ctx *c, ha_json_val id, ha_json_val model)
{
    ha_stream *st = c->st;
    int has_id = ev_is_kind(c, id, HA_JSON_STRING, "id");
    int has_model = ev_is_kind(c, model, HA_JSON_STRING, "model");
    if (!has_id && !has_model)
        return;
    size_t id_len = has_id ? id.end - id.start : 0;
    size_t model_len = has_model ? model.end - model.start : 0;
    /* compare the raw string bytes, quotes included: escapes decode the same */
    if (id_len == st->meta_id_len && model_len == st->meta_model_len &&
        memcmp(st->meta_id, c->doc + id.start, id_len) == 0 &&
        memcmp(st->meta_model, c->doc + model.start, model_len) == 0)
        return;
    int64_t *r = ev_rec(c, HA_REC_META, -1, -1);
    if (!r)
        return;
    if (has_id)
        ev_text(c, id, r + HA_WORD_S1);
    if (has_model)
        ev_text(c, model, r + HA_WORD_S2);
    if (id_len <= HA_META_MAX && model_len <= HA_META_MAX) {
        c->meta_set = 1;
        c->meta_id = has_id ? id : ev_absent;
        c->meta_model = has_model ? model : ev_absent;
    }
}

void ev_meta_commit(ev_ctx *c)
{
    ha_stream *st = c->st;
    st->meta_id_len = c->meta_id.end - c->meta_id.start;
    memcpy(st->meta_id, c->doc + c->meta_id.start, st->meta_id_len);
    st->meta_model_len = c->meta_model.end - c->meta_model.start;
    memcpy(st->meta_model, c->doc + c->meta_model.start, st->meta_model_len);
}

void ev_iter(const ev_ctx *c, ha_json_iter *it, ha_json_val container)
{
    ha_json_iter_start(it, c->doc, container, c->tape);
}

void ev_error(ev_ctx *c, ha_json_val err)
{
    int64_t *r = ev_rec(c, HA_REC_ERROR, -1, -1);
    if (!r)
        return;
    ev_raw_val(c, err, r);
    if (err.kind == HA_JSON_STRING) {
        ev_text(c, err, r + HA_WORD_S2);
        return;
    }
    if (err.kind != HA_JSON_OBJECT)
        return;
    ha_json_val type, code, message;
    MEMBERS(err, MEMBER("type", type), MEMBER("code", code), MEMBER("message", message));
    /* a flat Responses error event is {"type": "error", "code": ...}: there
       the type says only that it is an error, the code says which */
    if (type.kind == HA_JSON_STRING && !(IS(type, "error") && code.kind != HA_JSON_ABSENT &&
                                         code.kind != HA_JSON_NULL))
        ev_text(c, type, r + HA_WORD_S1);
    else if (code.kind == HA_JSON_STRING)
        ev_text(c, code, r + HA_WORD_S1);
    else if (code.kind == HA_JSON_NUMBER) /* e.g. llama.cpp's HTTP-like codes */
        ev_text_bytes(c, c->doc + code.start, code.end - code.start, r + HA_WORD_S1, &(unsigned){0});
    if (message.kind == HA_JSON_STRING)
        ev_text(c, message, r + HA_WORD_S2);
}

int64_t *ev_usage(ev_ctx *c, ha_json_val u, const ev_usage_key *keys, size_t n_keys)
{
    int64_t *r = ev_rec(c, HA_REC_USAGE, -1, -1);
    if (r)
        ev_usage_words(c, r, u, keys, n_keys);
    return r;
}

void ev_usage_words(ev_ctx *c, int64_t *r, ha_json_val u, const ev_usage_key *keys,
                    size_t n_keys)
{
    ha_json_val k, v;
    ha_json_iter it;
    /* member by member, not a member table: each count of a duplicate is
       checked, and one that is not a count keeps the count before it */
    ev_iter(c, &it, u);
    while (ha_json_obj_next(&it, &k, &v))
        for (size_t i = 0; i < n_keys; i++)
            if (ev_key_is(c, k, keys[i].name, keys[i].len)) {
                int64_t n = ev_int(c, v, keys[i].name);
                if (n >= 0)
                    r[keys[i].word] = n;
            }
}

void ev_usage_detail(ev_ctx *c, int64_t *r, ha_json_val u, const char *obj,
                     const char *member, ha_usage_word word)
{
    ha_json_val d, count;
    MEMBERS(u, {obj, strlen(obj), &d});
    if (!r || !ev_is_kind(c, d, HA_JSON_OBJECT, obj))
        return;
    MEMBERS(d, {member, strlen(member), &count});
    int64_t n = ev_int(c, count, member);
    if (n >= 0)
        r[word] = n;
}

void ev_piece(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub, ha_json_val v,
              ha_json_val item_id, const char *path)
{
    if (ev_required(c, v, HA_JSON_STRING, path))
        ev_delta(c, kind, index, sub, v, item_id, path);
}

/* Member k: v to the table entry of its name (ev_key_is, the key's bytes
 * read once for the whole table). */
static inline void member_match(const ev_ctx *c, const ev_member *table, size_t n,
                                int escapes, ha_json_val k, ha_json_val v)
{
    const uint8_t *raw = c->doc + k.start + 1;
    size_t len = k.end - k.start - 2;
    for (size_t i = 0; i < n; i++) {
        size_t want = table[i].len;
        if (want == len ? len == 0 || (raw[0] == (uint8_t)table[i].name[0] &&
                                       memcmp(raw, table[i].name, len) == 0)
                        : len > want && escapes && ev_key_is(c, k, table[i].name, want)) {
            *table[i].value = v; /* keep going: the last duplicate wins */
            return;
        }
    }
}

void ev_members(const ev_ctx *c, ha_json_val obj, const ev_member *table, size_t n)
{
    ha_json_iter it;
    ha_json_val k, v;
    int escapes = c->key_escapes;
    for (size_t i = 0; i < n; i++)
        *table[i].value = ev_absent;
    if (obj.kind != HA_JSON_OBJECT)
        return;
    ev_iter(c, &it, obj);
    if (it.tape) {
        /* inline steps on locals no call sees: they stay in registers */
        ha_json_iter on_tape = it;
        ha_json_val tk, tv;
        while (ha_json_obj_next_fast(&on_tape, &tk, &tv))
            member_match(c, table, n, escapes, tk, tv);
        return;
    }
    while (ha_json_obj_next(&it, &k, &v))
        member_match(c, table, n, escapes, k, v);
}

/* The record machinery shared by the protocol extractors (internal to the
 * stream core; extract.h is the public contract).
 *
 * One event's output is a transaction (ev_ctx): its records, text and raw
 * bytes are committed together, or rolled back when the output area cannot
 * take them. An extractor reads an object's members through one idiom, a
 * member table filled in one pass (MEMBERS), and writes records with
 * ev_rec() and the span writers below; the checks (ev_is_kind, ev_required,
 * ...) write the warnings. Every writer is a no-op once the area is full.
 *
 * A protocol is one file: <protocol>.c defines its ev_<protocol>_event(),
 * called by the dispatch in extract.c.
 */
#ifndef HA_RECORD_H
#define HA_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "extract.h"

typedef struct {
    ha_stream *st;
    const uint8_t *doc; /* the event data */
    size_t len;
    const ha_json_tape *tape; /* of the event's JSON, once parsed */
    int key_escapes;    /* some key of the event's JSON holds an escape */
    int utf8_ok;        /* no string of the event's JSON holds invalid UTF-8 */
    int full;           /* something did not fit: roll back */
    int elided;         /* the framer elided long strings (sse.h) */
    long raw_base;      /* where the event data was copied to raw, or -1 */
    /* META to remember on commit */
    int meta_set;
    ha_json_val meta_id, meta_model;
    /* state to restore on rollback */
    ha_stream_out saved;
    int64_t co_s1_end;   /* the end of the record a piece may extend */
} ev_ctx;

extern const ha_json_val ev_absent;

/* ---- the transaction ---- */

void ev_begin(ev_ctx *c, ha_stream *st, const uint8_t *doc, size_t len);
void ev_rollback(ev_ctx *c);
/* Whether the call's output area was empty when this event began. */
int ev_started_empty(const ev_ctx *c);
/* Remember the META this event emitted, once it is committed. */
void ev_meta_commit(ev_ctx *c);

/* A new record with every span absent; NULL (and c->full) when out of room. */
int64_t *ev_rec(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub);

/* ---- spans: span points at a record's start word (e.g. r + HA_WORD_S1) ---- */

/* A JSON string value, decoded into the text area. */
int ev_text(ev_ctx *c, ha_json_val v, int64_t *span);
/* Raw bytes (SSE names, ids, field names) into the text area, made valid. */
int ev_text_bytes(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span, unsigned *flags);
int ev_text_lit(ev_ctx *c, const char *s, int64_t *span);
/* A string member that may be absent: a wrong kind warns FIELD_TYPE. */
void ev_text_opt(ev_ctx *c, ha_json_val v, int64_t *span, const char *path);
/* Bytes from outside the event data into the raw area. */
int ev_raw_put(ev_ctx *c, const uint8_t *p, size_t n, int64_t *span);
/* Bytes [start, end) of the event data as record r's raw span. */
void ev_raw_span(ev_ctx *c, size_t start, size_t end, int64_t *r);
void ev_raw_val(ev_ctx *c, ha_json_val v, int64_t *r);

/* ---- checks: 1 when v is usable, else 0 with the warning written ---- */

void ev_warn(ev_ctx *c, ha_warning code, const char *detail);
/* A type we do not know: the warning names it. */
void ev_warn_type(ev_ctx *c, ha_warning code, ha_json_val type);
/* Of kind want, or absent / null (0, no warning), or FIELD_TYPE. */
int ev_is_kind(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path);
/* A member the event type needs: absent or null warns MISSING_FIELD, another
 * kind FIELD_TYPE. */
int ev_required(ev_ctx *c, ha_json_val v, ha_json_kind want, const char *path);
/* A member the event type needs, of any kind: absent or null warns. */
int ev_present(ev_ctx *c, ha_json_val v, const char *path);
/* An integer member: the value, or -1 when absent, null or of a wrong type
 * (which warns). */
int64_t ev_int(ev_ctx *c, ha_json_val v, const char *path);

/* ---- records shared by the protocols ---- */

/* A delta piece (text, reasoning, refusal, tool arguments), merged into the
 * previous record when that continues the same delta. An empty piece adds
 * nothing; a piece of a wrong kind warns. */
void ev_delta(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub,
              ha_json_val piece, ha_json_val item_id, const char *path);
/* A delta's piece that the event type needs: required, then ev_delta. */
void ev_piece(ev_ctx *c, ha_rec_kind kind, int64_t index, int64_t sub, ha_json_val v,
              ha_json_val item_id, const char *path);
/* A value given whole (arguments as an object, an input) in an event whose
 * long strings the framer elided: 1 when a string of v was elided, so v is
 * not what was sent, with DELTA_ELIDED naming path; else 0. */
int ev_elided_within(ev_ctx *c, ha_json_val v, const char *path);
/* Whether obj, an object, has a member. */
int ev_has_members(const ev_ctx *c, ha_json_val obj);
/* META when the response id or model differs from the last one emitted. */
void ev_meta(ev_ctx *c, ha_json_val id, ha_json_val model);
/* An error object: {type|code, message}, or a bare string message. */
void ev_error(ev_ctx *c, ha_json_val err);

/* Usage counts: each member named in keys goes to its HA_USAGE_* word. */
typedef struct {
    const char *name;
    size_t len;
    int word; /* ha_usage_word, or ha_timing_word */
} ev_usage_key;
#define USAGE_KEY(lit, word) {(lit), sizeof(lit) - 1, (word)}
int64_t *ev_usage(ev_ctx *c, ha_json_val u, const ev_usage_key *keys, size_t n_keys);
/* The same counts into record r's words (a TIMINGS record, say). */
void ev_usage_words(ev_ctx *c, int64_t *r, ha_json_val u, const ev_usage_key *keys,
                    size_t n_keys);
/* A count in a nested detail object, e.g. prompt_tokens_details.cached_tokens. */
void ev_usage_detail(ev_ctx *c, int64_t *r, ha_json_val u, const char *obj,
                     const char *member, ha_usage_word word);

/* ---- reading the event's JSON ---- */

void ev_iter(const ev_ctx *c, ha_json_iter *it, ha_json_val container);

/* Whether string span s decodes to lit. Its raw bytes decide at once in all
 * but one case: raw longer than lit can still decode to lit through escapes.
 * For keys the parser tells whether any key of the event has an escape. */
static inline int ev_str_is(const ev_ctx *c, ha_json_val s, const char *lit, size_t n,
                            int may_escape)
{
    size_t raw = s.end - s.start - 2;
    if (raw == n) /* the first byte tells most names of a length apart */
        return n == 0 || (c->doc[s.start + 1] == (uint8_t)lit[0] &&
                          memcmp(c->doc + s.start + 1, lit, n) == 0);
    return raw > n && may_escape && ha_json_key_eq(c->doc, s, (const uint8_t *)lit, n);
}

static inline int ev_key_is(const ev_ctx *c, ha_json_val key, const char *name, size_t n)
{
    return ev_str_is(c, key, name, n, c->key_escapes);
}

/* A string value compared with a literal (a type name, say). */
#define IS(v, lit) ev_str_is(c, (v), (lit), sizeof(lit) - 1, 1)

/* The lookup idiom: the members an extraction needs, as a table of names
 * and where each value goes. */
typedef struct {
    const char *name;
    size_t len;
    ha_json_val *value;
} ev_member;
#define MEMBER(lit, var) {(lit), sizeof(lit) - 1, &(var)}

/* Fill a member table in one pass over obj: each value gets the last member
 * of its name (as ha_json_obj_get), or ev_absent; all are absent when obj is
 * not an object. */
void ev_members(const ev_ctx *c, ha_json_val obj, const ev_member *table, size_t n);
#define MEMBERS(obj, ...)                                                     \
    do {                                                                      \
        const ev_member table_[] = {__VA_ARGS__};                             \
        ev_members(c, (obj), table_, sizeof table_ / sizeof table_[0]);       \
    } while (0)

/* ---- the protocols ---- */

void ev_openai_chat_event(ev_ctx *c, ha_json_val root);
void ev_anthropic_event(ev_ctx *c, ha_json_val root);
void ev_openai_responses_event(ev_ctx *c, ha_json_val root);
void ev_ollama_event(ev_ctx *c, ha_json_val root);

#endif

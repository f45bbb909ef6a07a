/* Anthropic Messages: typed events (message_start, content_block_start /
 * delta / stop, message_delta, message_stop, ping, error), each content
 * block addressed by its index. */
#include "record.h"

static const ev_usage_key anthropic_usage[] = {
    USAGE_KEY("input_tokens", HA_USAGE_INPUT),
    USAGE_KEY("output_tokens", HA_USAGE_OUTPUT),
    USAGE_KEY("cache_read_input_tokens", HA_USAGE_CACHE_READ),
    USAGE_KEY("cache_creation_input_tokens", HA_USAGE_CACHE_WRITE),
};

static void anthropic_usage_of(ev_ctx *c, ha_json_val u)
{
    if (ev_is_kind(c, u, HA_JSON_OBJECT, "usage"))
        ev_usage(c, u, anthropic_usage, sizeof anthropic_usage / sizeof *anthropic_usage);
}

/* A thinking block's signature is opaque and whole in each delta (a later
 * one replaces it): never merged with a neighbour. */
static void signature(ev_ctx *c, int64_t index, ha_json_val v, const char *path)
{
    int64_t *r;
    if (ev_is_kind(c, v, HA_JSON_STRING, path) && v.end - v.start > 2 &&
        (r = ev_rec(c, HA_REC_SIGNATURE, index, -1)))
        ev_text(c, v, r + HA_WORD_S1);
}

/* A tool_use block's input: {} when input_json_delta pieces carry it (the
 * API's streaming form), but a server may give it whole here. Anything but
 * an empty object (or no input) is kept as raw bytes, exactly as sent; an
 * input the framer elided strings of is lost, and DELTA_ELIDED says so. */
static void tool_input(ev_ctx *c, ha_json_val input, int64_t *r)
{
    if (input.kind == HA_JSON_ABSENT || (input.kind == HA_JSON_OBJECT && !ev_has_members(c, input)))
        return;
    if (!ev_elided_within(c, input, "content_block.input"))
        ev_raw_val(c, input, r);
}

static void anthropic_block_start(ev_ctx *c, int64_t index, ha_json_val block)
{
    ha_json_val type, text, thinking, sig, data, id, name, input;
    MEMBERS(block, MEMBER("type", type), MEMBER("text", text), MEMBER("thinking", thinking),
            MEMBER("signature", sig), MEMBER("data", data), MEMBER("id", id),
            MEMBER("name", name), MEMBER("input", input));
    if (!ev_required(c, type, HA_JSON_STRING, "content_block.type"))
        return;
    int64_t *r;
    if (IS(type, "text")) {
        if (ev_rec(c, HA_REC_BLOCK_START, index, HA_ITEM_TEXT))
            ev_delta(c, HA_REC_TEXT, index, -1, text, ev_absent, "content_block.text");
    } else if (IS(type, "thinking")) {
        if (ev_rec(c, HA_REC_BLOCK_START, index, HA_ITEM_THINKING)) {
            ev_delta(c, HA_REC_REASONING, index, -1, thinking, ev_absent, "content_block.thinking");
            signature(c, index, sig, "content_block.signature");
        }
    } else if (IS(type, "redacted_thinking")) {
        if ((r = ev_rec(c, HA_REC_BLOCK_START, index, HA_ITEM_REDACTED_THINKING)))
            ev_text_opt(c, data, r + HA_WORD_S1, "content_block.data");
    } else if (IS(type, "tool_use") || IS(type, "server_tool_use")) {
        if ((r = ev_rec(c, HA_REC_BLOCK_START, index, HA_ITEM_TOOL_USE))) {
            ev_text_opt(c, id, r + HA_WORD_S1, "content_block.id");
            ev_text_opt(c, name, r + HA_WORD_S2, "content_block.name");
            tool_input(c, input, r);
        }
    } else if ((r = ev_rec(c, HA_REC_BLOCK_START, index, HA_ITEM_OTHER))) {
        r[HA_WORD_CODE] = 1;
        ev_text(c, type, r + HA_WORD_S3);
        ev_raw_val(c, block, r);
    }
}

static void anthropic_block_delta(ev_ctx *c, int64_t index, ha_json_val d)
{
    ha_json_val type, text, partial_json, thinking, sig, cite;
    MEMBERS(d, MEMBER("type", type), MEMBER("text", text), MEMBER("partial_json", partial_json),
            MEMBER("thinking", thinking), MEMBER("signature", sig), MEMBER("citation", cite));
    if (!ev_required(c, type, HA_JSON_STRING, "delta.type"))
        return;
    if (IS(type, "text_delta")) {
        ev_piece(c, HA_REC_TEXT, index, -1, text, ev_absent, "delta.text");
    } else if (IS(type, "input_json_delta")) {
        ev_piece(c, HA_REC_TOOL_ARGS, index, -1, partial_json, ev_absent, "delta.partial_json");
    } else if (IS(type, "thinking_delta")) {
        ev_piece(c, HA_REC_REASONING, index, -1, thinking, ev_absent, "delta.thinking");
    } else if (IS(type, "signature_delta")) {
        if (ev_required(c, sig, HA_JSON_STRING, "delta.signature"))
            signature(c, index, sig, "delta.signature");
    } else if (IS(type, "citations_delta")) {
        int64_t *r;
        if (ev_required(c, cite, HA_JSON_OBJECT, "delta.citation") &&
            (r = ev_rec(c, HA_REC_CITATION, index, -1)))
            ev_raw_val(c, cite, r);
    } else {
        ev_warn_type(c, HA_WARN_UNKNOWN_DELTA, type);
    }
}

void ev_anthropic_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val type, index, message, block, error, d, usage;
    MEMBERS(root, MEMBER("type", type), MEMBER("index", index), MEMBER("delta", d),
            MEMBER("usage", usage), MEMBER("content_block", block), MEMBER("message", message),
            MEMBER("error", error));
    if (!ev_required(c, type, HA_JSON_STRING, "type"))
        return;
    /* an index of a wrong type warns and the block is kept as -1 (ev_int) */
    if (IS(type, "content_block_delta")) {
        if (ev_present(c, index, "index") && ev_required(c, d, HA_JSON_OBJECT, "delta"))
            anthropic_block_delta(c, ev_int(c, index, "index"), d);
    } else if (IS(type, "content_block_start")) {
        if (ev_present(c, index, "index") && ev_required(c, block, HA_JSON_OBJECT, "content_block"))
            anthropic_block_start(c, ev_int(c, index, "index"), block);
    } else if (IS(type, "content_block_stop")) {
        if (ev_present(c, index, "index"))
            ev_rec(c, HA_REC_BLOCK_STOP, ev_int(c, index, "index"), -1);
    } else if (IS(type, "message_start")) {
        if (ev_required(c, message, HA_JSON_OBJECT, "message")) {
            ha_json_val id, model, message_usage;
            MEMBERS(message, MEMBER("id", id), MEMBER("model", model),
                    MEMBER("usage", message_usage));
            ev_meta(c, id, model);
            anthropic_usage_of(c, message_usage);
        }
    } else if (IS(type, "message_delta")) {
        if (ev_required(c, d, HA_JSON_OBJECT, "delta")) {
            ha_json_val reason, stop_sequence;
            int64_t *r;
            MEMBERS(d, MEMBER("stop_reason", reason), MEMBER("stop_sequence", stop_sequence));
            if (ev_is_kind(c, reason, HA_JSON_STRING, "delta.stop_reason") &&
                (r = ev_rec(c, HA_REC_FINISH, -1, HA_FINISH_STOP))) {
                ev_text(c, reason, r + HA_WORD_S1);
                ev_text_opt(c, stop_sequence, r + HA_WORD_S2, "delta.stop_sequence");
            }
        }
        anthropic_usage_of(c, usage);
    } else if (IS(type, "message_stop")) {
        int64_t *r = ev_rec(c, HA_REC_END, -1, -1);
        if (r)
            r[HA_WORD_CODE] = 1;
    } else if (IS(type, "ping")) {
        /* keep-alive: nothing to report */
    } else if (IS(type, "error")) {
        ev_error(c, error.kind == HA_JSON_ABSENT ? root : error);
    } else {
        ev_warn_type(c, HA_WARN_UNKNOWN_EVENT, type);
    }
}

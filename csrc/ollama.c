/* Ollama's native /api/chat: one object per NDJSON line (ndjson.h), the
 * message's pieces in `message`, the last one `done: true` with the reason,
 * token counts and timings; `{"error": "..."}` instead when it fails. */
#include "record.h"

static const ev_usage_key ollama_usage[] = {
    USAGE_KEY("prompt_eval_count", HA_USAGE_INPUT),
    USAGE_KEY("eval_count", HA_USAGE_OUTPUT),
};

static const ev_usage_key ollama_timings[] = {
    USAGE_KEY("total_duration", HA_TIMING_TOTAL),
    USAGE_KEY("load_duration", HA_TIMING_LOAD),
    USAGE_KEY("prompt_eval_duration", HA_TIMING_PROMPT_EVAL),
    USAGE_KEY("eval_duration", HA_TIMING_EVAL),
};

/* A call arrives whole in one line: its head, then its arguments, a JSON
 * object whose bytes as sent are the argument string. Ollama sends no id
 * (newer servers may: kept when they do) and numbers calls in
 * function.index, which some versions omit. */
static void ollama_tool_call(ev_ctx *c, ha_json_val call)
{
    ha_json_val id, fn, index, name, args;
    if (!ev_is_kind(c, call, HA_JSON_OBJECT, "message.tool_calls[]"))
        return;
    MEMBERS(call, MEMBER("id", id), MEMBER("function", fn));
    if (!ev_required(c, fn, HA_JSON_OBJECT, "message.tool_calls[].function"))
        return;
    MEMBERS(fn, MEMBER("index", index), MEMBER("name", name), MEMBER("arguments", args));
    if (id.kind == HA_JSON_STRING && id.end - id.start == 2)
        id = ev_absent;
    int64_t tool = ev_int(c, index, "message.tool_calls[].function.index");
    int64_t *r = ev_rec(c, HA_REC_TOOL_START, 0, tool);
    if (!r)
        return;
    ev_text_opt(c, id, r + HA_WORD_S1, "message.tool_calls[].id");
    if (ev_required(c, name, HA_JSON_STRING, "message.tool_calls[].function.name"))
        ev_text(c, name, r + HA_WORD_S2);
    if (ev_required(c, args, HA_JSON_OBJECT, "message.tool_calls[].function.arguments") &&
        (r = ev_rec(c, HA_REC_TOOL_ARGS, 0, tool)))
        ev_text_bytes(c, c->doc + args.start, args.end - args.start, r + HA_WORD_S1,
                      &(unsigned){0});
}

static void ollama_message(ev_ctx *c, ha_json_val m)
{
    ha_json_val content, thinking, calls;
    MEMBERS(m, MEMBER("content", content), MEMBER("thinking", thinking),
            MEMBER("tool_calls", calls));
    ev_delta(c, HA_REC_REASONING, 0, -1, thinking, ev_absent, "message.thinking");
    ev_delta(c, HA_REC_TEXT, 0, -1, content, ev_absent, "message.content");
    if (ev_is_kind(c, calls, HA_JSON_ARRAY, "message.tool_calls")) {
        ha_json_iter list;
        ha_json_val call;
        ev_iter(c, &list, calls);
        while (ha_json_arr_next(&list, &call))
            ollama_tool_call(c, call);
    }
}

void ev_ollama_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val error, model, message, done, reason;
    MEMBERS(root, MEMBER("error", error), MEMBER("model", model), MEMBER("message", message),
            MEMBER("done", done), MEMBER("done_reason", reason));
    /* as the official client: any error but "", null and false ends it */
    if ((error.kind == HA_JSON_STRING && error.end - error.start > 2) ||
        error.kind == HA_JSON_OBJECT || error.kind == HA_JSON_ARRAY ||
        error.kind == HA_JSON_NUMBER || error.kind == HA_JSON_TRUE) {
        ev_error(c, error);
        return;
    }
    ev_meta(c, ev_absent, model);
    if (ev_required(c, message, HA_JSON_OBJECT, "message"))
        ollama_message(c, message);
    if (done.kind != HA_JSON_TRUE) {
        ev_is_kind(c, done, HA_JSON_FALSE, "done");
        return;
    }
    int64_t *r = ev_rec(c, HA_REC_FINISH, -1, HA_FINISH_STOP);
    if (r)
        ev_text_opt(c, reason, r + HA_WORD_S1, "done_reason");
    ev_usage(c, root, ollama_usage, sizeof ollama_usage / sizeof *ollama_usage);
    r = ev_rec(c, HA_REC_TIMINGS, -1, -1);
    if (r)
        ev_usage_words(c, r, root, ollama_timings, sizeof ollama_timings / sizeof *ollama_timings);
    if ((r = ev_rec(c, HA_REC_END, -1, -1)))
        r[HA_WORD_CODE] = 2;
}

/* OpenAI Chat Completions (and compatible servers: Ollama, llama.cpp, vLLM,
 * DeepSeek, sglang, Azure): one chunk object per event, every choice's delta
 * in it. */
#include "record.h"

/* Some compatible servers send the arguments as a JSON object, not as the
 * string of one: the object's bytes as sent are the argument string. A
 * string in it that the framer elided (an event over the buffer) would make
 * them other arguments than the model's: that piece is lost, as any delta. */
static void chat_object_arguments(ev_ctx *c, int64_t choice, int64_t tool, ha_json_val args)
{
    if (ev_elided_within(c, args, "choices[].delta.tool_calls[].function.arguments"))
        return;
    unsigned flags = 0;
    int64_t *r = ev_rec(c, HA_REC_TOOL_ARGS, choice, tool);
    if (r)
        ev_text_bytes(c, c->doc + args.start, args.end - args.start, r + HA_WORD_S1, &flags);
}

static void chat_tool_call(ev_ctx *c, int64_t choice, ha_json_val call)
{
    ha_json_val index, id, type, fn, name, args;
    if (!ev_is_kind(c, call, HA_JSON_OBJECT, "choices[].delta.tool_calls[]"))
        return;
    MEMBERS(call, MEMBER("index", index), MEMBER("id", id), MEMBER("type", type),
            MEMBER("function", fn));
    if (ev_is_kind(c, fn, HA_JSON_OBJECT, "choices[].delta.tool_calls[].function"))
        MEMBERS(fn, MEMBER("name", name), MEMBER("arguments", args));
    else
        name = args = ev_absent;
    /* "" is no id and no name: a later chunk may still bring the real one */
    if (id.kind == HA_JSON_STRING && id.end - id.start == 2)
        id = ev_absent;
    if (name.kind == HA_JSON_STRING && name.end - name.start == 2)
        name = ev_absent;
    int64_t tool = ev_int(c, index, "choices[].delta.tool_calls[].index");
    int has_id = ev_is_kind(c, id, HA_JSON_STRING, "choices[].delta.tool_calls[].id");
    int has_name = ev_is_kind(c, name, HA_JSON_STRING, "choices[].delta.tool_calls[].function.name");
    int has_type = ev_is_kind(c, type, HA_JSON_STRING, "choices[].delta.tool_calls[].type");
    if (has_id || has_name || has_type) {
        int64_t *r = ev_rec(c, HA_REC_TOOL_START, choice, tool);
        if (r) {
            if (has_id)
                ev_text(c, id, r + HA_WORD_S1);
            if (has_name)
                ev_text(c, name, r + HA_WORD_S2);
            if (has_type)
                ev_text(c, type, r + HA_WORD_S3);
        }
    }
    if (args.kind == HA_JSON_OBJECT)
        chat_object_arguments(c, choice, tool, args);
    else
        ev_delta(c, HA_REC_TOOL_ARGS, choice, tool, args, ev_absent,
                 "choices[].delta.tool_calls[].function.arguments");
}

static void chat_choice(ev_ctx *c, ha_json_val choice, int64_t position)
{
    ha_json_val index, d, finish;
    if (!ev_is_kind(c, choice, HA_JSON_OBJECT, "choices[]"))
        return;
    MEMBERS(choice, MEMBER("delta", d), MEMBER("index", index), MEMBER("finish_reason", finish));
    int64_t at = ev_int(c, index, "choices[].index");
    if (at < 0)
        at = position;
    if (ev_is_kind(c, d, HA_JSON_OBJECT, "choices[].delta")) {
        /* members first (a duplicate key: the last wins), records after, in
           the order a reader expects: reasoning, text, refusal, tool calls */
        ha_json_val content, reasoning_content, reasoning, refusal, calls;
        MEMBERS(d, MEMBER("content", content), MEMBER("reasoning_content", reasoning_content),
                MEMBER("reasoning", reasoning), MEMBER("refusal", refusal),
                MEMBER("tool_calls", calls));
        /* DeepSeek and llama.cpp say reasoning_content, vLLM reasoning; a
           gateway may mirror one into the other: take it once */
        if (reasoning_content.kind == HA_JSON_STRING && reasoning_content.end - reasoning_content.start > 2) {
            ev_delta(c, HA_REC_REASONING, at, -1, reasoning_content, ev_absent,
                     "choices[].delta.reasoning_content");
        } else {
            ev_is_kind(c, reasoning_content, HA_JSON_STRING, "choices[].delta.reasoning_content");
            ev_delta(c, HA_REC_REASONING, at, -1, reasoning, ev_absent, "choices[].delta.reasoning");
        }
        ev_delta(c, HA_REC_TEXT, at, -1, content, ev_absent, "choices[].delta.content");
        ev_delta(c, HA_REC_REFUSAL, at, -1, refusal, ev_absent, "choices[].delta.refusal");
        if (ev_is_kind(c, calls, HA_JSON_ARRAY, "choices[].delta.tool_calls")) {
            ha_json_iter list;
            ha_json_val call;
            ev_iter(c, &list, calls);
            while (ha_json_arr_next(&list, &call))
                chat_tool_call(c, at, call);
        }
    }
    /* "" on every chunk (sglang, older Ollama) is not a stop */
    if (ev_is_kind(c, finish, HA_JSON_STRING, "choices[].finish_reason") && finish.end - finish.start > 2) {
        int64_t *r = ev_rec(c, HA_REC_FINISH, at, HA_FINISH_STOP);
        if (r)
            ev_text(c, finish, r + HA_WORD_S1);
    }
}

static const ev_usage_key chat_usage[] = {
    USAGE_KEY("prompt_tokens", HA_USAGE_INPUT),
    USAGE_KEY("completion_tokens", HA_USAGE_OUTPUT),
    USAGE_KEY("total_tokens", HA_USAGE_TOTAL),
    /* DeepSeek's cache hits; its misses are prompt_tokens less these */
    USAGE_KEY("prompt_cache_hit_tokens", HA_USAGE_CACHE_READ),
};

void ev_openai_chat_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val id, model, choices, usage, error;
    MEMBERS(root, MEMBER("choices", choices), MEMBER("id", id), MEMBER("model", model),
            MEMBER("usage", usage), MEMBER("error", error));
    /* an error is an object with members or a message string; false, "",
       {} and null are what some servers send when there is none */
    if ((error.kind == HA_JSON_OBJECT && ev_has_members(c, error)) ||
        (error.kind == HA_JSON_STRING && error.end - error.start > 2)) {
        ev_error(c, error);
        return;
    }
    if (error.kind != HA_JSON_OBJECT && error.kind != HA_JSON_STRING && error.kind != HA_JSON_FALSE)
        ev_is_kind(c, error, HA_JSON_OBJECT, "error");
    /* Azure's prompt-filter chunk has "id": "": not an id */
    if (id.kind == HA_JSON_STRING && id.end - id.start == 2)
        id = ev_absent;
    if (model.kind == HA_JSON_STRING && model.end - model.start == 2)
        model = ev_absent;
    ev_meta(c, id, model);
    if (ev_is_kind(c, choices, HA_JSON_ARRAY, "choices")) {
        ha_json_iter list;
        ha_json_val choice;
        int64_t position = 0;
        ev_iter(c, &list, choices);
        while (ha_json_arr_next(&list, &choice))
            chat_choice(c, choice, position++);
    }
    if (ev_is_kind(c, usage, HA_JSON_OBJECT, "usage")) {
        int64_t *r = ev_usage(c, usage, chat_usage, sizeof chat_usage / sizeof *chat_usage);
        ev_usage_detail(c, r, usage, "prompt_tokens_details", "cached_tokens", HA_USAGE_CACHE_READ);
        ev_usage_detail(c, r, usage, "completion_tokens_details", "reasoning_tokens", HA_USAGE_REASONING);
    }
}

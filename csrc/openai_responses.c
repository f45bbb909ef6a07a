/* OpenAI Responses: typed events (response.*), output items addressed by
 * output_index and their parts by content_index or summary_index. */
#include "record.h"

static const ev_usage_key responses_usage[] = {
    USAGE_KEY("input_tokens", HA_USAGE_INPUT),
    USAGE_KEY("output_tokens", HA_USAGE_OUTPUT),
    USAGE_KEY("total_tokens", HA_USAGE_TOTAL),
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
    if (!ev_required(c, item, HA_JSON_OBJECT, "item"))
        return;
    ha_json_val type, call_id, arguments, name, id;
    MEMBERS(item, MEMBER("type", type), MEMBER("call_id", call_id), MEMBER("arguments", arguments),
            MEMBER("name", name), MEMBER("id", id));
    if (!ev_required(c, type, HA_JSON_STRING, "item.type"))
        return;
    ha_item_kind kind = responses_item_kind(c, type);
    int64_t *r = ev_rec(c, stop ? HA_REC_BLOCK_STOP : HA_REC_BLOCK_START, index, kind);
    if (!r)
        return;
    if (kind == HA_ITEM_TOOL_USE) {
        ev_text_opt(c, call_id, r + HA_WORD_S1, "item.call_id");
        if (stop)
            ev_text_opt(c, arguments, r + HA_WORD_S2, "item.arguments");
        else
            ev_text_opt(c, name, r + HA_WORD_S2, "item.name");
    }
    if (stop) {
        ev_text_opt(c, id, r + HA_WORD_S3, "item.id");
        ev_raw_val(c, item, r);
    } else if (kind == HA_ITEM_OTHER) {
        r[HA_WORD_CODE] = 1;
        ev_text(c, type, r + HA_WORD_S3);
        ev_raw_val(c, item, r);
    } else {
        ev_text_opt(c, id, r + HA_WORD_S3, "item.id");
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
    if (!ev_required(c, response, HA_JSON_OBJECT, "response")) {
        if ((r = ev_rec(c, HA_REC_FINISH, -1, status)))
            ev_text_lit(c, said, r + HA_WORD_S1);
        return;
    }
    ha_json_val id, model, u, err, details, body_status, reason;
    MEMBERS(response, MEMBER("id", id), MEMBER("model", model), MEMBER("usage", u),
            MEMBER("error", err), MEMBER("incomplete_details", details),
            MEMBER("status", body_status));
    ev_meta(c, id, model);
    if (ev_is_kind(c, u, HA_JSON_OBJECT, "response.usage")) {
        int64_t *counts = ev_usage(c, u, responses_usage, sizeof responses_usage / sizeof *responses_usage);
        ev_usage_detail(c, counts, u, "input_tokens_details", "cached_tokens", HA_USAGE_CACHE_READ);
        ev_usage_detail(c, counts, u, "output_tokens_details", "reasoning_tokens", HA_USAGE_REASONING);
    }
    if (ev_is_kind(c, err, HA_JSON_OBJECT, "response.error"))
        ev_error(c, err);
    reason = ev_absent;
    if (ev_is_kind(c, details, HA_JSON_OBJECT, "response.incomplete_details")) {
        MEMBERS(details, MEMBER("reason", reason));
        if (!ev_is_kind(c, reason, HA_JSON_STRING, "response.incomplete_details.reason"))
            reason = ev_absent;
    }
    if (reason.kind != HA_JSON_STRING) {
        reason = body_status;
        if (!ev_is_kind(c, reason, HA_JSON_STRING, "response.status"))
            reason = ev_absent;
    }
    /* last, so that the warnings of this event come before its end */
    if ((r = ev_rec(c, HA_REC_FINISH, -1, status))) {
        if (reason.kind == HA_JSON_STRING)
            ev_text(c, reason, r + HA_WORD_S1);
        else
            ev_text_lit(c, said, r + HA_WORD_S1);
    }
}

void ev_openai_responses_event(ev_ctx *c, ha_json_val root)
{
    ha_json_val type, out, part, summary, item_id, text, item, response, note, error;
    MEMBERS(root, MEMBER("type", type), MEMBER("delta", text), MEMBER("item_id", item_id),
            MEMBER("output_index", out), MEMBER("content_index", part),
            MEMBER("summary_index", summary), MEMBER("item", item), MEMBER("response", response),
            MEMBER("annotation", note), MEMBER("error", error));
    if (!ev_required(c, type, HA_JSON_STRING, "type"))
        return;
    if (item_id.kind != HA_JSON_STRING) {
        ev_is_kind(c, item_id, HA_JSON_STRING, "item_id");
        item_id = ev_absent;
    }
    if (IS(type, "response.output_text.delta")) {
        ev_piece(c, HA_REC_TEXT, ev_int(c, out, "output_index"), ev_int(c, part, "content_index"),
              text, item_id, "delta");
    } else if (IS(type, "response.function_call_arguments.delta")) {
        ev_piece(c, HA_REC_TOOL_ARGS, ev_int(c, out, "output_index"), -1, text, item_id, "delta");
    } else if (IS(type, "response.reasoning_summary_text.delta")) {
        ev_piece(c, HA_REC_REASONING, ev_int(c, out, "output_index"),
              ev_int(c, summary, "summary_index"), text, item_id, "delta");
    } else if (IS(type, "response.reasoning_text.delta")) {
        ev_piece(c, HA_REC_REASONING, ev_int(c, out, "output_index"), -1, text, item_id, "delta");
    } else if (IS(type, "response.refusal.delta")) {
        ev_piece(c, HA_REC_REFUSAL, ev_int(c, out, "output_index"), ev_int(c, part, "content_index"),
              text, item_id, "delta");
    } else if (IS(type, "response.output_item.added")) {
        responses_item(c, ev_int(c, out, "output_index"), item, 0);
    } else if (IS(type, "response.output_item.done")) {
        responses_item(c, ev_int(c, out, "output_index"), item, 1);
    } else if (IS(type, "response.output_text.annotation.added")) {
        int64_t *r;
        if (ev_required(c, note, HA_JSON_OBJECT, "annotation") &&
            (r = ev_rec(c, HA_REC_CITATION, ev_int(c, out, "output_index"), -1)))
            ev_raw_val(c, note, r);
    } else if (IS(type, "response.created") || IS(type, "response.in_progress") ||
               IS(type, "response.queued")) {
        if (ev_required(c, response, HA_JSON_OBJECT, "response")) {
            ha_json_val id, model;
            MEMBERS(response, MEMBER("id", id), MEMBER("model", model));
            ev_meta(c, id, model);
        }
    } else if (IS(type, "response.completed")) {
        responses_final(c, response, HA_FINISH_COMPLETED);
    } else if (IS(type, "response.incomplete")) {
        responses_final(c, response, HA_FINISH_INCOMPLETE);
    } else if (IS(type, "response.failed")) {
        responses_final(c, response, HA_FINISH_FAILED);
    } else if (IS(type, "error")) {
        ev_error(c, error.kind == HA_JSON_OBJECT ? error : root);
    } else if (IS(type, "response.content_part.added") || IS(type, "response.content_part.done") ||
               IS(type, "response.output_text.done") || IS(type, "response.refusal.done") ||
               IS(type, "response.function_call_arguments.done") ||
               IS(type, "response.reasoning_summary_part.added") ||
               IS(type, "response.reasoning_summary_part.done") ||
               IS(type, "response.reasoning_summary_text.done") ||
               IS(type, "response.reasoning_text.done")) {
        /* repeats what the deltas and output_item.done carry */
    } else {
        ev_warn_type(c, HA_WARN_UNKNOWN_EVENT, type);
    }
}


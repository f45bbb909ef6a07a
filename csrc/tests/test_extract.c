/* Contract tests of the batch layer (extract.h): records per protocol,
 * coalescing, the output-full transaction, end-of-stream reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "extract.h"

#define SSE_CAP 4096u

typedef struct {
    ha_stream st;
    uint8_t sse[SSE_CAP];
    int64_t recs[HA_REC_HEADER + 64 * HA_REC_WORDS];
    uint8_t text[3 * SSE_CAP + 4096];
    uint8_t raw[SSE_CAP + 1024];
    size_t n;
} fixture;

static fixture *open_stream(ha_protocol proto, size_t rec_count)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || ha_stream_init(&f->st, proto, f->sse, SSE_CAP, f->recs,
                             HA_REC_HEADER + rec_count * HA_REC_WORDS, f->text,
                             sizeof f->text, f->raw, sizeof f->raw) != 0) {
        fprintf(stderr, "cannot set up a stream\n");
        exit(2);
    }
    return f;
}

static size_t feed(fixture *f, const char *s)
{
    f->n = ha_stream_feed(&f->st, (const uint8_t *)s, strlen(s));
    return f->n;
}

static const int64_t *rec(const fixture *f, size_t i)
{
    return f->recs + HA_REC_HEADER + i * HA_REC_WORDS;
}

/* The text of span word w of record i (code-point offsets) compared with
 * want: walks the text area to turn code points into bytes. */
static int span_is(const fixture *f, size_t i, int w, const char *want)
{
    const int64_t *r = rec(f, i);
    if (r[w] < 0)
        return want == NULL;
    if (!want)
        return 0;
    size_t byte = 0, chars = 0, start = 0;
    size_t limit = (size_t)f->recs[HA_HDR_TEXT];
    while (chars < (size_t)r[w + 1] && byte <= limit) {
        if (chars == (size_t)r[w])
            start = byte;
        byte++;
        while (byte < limit && (f->text[byte] & 0xC0) == 0x80)
            byte++;
        chars++;
    }
    if (r[w] == r[w + 1])
        start = byte;
    return byte - start == strlen(want) && memcmp(f->text + start, want, byte - start) == 0;
}

static int raw_is(const fixture *f, size_t i, const char *want)
{
    const int64_t *r = rec(f, i);
    size_t n = (size_t)(r[HA_WORD_RAW_END] - r[HA_WORD_RAW]);
    return r[HA_WORD_RAW] >= 0 && n == strlen(want) && memcmp(f->raw + r[HA_WORD_RAW], want, n) == 0;
}

static void test_chat_text_and_coalescing(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OPENAI_CHAT, 64);
    feed(f, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u4f60\"}}]}\n\n");
    CHECK(c, f->n == 2);
    CHECK(c, f->recs[HA_HDR_EVENTS] == 3);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_META && span_is(f, 0, HA_WORD_S1, "c1") && span_is(f, 0, HA_WORD_S2, "m"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_TEXT && rec(f, 1)[HA_WORD_INDEX] == 0 && span_is(f, 1, HA_WORD_S1, "Hello \xe4\xbd\xa0"));
    /* same id and model next call: no META; a text piece of another choice
       is a record of its own */
    feed(f, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"a\"}},{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_INDEX] == 1 && rec(f, 1)[HA_WORD_INDEX] == 0 && span_is(f, 1, HA_WORD_S1, "b"));
    free(f);
}

static void test_chat_tools_finish_usage_done(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OPENAI_CHAT, 64);
    feed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"\"}}]}}]}\n\n"
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n"
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"\"}]}\n\n"
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n"
            "data: [DONE]\n\n");
    CHECK(c, f->n == 5);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_TOOL_START && rec(f, 0)[HA_WORD_SUB] == 0 && span_is(f, 0, HA_WORD_S1, "call_1") &&
                 span_is(f, 0, HA_WORD_S2, "get") && span_is(f, 0, HA_WORD_S3, "function"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && span_is(f, 1, HA_WORD_S1, "{\"a\":1}"));
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_FINISH && rec(f, 2)[HA_WORD_INDEX] == 0 && span_is(f, 2, HA_WORD_S1, "tool_calls"));
    CHECK(c, rec(f, 3)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 3)[HA_USAGE_INPUT] == 5 &&
                 rec(f, 3)[HA_USAGE_OUTPUT] == 7 && rec(f, 3)[HA_USAGE_TOTAL] == 12 &&
                 rec(f, 3)[HA_USAGE_CACHE_READ] == 2 && rec(f, 3)[HA_USAGE_REASONING] == -1);
    CHECK(c, rec(f, 4)[HA_WORD_KIND] == HA_REC_END && rec(f, 4)[HA_WORD_CODE] == 0);
    /* a tool call without index (Ollama) keeps sub = -1 */
    feed(f, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":{\"name\":\"n\",\"arguments\":\"{}\"}}]}}]}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_SUB] == -1 && rec(f, 1)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && rec(f, 1)[HA_WORD_SUB] == -1);
    /* arguments sent as an object, not a string: its bytes as sent, escapes and all */
    feed(f, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"n\",\"arguments\":{\"a\": [1, \"\\u00e9\"]}}}]}}]}\n\n");
    CHECK(c, f->n == 2 && rec(f, 1)[HA_WORD_KIND] == HA_REC_TOOL_ARGS &&
                 span_is(f, 1, HA_WORD_S1, "{\"a\": [1, \"\\u00e9\"]}"));
    /* DeepSeek's cache figures: the hits are the cache read */
    feed(f, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":3,\"total_tokens\":53,"
            "\"prompt_cache_hit_tokens\":32,\"prompt_cache_miss_tokens\":18}}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 0)[HA_USAGE_INPUT] == 50 &&
                 rec(f, 0)[HA_USAGE_CACHE_READ] == 32 && rec(f, 0)[HA_USAGE_CACHE_WRITE] == -1);
    free(f);
}

static void test_chat_errors_and_warnings(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OPENAI_CHAT, 64);
    feed(f, "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_ERROR && span_is(f, 0, HA_WORD_S1, "server_error") &&
                 span_is(f, 0, HA_WORD_S2, "overloaded") &&
                 raw_is(f, 0, "{\"message\":\"overloaded\",\"type\":\"server_error\"}"));
    /* falsy errors are no errors */
    feed(f, "data: {\"error\":false,\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
            "data: {\"error\":{ },\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_TEXT && span_is(f, 0, HA_WORD_S1, "xy"));
    /* a duplicate key in a delta: the last wins; reasoning mirrored into
       both field names is taken once; records in reading order */
    feed(f, "data: {\"choices\":[{\"delta\":{\"content\":\"A\",\"reasoning\":\"t\",\"reasoning_content\":\"t\",\"content\":\"B\"}}]}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_KIND] == HA_REC_REASONING && span_is(f, 0, HA_WORD_S1, "t") &&
                 rec(f, 1)[HA_WORD_KIND] == HA_REC_TEXT && span_is(f, 1, HA_WORD_S1, "B"));
    /* an empty tool call id or name is none */
    feed(f, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"\",\"function\":{\"name\":\"\"}}]}}]}\n\n");
    CHECK(c, f->n == 0);
    feed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_WARNING && rec(f, 0)[HA_WORD_CODE] == HA_WARN_FIELD_TYPE &&
                 span_is(f, 0, HA_WORD_S1, "choices[].delta.content"));
    feed(f, "data: {\"choices\":[1,]}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_BAD_JSON && rec(f, 0)[HA_WORD_SUB] == HA_JSON_ERR_SYNTAX &&
                 rec(f, 0)[HA_WORD_INDEX] == 14 && raw_is(f, 0, "{\"choices\":[1,]}"));
    feed(f, "data: [1]\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_NOT_OBJECT);
    feed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xff\"}}]}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_REPLACED_UTF8 && rec(f, 1)[HA_WORD_KIND] == HA_REC_TEXT &&
                 span_is(f, 1, HA_WORD_S1, "a\xef\xbf\xbd"));
    feed(f, "error: {\"message\":\"old llama.cpp\"}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_UNKNOWN_FIELD && span_is(f, 0, HA_WORD_S1, "error") &&
                 raw_is(f, 0, "{\"message\":\"old llama.cpp\"}"));
    free(f);
}

static void test_anthropic(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_ANTHROPIC, 64);
    feed(f, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
            "event: ping\ndata: {\"type\": \"ping\"}\n\n"
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}   \n\n"
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get\",\"input\":{}}}\n\n"
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n"
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n"
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"future_delta\"}}\n\n"
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":65}}\n\n"
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    CHECK(c, f->n == 11);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_META && span_is(f, 0, HA_WORD_S1, "msg_1") && span_is(f, 0, HA_WORD_S2, "claude"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 1)[HA_USAGE_INPUT] == 9);
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_BLOCK_START && rec(f, 2)[HA_WORD_SUB] == HA_ITEM_TEXT);
    CHECK(c, rec(f, 3)[HA_WORD_KIND] == HA_REC_TEXT && span_is(f, 3, HA_WORD_S1, "Hi"));
    CHECK(c, rec(f, 4)[HA_WORD_KIND] == HA_REC_BLOCK_STOP && rec(f, 4)[HA_WORD_INDEX] == 0);
    CHECK(c, rec(f, 5)[HA_WORD_KIND] == HA_REC_BLOCK_START && rec(f, 5)[HA_WORD_SUB] == HA_ITEM_TOOL_USE &&
                 span_is(f, 5, HA_WORD_S1, "toolu_1") && span_is(f, 5, HA_WORD_S2, "get"));
    CHECK(c, rec(f, 6)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && span_is(f, 6, HA_WORD_S1, "{}"));
    CHECK(c, rec(f, 7)[HA_WORD_KIND] == HA_REC_WARNING && rec(f, 7)[HA_WORD_CODE] == HA_WARN_UNKNOWN_DELTA);
    CHECK(c, rec(f, 8)[HA_WORD_KIND] == HA_REC_FINISH && span_is(f, 8, HA_WORD_S1, "tool_use") && span_is(f, 8, HA_WORD_S2, NULL));
    CHECK(c, rec(f, 9)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 9)[HA_USAGE_OUTPUT] == 65);
    CHECK(c, rec(f, 10)[HA_WORD_KIND] == HA_REC_END && rec(f, 10)[HA_WORD_CODE] == 1);
    /* thinking text merges within a read; a signature never does */
    feed(f, "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"a\"}}\n\n"
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"b\"}}\n\n"
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"Sig1\"}}\n\n"
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"Sig2\"}}\n\n");
    CHECK(c, f->n == 4 && rec(f, 0)[HA_WORD_SUB] == HA_ITEM_THINKING && rec(f, 1)[HA_WORD_KIND] == HA_REC_REASONING &&
                 span_is(f, 1, HA_WORD_S1, "ab") && rec(f, 2)[HA_WORD_KIND] == HA_REC_SIGNATURE && span_is(f, 2, HA_WORD_S1, "Sig1") &&
                 rec(f, 3)[HA_WORD_KIND] == HA_REC_SIGNATURE && span_is(f, 3, HA_WORD_S1, "Sig2"));
    feed(f, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_ERROR && span_is(f, 0, HA_WORD_S1, "overloaded_error") &&
                 span_is(f, 0, HA_WORD_S2, "Overloaded"));
    free(f);
}

static void test_responses(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OPENAI_RESPONSES, 64);
    feed(f, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt\"}}\n\n"
            "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_9\",\"name\":\"get\",\"arguments\":\"\"}}\n\n"
            "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{\\\"x\\\"\"}\n\n"
            "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\":2}\"}\n\n"
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_2\",\"output_index\":1,\"content_index\":0,\"delta\":\"ok\"}\n\n"
            "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_9\",\"name\":\"get\",\"arguments\":\"{\\\"x\\\":2}\"}}\n\n"
            "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":4,\"total_tokens\":7,\"output_tokens_details\":{\"reasoning_tokens\":1}}}}\n\n"
            "event: response.new_thing\ndata: {\"type\":\"response.new_thing\"}\n\n");
    CHECK(c, f->n == 8);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_META && span_is(f, 0, HA_WORD_S1, "resp_1"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_BLOCK_START && rec(f, 1)[HA_WORD_SUB] == HA_ITEM_TOOL_USE &&
                 span_is(f, 1, HA_WORD_S1, "call_9") && span_is(f, 1, HA_WORD_S2, "get") && span_is(f, 1, HA_WORD_S3, "fc_1"));
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && span_is(f, 2, HA_WORD_S1, "{\"x\":2}") && span_is(f, 2, HA_WORD_S2, "fc_1"));
    CHECK(c, rec(f, 3)[HA_WORD_KIND] == HA_REC_TEXT && rec(f, 3)[HA_WORD_INDEX] == 1 && rec(f, 3)[HA_WORD_SUB] == 0 &&
                 span_is(f, 3, HA_WORD_S1, "ok") && span_is(f, 3, HA_WORD_S2, "msg_2"));
    CHECK(c, rec(f, 4)[HA_WORD_KIND] == HA_REC_BLOCK_STOP && span_is(f, 4, HA_WORD_S2, "{\"x\":2}") && span_is(f, 4, HA_WORD_S3, "fc_1"));
    CHECK(c, rec(f, 5)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 5)[HA_USAGE_TOTAL] == 7 && rec(f, 5)[HA_USAGE_REASONING] == 1);
    CHECK(c, rec(f, 6)[HA_WORD_KIND] == HA_REC_FINISH && rec(f, 6)[HA_WORD_SUB] == HA_FINISH_INCOMPLETE &&
                 span_is(f, 6, HA_WORD_S1, "max_output_tokens"));
    CHECK(c, rec(f, 7)[HA_WORD_KIND] == HA_REC_WARNING && rec(f, 7)[HA_WORD_CODE] == HA_WARN_UNKNOWN_EVENT);
    free(f);
}

static void test_required_fields_and_type_names(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_ANTHROPIC, 64);
    feed(f, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\"}}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_MISSING_FIELD && span_is(f, 0, HA_WORD_S1, "delta.text"));
    feed(f, "data: {\"type\":\"content_block_start\",\"index\":0,\"message\":null,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_BLOCK_START);
    feed(f, "data: {\"type\":\"content_block_stop\"}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_MISSING_FIELD && span_is(f, 0, HA_WORD_S1, "index"));
    feed(f, "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"new_delta\"}}\n\n"
            "data: {\"type\":\"new_event\"}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_UNKNOWN_DELTA && span_is(f, 0, HA_WORD_S1, "new_delta") &&
                 rec(f, 1)[HA_WORD_CODE] == HA_WARN_UNKNOWN_EVENT && span_is(f, 1, HA_WORD_S1, "new_event"));
    free(f);

    f = open_stream(HA_PROTO_OPENAI_RESPONSES, 64);
    /* the event type says how the response ended, whatever its body */
    feed(f, "data: {\"type\":\"response.completed\",\"response\":42}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_FIELD_TYPE && rec(f, 1)[HA_WORD_KIND] == HA_REC_FINISH &&
                 rec(f, 1)[HA_WORD_SUB] == HA_FINISH_COMPLETED && span_is(f, 1, HA_WORD_S1, "completed"));
    feed(f, "data: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":3}}}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_FIELD_TYPE &&
                 span_is(f, 0, HA_WORD_S1, "response.incomplete_details.reason") &&
                 rec(f, 1)[HA_WORD_KIND] == HA_REC_FINISH && span_is(f, 1, HA_WORD_S1, "incomplete"));
    /* a flat error event: its code is the type */
    feed(f, "data: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"m\"}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_ERROR && span_is(f, 0, HA_WORD_S1, "rate_limit_exceeded") &&
                 span_is(f, 0, HA_WORD_S2, "m"));
    free(f);
}

static void test_output_full_is_a_transaction(check_counts *c)
{
    /* room for two records: the third event's two records must wait whole */
    fixture *f = open_stream(HA_PROTO_OPENAI_CHAT, 2);
    const char *s = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
                    "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}}]}\n\n"
                    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}},{\"index\":1,\"delta\":{\"content\":\"d\"}}]}\n\n"
                    "data: [DONE]\n\n";
    size_t len = strlen(s);
    f->n = ha_stream_feed(&f->st, (const uint8_t *)s, len);
    CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 1 && span_is(f, 0, HA_WORD_S1, "a") && span_is(f, 1, HA_WORD_S1, "b"));
    size_t used = (size_t)f->recs[HA_HDR_CONSUMED];
    f->n = ha_stream_feed(&f->st, (const uint8_t *)s + used, len - used);
    CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 1 && span_is(f, 0, HA_WORD_S1, "c") && span_is(f, 1, HA_WORD_S1, "d"));
    used += (size_t)f->recs[HA_HDR_CONSUMED];
    f->n = ha_stream_feed(&f->st, (const uint8_t *)s + used, len - used);
    CHECK(c, f->n == 1 && f->recs[HA_HDR_FULL] == 0 && rec(f, 0)[HA_WORD_KIND] == HA_REC_END);
    free(f);

    /* an event that cannot fit even alone is reported, not looped on */
    f = open_stream(HA_PROTO_OPENAI_CHAT, 1);
    feed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}},{\"index\":1,\"delta\":{\"content\":\"d\"}}]}\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR && rec(f, 0)[HA_WORD_CODE] == HA_ERR_OUTPUT_TOO_LARGE);
    free(f);
}

static void test_framing_records_and_tail(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_SSE, 64);
    feed(f, "\xef\xbb\xbfid: 7\nevent: note\ndata: x\ndata: y\n\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_SSE_EVENT && rec(f, 0)[HA_WORD_CODE] == 1 &&
                 span_is(f, 0, HA_WORD_S1, "note") && span_is(f, 0, HA_WORD_S2, "7") && raw_is(f, 0, "x\ny"));
    char *big = malloc(SSE_CAP + 64);
    memcpy(big, "data: ", 6);
    memset(big + 6, 'z', SSE_CAP + 8);
    memcpy(big + SSE_CAP + 14, "\n\n", 3);
    feed(f, big);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR && rec(f, 0)[HA_WORD_CODE] == HA_ERR_EVENT_TOO_LARGE);
    free(big);
    feed(f, "data: after\n\ndata: cut");
    CHECK(c, f->n == 1 && raw_is(f, 0, "after"));
    f->n = ha_stream_close(&f->st);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_TAIL &&
                 rec(f, 0)[HA_WORD_CODE] == (HA_SSE_TAIL_UNTERMINATED_EVENT | HA_SSE_TAIL_PARTIAL_LINE) &&
                 rec(f, 0)[HA_WORD_INDEX] == 3);
    free(f);
}

static void test_ollama(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OLLAMA, 64);
    /* thinking, then text pieces merged across lines; META once */
    feed(f, "{\"model\":\"qwen3\",\"created_at\":\"t\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"Hm\"},\"done\":false}\n"
            "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\r\n"
            "\n"
            "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"lo\"},\"done\":false}\n");
    CHECK(c, f->n == 3 && f->recs[HA_HDR_EVENTS] == 3);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_META && rec(f, 0)[HA_WORD_S1] == -1 && span_is(f, 0, HA_WORD_S2, "qwen3"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_REASONING && rec(f, 1)[HA_WORD_INDEX] == 0 && span_is(f, 1, HA_WORD_S1, "Hm"));
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_TEXT && span_is(f, 2, HA_WORD_S1, "Hello"));
    /* tool calls: head then the arguments object's bytes as sent */
    feed(f, "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
            "{\"function\":{\"name\":\"get\",\"arguments\":{\"a\": [1, \"\\u00e9\"]}}},"
            "{\"id\":\"call_7\",\"function\":{\"index\":1,\"name\":\"put\",\"arguments\":{}}}]},\"done\":false}\n");
    CHECK(c, f->n == 4);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_TOOL_START && rec(f, 0)[HA_WORD_SUB] == -1 &&
                 rec(f, 0)[HA_WORD_S1] == -1 && span_is(f, 0, HA_WORD_S2, "get"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && span_is(f, 1, HA_WORD_S1, "{\"a\": [1, \"\\u00e9\"]}"));
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_TOOL_START && rec(f, 2)[HA_WORD_SUB] == 1 &&
                 span_is(f, 2, HA_WORD_S1, "call_7") && span_is(f, 2, HA_WORD_S2, "put"));
    CHECK(c, rec(f, 3)[HA_WORD_KIND] == HA_REC_TOOL_ARGS && rec(f, 3)[HA_WORD_SUB] == 1 && span_is(f, 3, HA_WORD_S1, "{}"));
    /* the done line: finish, usage, timings, end */
    feed(f, "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"length\","
            "\"total_duration\":900,\"load_duration\":10,\"prompt_eval_count\":12,\"prompt_eval_duration\":300,"
            "\"eval_count\":34,\"eval_duration\":500}\n");
    CHECK(c, f->n == 4);
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_FINISH && rec(f, 0)[HA_WORD_INDEX] == -1 &&
                 rec(f, 0)[HA_WORD_SUB] == HA_FINISH_STOP && span_is(f, 0, HA_WORD_S1, "length"));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_USAGE && rec(f, 1)[HA_USAGE_INPUT] == 12 &&
                 rec(f, 1)[HA_USAGE_OUTPUT] == 34 && rec(f, 1)[HA_USAGE_TOTAL] == -1);
    CHECK(c, rec(f, 2)[HA_WORD_KIND] == HA_REC_TIMINGS && rec(f, 2)[HA_TIMING_TOTAL] == 900 &&
                 rec(f, 2)[HA_TIMING_LOAD] == 10 && rec(f, 2)[HA_TIMING_PROMPT_EVAL] == 300 &&
                 rec(f, 2)[HA_TIMING_EVAL] == 500);
    CHECK(c, rec(f, 3)[HA_WORD_KIND] == HA_REC_END && rec(f, 3)[HA_WORD_CODE] == 2);
    free(f);

    f = open_stream(HA_PROTO_OLLAMA, 64);
    /* an error line, as the official client: a string or anything truthy */
    feed(f, "{\"error\":\"model 'x' not found\"}\n{\"error\":{\"message\":\"m\"}}\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_KIND] == HA_REC_ERROR && rec(f, 0)[HA_WORD_S1] == -1 &&
                 span_is(f, 0, HA_WORD_S2, "model 'x' not found") && raw_is(f, 0, "\"model 'x' not found\""));
    CHECK(c, rec(f, 1)[HA_WORD_KIND] == HA_REC_ERROR && span_is(f, 1, HA_WORD_S2, "m"));
    /* "" and null are no error; the line is then read as usual */
    feed(f, "{\"error\":\"\",\"message\":{\"content\":\"a\"}}\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_TEXT);
    /* wrong shapes warn by path */
    feed(f, "{\"done\":false}\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_MISSING_FIELD && span_is(f, 0, HA_WORD_S1, "message"));
    feed(f, "{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"done\":\"yes\"}\n");
    CHECK(c, f->n == 3 && rec(f, 0)[HA_WORD_KIND] == HA_REC_TOOL_START &&
                 rec(f, 1)[HA_WORD_CODE] == HA_WARN_FIELD_TYPE && span_is(f, 1, HA_WORD_S1, "message.tool_calls[].function.arguments") &&
                 rec(f, 2)[HA_WORD_CODE] == HA_WARN_FIELD_TYPE && span_is(f, 2, HA_WORD_S1, "done"));
    feed(f, "data: {}\n{\"a\":1}\r{\"b\":2}\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_BAD_JSON && rec(f, 1)[HA_WORD_CODE] == HA_WARN_BAD_JSON &&
                 rec(f, 1)[HA_WORD_SUB] == HA_JSON_ERR_TRAILING);
    /* a line over the buffer; the last line without LF is delivered at close */
    char *big = malloc(SSE_CAP + 64);
    memset(big, ' ', SSE_CAP + 8);
    memcpy(big + SSE_CAP, "{}\n", 4);
    feed(f, big);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR &&
                 rec(f, 0)[HA_WORD_CODE] == HA_ERR_LINE_TOO_LARGE && rec(f, 0)[HA_WORD_INDEX] == SSE_CAP + 2);
    free(big);
    feed(f, "{\"message\":{\"content\":\"x\"},\"done\":true}");
    CHECK(c, f->n == 0);
    f->n = ha_stream_close(&f->st);
    CHECK(c, f->n == 6 && rec(f, 0)[HA_WORD_KIND] == HA_REC_TEXT && rec(f, 1)[HA_WORD_KIND] == HA_REC_FINISH &&
                 rec(f, 1)[HA_WORD_S1] == -1 && rec(f, 4)[HA_WORD_KIND] == HA_REC_END &&
                 rec(f, 5)[HA_WORD_KIND] == HA_REC_TAIL && rec(f, 5)[HA_WORD_CODE] == HA_SSE_TAIL_PARTIAL_LINE &&
                 rec(f, 5)[HA_WORD_INDEX] == 39);
    free(f);

    /* a line left pending by a full area is delivered by close */
    f = open_stream(HA_PROTO_OLLAMA, 2);
    feed(f, "{\"message\":{\"content\":\"a\",\"thinking\":\"b\"}}\n{\"message\":{\"content\":\"c\",\"thinking\":\"d\"}}\n");
    CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 1);
    f->n = ha_stream_close(&f->st);
    CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 0 && span_is(f, 0, HA_WORD_S1, "d") && span_is(f, 1, HA_WORD_S1, "c"));
    free(f);

    /* a line framed where it lay in the read, then kept pending by a full
       area, outlives that read */
    f = open_stream(HA_PROTO_OLLAMA, 2);
    {
        char read[] = "{\"message\":{\"content\":\"a\",\"thinking\":\"b\"}}\n"
                      "{\"message\":{\"content\":\"c\",\"thinking\":\"d\"}}\n";
        size_t used;
        feed(f, read);
        used = (size_t)f->recs[HA_HDR_CONSUMED];
        CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 1 && used == strlen(read));
        memset(read, 'x', sizeof read - 1); /* the caller reuses its read buffer */
        f->n = ha_stream_feed(&f->st, (const uint8_t *)read + used, 0);
        CHECK(c, f->n == 2 && f->recs[HA_HDR_FULL] == 0 && span_is(f, 0, HA_WORD_S1, "d") &&
                     span_is(f, 1, HA_WORD_S1, "c"));
    }
    free(f);
}

static int64_t feed_packed(fixture *f, const char *s)
{
    return ha_stream_feed_packed(&f->st, (const uint8_t *)s, strlen(s));
}

/* -1 - packed, unpacked: text bytes, index, kind */
static int packed_is(int64_t v, int64_t text_bytes, int64_t index, int64_t kind)
{
    int64_t p = -1 - v;
    return v < 0 && p >> HA_PACKED_TEXT_SHIFT == text_bytes &&
           (p >> HA_PACKED_KIND_BITS & (HA_PACKED_MAX_INDEX - 1)) == index &&
           (p & ((1 << HA_PACKED_KIND_BITS) - 1)) == kind;
}

static void test_packed_return(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OPENAI_CHAT, 64);
    /* the first chunk has an id and a model: META besides the text, a count */
    CHECK(c, feed_packed(f, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n") == 2);
    /* then one plain delta: packed, its record written all the same */
    int64_t v = feed_packed(f, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":3,\"delta\":{\"content\":\"h\\u00e9\"}}]}\n\n");
    CHECK(c, packed_is(v, 3, 3, HA_PACKED_TEXT));
    CHECK(c, rec(f, 0)[HA_WORD_KIND] == HA_REC_TEXT && f->recs[HA_HDR_TEXT] == 3 && span_is(f, 0, HA_WORD_S1, "h\xc3\xa9"));
    v = feed_packed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r\"}}]}\n\n");
    CHECK(c, packed_is(v, 1, 0, HA_PACKED_REASONING));
    v = feed_packed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"no\"}}]}\n\n");
    CHECK(c, packed_is(v, 2, 0, HA_PACKED_REFUSAL));
    /* an index past the packing, a tool call's arguments, two records,
       nothing: the count */
    CHECK(c, feed_packed(f, "data: {\"choices\":[{\"index\":64,\"delta\":{\"content\":\"x\"}}]}\n\n") == 1);
    CHECK(c, feed_packed(f, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n") == 1);
    CHECK(c, feed_packed(f, "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"a\"}},{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n") == 2);
    CHECK(c, feed_packed(f, "data: {\"choices\":[{\"index\":0,\"del") == 0);
    free(f);
    /* Responses: a delta with an item id is not packed */
    f = open_stream(HA_PROTO_OPENAI_RESPONSES, 64);
    CHECK(c, feed_packed(f, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"i\",\"output_index\":0,\"content_index\":0,\"delta\":\"t\"}\n\n") == 1);
    free(f);
    /* an output area of one record: the second event of the read fills it */
    f = open_stream(HA_PROTO_OLLAMA, 1);
    CHECK(c, packed_is(feed_packed(f, "{\"message\":{\"content\":\"ab\"}}\n"), 2, 0, HA_PACKED_TEXT));
    CHECK(c, feed_packed(f, "{\"message\":{\"content\":\"c\"}}\n{\"message\":{\"thinking\":\"d\"}}\n") == 1 &&
                 f->recs[HA_HDR_FULL] == 1);
    free(f);
}

/* A string of n 'x' in a buffer the caller frees: between head and tail. */
static char *padded(const char *head, size_t n, const char *tail)
{
    size_t h = strlen(head), t = strlen(tail);
    char *s = malloc(h + n + t + 1);
    if (!s)
        exit(2);
    memcpy(s, head, h);
    memset(s + h, 'x', n);
    memcpy(s + h + n, tail, t + 1);
    return s;
}

static void test_anthropic_start_input(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_ANTHROPIC, 64);
    /* {} (with or without spaces) or no input: the deltas carry it, no raw */
    feed(f, "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{}}}\n\n"
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{ }}}\n\n"
            "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\"}}\n\n");
    CHECK(c, f->n == 3);
    for (size_t i = 0; i < 3; i++)
        CHECK(c, rec(f, i)[HA_WORD_KIND] == HA_REC_BLOCK_START && rec(f, i)[HA_WORD_RAW] == -1);
    /* any other input: its bytes as sent, escapes and spaces kept */
    feed(f, "data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{\"a\": [1, \"\\u00e9\"]}}}\n\n"
            "data: {\"type\":\"content_block_start\",\"index\":4,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web\",\"input\":\"q\"}}\n\n");
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_SUB] == HA_ITEM_TOOL_USE &&
                 span_is(f, 0, HA_WORD_S1, "t") && raw_is(f, 0, "{\"a\": [1, \"\\u00e9\"]}") &&
                 raw_is(f, 1, "\"q\""));
    free(f);
    /* an input over the buffer: its long string elided, the input lost; the
       warning after the start it belongs to */
    f = open_stream(HA_PROTO_ANTHROPIC, 64);
    char *big = padded("data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
                       "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{\"text\":\"",
                       SSE_CAP + 100, "\"}}}\n\n");
    feed(f, big);
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_KIND] == HA_REC_BLOCK_START &&
                 rec(f, 0)[HA_WORD_RAW] == -1 && span_is(f, 0, HA_WORD_S2, "n") &&
                 rec(f, 1)[HA_WORD_KIND] == HA_REC_WARNING &&
                 rec(f, 1)[HA_WORD_CODE] == HA_WARN_DELTA_ELIDED &&
                 span_is(f, 1, HA_WORD_S1, "content_block.input"));
    free(big);
    /* a long string beside the input (a text block's) leaves it whole */
    big = padded("data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
                 "{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{\"a\":1},\"note\":\"",
                 SSE_CAP + 100, "\"}}\n\n");
    feed(f, big);
    CHECK(c, f->n == 1 && raw_is(f, 0, "{\"a\":1}"));
    free(big);
    free(f);
}

static void test_ollama_dropped_lines_name_calls(check_counts *c)
{
    fixture *f = open_stream(HA_PROTO_OLLAMA, 64);
    /* over the buffer: the framing error names the calls it held */
    char *big = padded("{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                       "[{\"function\":{\"name\":\"n\",\"arguments\":{\"t\":\"",
                       SSE_CAP, "\"}}}]},\"done\":false}\n");
    feed(f, big);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR &&
                 rec(f, 0)[HA_WORD_CODE] == HA_ERR_LINE_TOO_LARGE &&
                 rec(f, 0)[HA_WORD_INDEX] == (int64_t)strlen(big) - 1 &&
                 span_is(f, 0, HA_WORD_S1, HA_OLLAMA_CALLS_PATH));
    free(big);
    /* ... and not when it held only text naming them */
    big = padded("{\"model\":\"m\",\"message\":{\"content\":\"\\\"tool_calls\\\": ", SSE_CAP, "\"}}\n");
    feed(f, big);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR &&
                 rec(f, 0)[HA_WORD_S1] == -1);
    free(big);
    /* nested deeper than the scanner goes: BAD_JSON names the calls */
    char deep[1024];
    int n = snprintf(deep, sizeof deep, "{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"n\",\"arguments\":{\"a\":");
    for (unsigned i = 0; i < HA_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    for (unsigned i = 0; i < HA_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    snprintf(deep + n, sizeof deep - (size_t)n, "}}}]}}\n");
    feed(f, deep);
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_KIND] == HA_REC_WARNING &&
                 rec(f, 0)[HA_WORD_CODE] == HA_WARN_BAD_JSON && rec(f, 0)[HA_WORD_SUB] == HA_JSON_ERR_DEPTH &&
                 span_is(f, 0, HA_WORD_S1, HA_OLLAMA_CALLS_PATH));
    /* bad JSON without calls: no path */
    feed(f, "{\"message\":{\"content\":\"tool_calls\"},\"x\":NaN}\n");
    CHECK(c, f->n == 1 && rec(f, 0)[HA_WORD_CODE] == HA_WARN_BAD_JSON && rec(f, 0)[HA_WORD_S1] == -1);
    /* a last line over the buffer without LF: named at close */
    big = padded("{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"n\",\"arguments\":{\"t\":\"",
                 SSE_CAP, "");
    feed(f, big);
    CHECK(c, f->n == 0);
    f->n = ha_stream_close(&f->st);
    CHECK(c, f->n == 2 && rec(f, 0)[HA_WORD_KIND] == HA_REC_FRAMING_ERROR &&
                 span_is(f, 0, HA_WORD_S1, HA_OLLAMA_CALLS_PATH) && rec(f, 1)[HA_WORD_KIND] == HA_REC_TAIL);
    free(big);
    free(f);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    check_counts c = {0, 0};
    test_chat_text_and_coalescing(&c);
    test_chat_tools_finish_usage_done(&c);
    test_chat_errors_and_warnings(&c);
    test_anthropic(&c);
    test_responses(&c);
    test_required_fields_and_type_names(&c);
    test_output_full_is_a_transaction(&c);
    test_framing_records_and_tail(&c);
    test_ollama(&c);
    test_anthropic_start_input(&c);
    test_ollama_dropped_lines_name_calls(&c);
    test_packed_return(&c);
    return check_summary(&c);
}

/* Contract tests of the NDJSON framer (ndjson.h): every stream is fed
 * whole, at every two-piece split and byte by byte, and each way must give
 * the outcomes listed, so no result depends on how reads were split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ndjson.h"

#define MAX_OUT 16

typedef struct {
    int status;          /* ha_ndjson_status, or -1 for the finish flags */
    char line[128];      /* LINE: its bytes */
    size_t size;         /* LINE, TOO_LARGE: size; finish: the flags */
    int held;            /* TOO_LARGE: it held the watched key */
} outcome;

typedef struct {
    outcome o[MAX_OUT];
    size_t n;
} outcomes;

static void add(outcomes *os, int status, const ha_ndjson_line *line, size_t size)
{
    if (os->n == MAX_OUT)
        return;
    outcome *o = &os->o[os->n++];
    memset(o, 0, sizeof *o);
    o->status = status;
    o->size = size;
    if (line && status == HA_NDJSON_LINE && line->data_len < sizeof o->line)
        memcpy(o->line, line->data, line->data_len);
    if (line && status == HA_NDJSON_ERR_LINE_TOO_LARGE)
        o->held = line->held;
}

/* Feed s in pieces of at most step bytes after a first piece of first bytes;
 * watching key at depth 2 unless key is NULL. */
static void run(const char *s, size_t len, size_t cap, const char *key, size_t first,
                size_t step, outcomes *os)
{
    uint8_t buf[256];
    ha_ndjson n;
    ha_ndjson_line line;
    unsigned flags;
    ha_ndjson_init(&n, buf, cap);
    if (key)
        ha_ndjson_watch(&n, key, strlen(key), 2);
    memset(os, 0, sizeof *os);
    for (size_t at = 0; at < len;) {
        size_t piece = at == 0 ? first : step;
        if (piece == 0 || piece > len - at)
            piece = len - at;
        size_t pos = 0;
        ha_ndjson_status st;
        while ((st = ha_ndjson_next(&n, (const uint8_t *)s + at, piece, &pos, &line)) !=
               HA_NDJSON_NEED_INPUT)
            add(os, st, &line, line.size);
        at += piece;
    }
    ha_ndjson_status st = ha_ndjson_finish(&n, &line, &flags);
    if (st != HA_NDJSON_NEED_INPUT)
        add(os, st, &line, line.size);
    add(os, -1, NULL, flags);
}

static int same(const outcomes *a, const outcomes *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->o[i].status != b->o[i].status || a->o[i].size != b->o[i].size ||
            a->o[i].held != b->o[i].held ||
            strcmp(a->o[i].line, b->o[i].line) != 0)
            return 0;
    return 1;
}

/* want: the lines expected ("!" + size for a line too large, "?" + size
 * for one that held the watched key), then the finish flags; checked fed
 * whole, at every split and byte by byte, watching key unless it is NULL. */
static void expect_watched(check_counts *c, const char *s, size_t cap, const char *key,
                           const char *const *want, size_t n_want, unsigned flags)
{
    size_t len = strlen(s);
    outcomes expected, got;
    memset(&expected, 0, sizeof expected);
    for (size_t i = 0; i < n_want; i++) {
        ha_ndjson_line line = {(const uint8_t *)want[i], strlen(want[i]), strlen(want[i]), 0};
        if (want[i][0] == '!' || want[i][0] == '?') {
            ha_ndjson_line big = {NULL, 0, 0, want[i][0] == '?'};
            add(&expected, HA_NDJSON_ERR_LINE_TOO_LARGE, &big,
                (size_t)strtoul(want[i] + 1, NULL, 10));
        } else
            add(&expected, HA_NDJSON_LINE, &line, line.size);
    }
    add(&expected, -1, NULL, flags);
    for (size_t first = 0; first <= len; first++) {
        run(s, len, cap, key, first, 0, &got);
        CHECK(c, same(&expected, &got));
    }
    run(s, len, cap, key, 1, 1, &got);
    CHECK(c, same(&expected, &got));
}

static void expect(check_counts *c, const char *s, size_t cap, const char *const *want,
                   size_t n_want, unsigned flags)
{
    expect_watched(c, s, cap, NULL, want, n_want, flags);
}

#define LINES(...) (const char *const[]){__VA_ARGS__}, \
    sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)

static void test_lines_and_line_ends(check_counts *c)
{
    expect(c, "{\"a\":1}\n{\"b\":2}\n", 64, LINES("{\"a\":1}", "{\"b\":2}"), 0);
    /* CRLF is LF, the pair split anywhere; a lone CR is kept, not a line end */
    expect(c, "{}\r\n[1]\r\n", 64, LINES("{}", "[1]"), 0);
    expect(c, "{}\r{}\n", 64, LINES("{}\r{}"), 0);
    expect(c, "a\r\r\n", 64, LINES("a\r"), 0);
    /* blank lines: empty, CRLF alone, JSON whitespace only; never delivered */
    expect(c, "\n\r\n \t\r\n{}\n\n", 64, LINES("{}"), 0);
    expect(c, "\n\n \r\n", 64, NULL, 0, 0);
    /* a line is whatever is between LFs: JSON is the scanner's business */
    expect(c, "not json\n", 64, LINES("not json"), 0);
}

static void test_end_of_stream(check_counts *c)
{
    /* the last line without LF is delivered, and the missing LF named */
    expect(c, "{}\n{\"done\":true}", 64, LINES("{}", "{\"done\":true}"),
           HA_NDJSON_TAIL_PARTIAL_LINE);
    /* a CR at the very end: the CR of a pair that never finished */
    expect(c, "{}\r", 64, LINES("{}"), HA_NDJSON_TAIL_PARTIAL_LINE);
    /* only whitespace after the last LF: nothing was cut */
    expect(c, "{}\n  ", 64, LINES("{}"), 0);
    expect(c, "", 64, NULL, 0, 0);
}

static void test_line_too_large(check_counts *c)
{
    /* cap 16: 16 bytes fit (17 with the CR of CRLF), 17 do not; the next
       line frames as usual, the size is the whole line's */
    expect(c, "0123456789abcdef\n{}\n", 16, LINES("0123456789abcdef", "{}"), 0);
    expect(c, "0123456789abcdef\r\n{}\n", 16, LINES("0123456789abcdef", "{}"), 0);
    expect(c, "0123456789abcdefg\n{}\n", 16, LINES("!17", "{}"), 0);
    expect(c, "0123456789abcdefghijklmnopqrstuvwxyz\r\n[]\n", 16, LINES("!36", "[]"), 0);
    /* too large and cut: named twice, the size and the missing LF */
    expect(c, "{}\n0123456789abcdefghij", 16, LINES("{}", "!20"), HA_NDJSON_TAIL_PARTIAL_LINE);
}

static void test_line_too_large_held_the_key(check_counts *c)
{
    const char *k = "tool_calls";
    /* a member of the root's message: held, whether in the buffered head
       (cap 16) or past it, split anywhere; the next line is fresh */
    expect_watched(c, "{\"m\":{\"tool_calls\":[{\"f\":1}]}}\n{}\n", 16, k,
                   LINES("?30", "{}"), 0);
    expect_watched(c, "{\"m\":{\"c\":\"0123456789abcdef\",\"tool_calls\":[]}}\n{}\n", 16, k,
                   LINES("?46", "{}"), 0);
    expect_watched(c, "{\"m\":{\"c\":\"0123456789abcdef\",\"tool_calls\":[]}}\r\n", 16, k,
                   LINES("?46"), 0);
    /* cut: held, and the missing LF named */
    expect_watched(c, "{\"m\":{\"tool_calls\":[{\"f\":1", 16, k, LINES("?26"),
                   HA_NDJSON_TAIL_PARTIAL_LINE);
    /* the name inside a string, as a value, at another depth, escaped in
       the string before it, or spelled with an escape: not held */
    expect_watched(c, "{\"m\":{\"c\":\"\\\"tool_calls\\\":1\"}}\n", 16, k, LINES("!30"), 0);
    expect_watched(c, "{\"m\":{\"c\":\"tool_calls\"}}\n", 16, k, LINES("!24"), 0);
    expect_watched(c, "{\"tool_calls\":[],\"m\":{\"x\":{\"tool_calls\":1}}}\n", 16, k,
                   LINES("!44"), 0);
    expect_watched(c, "{\"m\":{\"tool\\u005fcalls\":[]}}\n", 16, k, LINES("!28"), 0);
    /* a line that fits is not scanned: delivered as it is */
    expect_watched(c, "{\"tool_calls\":1}\n", 16, k, LINES("{\"tool_calls\":1}"), 0);
    /* not watching: never held */
    expect(c, "{\"m\":{\"tool_calls\":[{\"f\":1}]}}\n", 16, LINES("!30"), 0);
}

static void test_positions_and_finish(check_counts *c)
{
    uint8_t buf[32];
    ha_ndjson n;
    ha_ndjson_line line;
    size_t pos = 0;
    unsigned flags = 9;
    ha_ndjson_init(&n, buf, sizeof buf);
    CHECK(c, ha_ndjson_next(&n, (const uint8_t *)"  {\"a\"", 6, &pos, &line) == HA_NDJSON_NEED_INPUT);
    CHECK(c, pos == 6);
    pos = 0;
    CHECK(c, ha_ndjson_next(&n, (const uint8_t *)":1}\r\n{}\n", 8, &pos, &line) == HA_NDJSON_LINE);
    CHECK(c, pos == 5 && line.data_len == 9 && memcmp(line.data, "  {\"a\":1}", 9) == 0);
    CHECK(c, ha_ndjson_next(&n, (const uint8_t *)":1}\r\n{}\n", 8, &pos, &line) == HA_NDJSON_LINE);
    CHECK(c, pos == 8 && line.data_len == 2);
    CHECK(c, ha_ndjson_next(&n, (const uint8_t *)":1}\r\n{}\n", 8, &pos, &line) == HA_NDJSON_NEED_INPUT);
    CHECK(c, pos == 8);
    CHECK(c, ha_ndjson_finish(&n, &line, &flags) == HA_NDJSON_NEED_INPUT && flags == 0);
    /* finish empties the framer: a second one finds nothing */
    pos = 0;
    CHECK(c, ha_ndjson_next(&n, (const uint8_t *)" {}", 3, &pos, &line) == HA_NDJSON_NEED_INPUT);
    CHECK(c, ha_ndjson_finish(&n, &line, &flags) == HA_NDJSON_LINE && flags == HA_NDJSON_TAIL_PARTIAL_LINE &&
                 line.data_len == 3);
    CHECK(c, ha_ndjson_finish(&n, &line, &flags) == HA_NDJSON_NEED_INPUT && flags == 0);
}

int main(void)
{
    check_counts c = {0, 0};
    test_lines_and_line_ends(&c);
    test_end_of_stream(&c);
    test_line_too_large(&c);
    test_line_too_large_held_the_key(&c);
    test_positions_and_finish(&c);
    return check_summary(&c);
}

/* Newline-delimited JSON framer: raw network reads in, complete lines out.
 *
 * One JSON value per line (Ollama's /api/chat stream), framed into a fixed
 * buffer supplied by the caller: no allocation, no globals, linear time
 * whatever the read sizes, each byte looked at once (memchr for the LF;
 * a line split across reads is copied, one memcpy per run).
 *
 * The rules, decided here and listed in docs/truth-table-ollama.md:
 *  - LF ends a line. A CR just before it is dropped (CRLF is LF, even when
 *    the pair is split across reads); a CR anywhere else is kept: to the
 *    JSON scanner it is whitespace, so `{...}\r{...}` is one line with
 *    trailing data, not two lines.
 *  - a line of JSON whitespace only (space, tab, CR) is blank: skipped,
 *    never delivered.
 *  - a line longer than the buffer: HA_NDJSON_ERR_LINE_TOO_LARGE once, at
 *    its LF (so its size does not depend on how reads were split); the
 *    line is dropped and framing resumes with the next one.
 *    When the caller watches a key (ha_ndjson_watch()), such a line is
 *    scanned for it as it passes, its buffered head and every byte after
 *    (ha_json_keyscan, json.h): the report says whether the line held it,
 *    so a caller can tell what was lost. Lines that fit are not scanned.
 *  - end of stream: ha_ndjson_finish() delivers a last non-blank line that
 *    had no LF (the JSON scanner then decides whether it is whole) and
 *    names the missing LF in its flags instead of passing over it. No
 *    UTF-8 tail check: an unfinished sequence can only be inside a string
 *    the line never closed, which the JSON scanner reports.
 */
#ifndef HA_NDJSON_H
#define HA_NDJSON_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"

#define HA_NDJSON_MIN_CAPACITY 16u

/* Values shared with ha_sse_status where they mean the same. */
typedef enum {
    HA_NDJSON_NEED_INPUT = 0,           /* the read is consumed */
    HA_NDJSON_LINE = 1,                 /* a complete non-blank line */
    HA_NDJSON_ERR_LINE_TOO_LARGE = 6    /* a line over the buffer, dropped */
} ha_ndjson_status;

/* Flags of ha_ndjson_finish(): the value of ha_sse's PARTIAL_LINE flag. */
#define HA_NDJSON_TAIL_PARTIAL_LINE 2u  /* the last line had no LF */

/* What ha_ndjson_next() reports; data points into the input of the call
 * (a line that was whole in it) or into the caller's buffer, and stays
 * valid until the next call on the same framer, as long as that input. */
typedef struct {
    const uint8_t *data; size_t data_len; /* LINE: the line, without LF or
                                             the CR before it */
    size_t size; /* ERR_LINE_TOO_LARGE: the line's length (saturating) */
    int held;    /* ERR_LINE_TOO_LARGE: the line held the watched key */
} ha_ndjson_line;

/* The framer; members private to ndjson.c, defined here to be placed. */
typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t size;    /* bytes of the line in progress, stored or not */
    int blank;      /* no byte but JSON whitespace in it yet */
    int last_cr;    /* its last byte is a CR */
    int watching;   /* ha_ndjson_watch() was called */
    ha_json_keyscan scan, scan_start; /* of a line over the buffer; fresh */
} ha_ndjson;

/* Start a stream with a caller-owned buffer of cap (>= MIN_CAPACITY) bytes:
 * the longest line, its CR before LF not counted. */
void ha_ndjson_init(ha_ndjson *n, uint8_t *buf, size_t cap);

/* Scan each line over the buffer for a member named key (a literal that
 * outlives the framer) at depth (1: the root's members); its report then
 * says whether it held one. */
void ha_ndjson_watch(ha_ndjson *n, const char *key, size_t key_len, size_t depth);

/* Frame bytes in[*pos .. len), as ha_sse_next(): returns at the first line
 * to report or when the input is used up, *pos advanced past what was
 * consumed; call again with the same input until HA_NDJSON_NEED_INPUT. */
ha_ndjson_status ha_ndjson_next(ha_ndjson *n, const uint8_t *in, size_t len,
                                size_t *pos, ha_ndjson_line *line);

/* Move a line that ha_ndjson_next() just reported into the caller's
 * buffer (free until the next call), so that it outlives the input: for a
 * line kept to be handled later. Returns where it now is. */
const uint8_t *ha_ndjson_hold(ha_ndjson *n, const uint8_t *data, size_t len);

/* End of stream: the last line if it had no LF (LINE, or ERR_LINE_TOO_LARGE
 * when it is over the buffer), else NEED_INPUT; *flags gets the
 * HA_NDJSON_TAIL_* flags. The framer is then empty. */
ha_ndjson_status ha_ndjson_finish(ha_ndjson *n, ha_ndjson_line *line, unsigned *flags);

#endif

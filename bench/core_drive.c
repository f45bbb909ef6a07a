/* Feeds recorded reads through the stream core, for core_instructions.py:
 * argv[1] the protocol (ha_protocol), argv[2] a file of reads (each a
 * little-endian u32 length, then its bytes). Buffer sizes are
 * StreamDecoder's defaults, and a full output area is handled as feed()
 * does: the rest of the read is fed again. Prints the number of reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extract.h"

#define RECORDS 512u /* decoder.py's DEFAULT_RECORDS */

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        return 2;
    size_t size = 0, cap = 1u << 16, got;
    uint8_t *data = malloc(cap);
    while (data && (got = fread(data + size, 1, cap - size, f)) > 0) {
        size += got;
        if (size == cap)
            data = realloc(data, cap *= 2);
    }
    fclose(f);
    size_t buf_cap = HA_SSE_DEFAULT_CAPACITY, rec_words = HA_REC_HEADER + RECORDS * HA_REC_WORDS;
    size_t text_cap = ha_stream_text_size(buf_cap), raw_cap = ha_stream_raw_size(buf_cap);
    uint8_t *buf = malloc(buf_cap), *text = malloc(text_cap), *raw = malloc(raw_cap);
    int64_t *recs = malloc(rec_words * sizeof *recs);
    ha_stream *st = malloc(sizeof *st);
    if (!data || !buf || !text || !raw || !recs || !st ||
        ha_stream_init(st, (ha_protocol)atoi(argv[1]), buf, buf_cap, recs, rec_words, text,
                       text_cap, raw, raw_cap) != 0)
        return 3;
    /* called through a pointer: ha_stream_feed_packed stays a function of
       its own, for callgrind to count it, whatever LTO inlines */
    int64_t (*volatile feed)(ha_stream *, const uint8_t *, size_t) = ha_stream_feed_packed;
    size_t reads = 0;
    for (size_t p = 0; p + 4 <= size; reads++) {
        uint32_t len;
        memcpy(&len, data + p, sizeof len);
        p += sizeof len;
        if (len > size - p)
            return 3;
        feed(st, data + p, len);
        while (recs[HA_HDR_FULL]) {
            size_t used = (size_t)recs[HA_HDR_CONSUMED];
            p += used;
            len -= (uint32_t)used;
            feed(st, data + p, len);
        }
        p += len;
    }
    ha_stream_close(st);
    printf("%zu\n", reads);
    return 0;
}

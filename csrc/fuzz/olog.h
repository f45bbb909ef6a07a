/* The fuzz targets' outcome log: a growing byte string of everything a run
 * reported, so that two runs (whole and split, or against a reference)
 * compare with one memcmp. */
#ifndef HA_FUZZ_OLOG_H
#define HA_FUZZ_OLOG_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t len, cap;
} olog;

static inline void log_add(olog *l, const void *p, size_t n)
{
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 256;
        while (cap < l->len + n)
            cap *= 2;
        l->p = realloc(l->p, cap);
        if (l->p == NULL)
            __builtin_trap();
        l->cap = cap;
    }
    if (n > 0)
        memcpy(l->p + l->len, p, n);
    l->len += n;
}

#endif

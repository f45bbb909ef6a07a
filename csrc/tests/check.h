/* Minimal contract-test harness: CHECK records a pass or a failure with its
 * location, check_summary() prints "N passed, N failed" and gives the exit
 * status. Counters live in the test program's main(), not in globals. */
#ifndef HA_CHECK_H
#define HA_CHECK_H

#include <stdio.h>

typedef struct {
    unsigned passed;
    unsigned failed;
} check_counts;

#define CHECK(c, cond)                                                        \
    do {                                                                      \
        if (cond) {                                                           \
            (c)->passed++;                                                    \
        } else {                                                              \
            (c)->failed++;                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
        }                                                                     \
    } while (0)

static inline int check_summary(const check_counts *c)
{
    printf("%u passed, %u failed\n", c->passed, c->failed);
    return c->failed == 0 ? 0 : 1;
}

#endif

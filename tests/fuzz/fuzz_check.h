/*
 * fuzz_check: what the libFuzzer harnesses share. check() is assert(), on in
 * every build, naming the broken invariant before it aborts (libFuzzer then
 * keeps the input).
 */
#ifndef TTLG_FUZZ_CHECK_H
#define TTLG_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define check(c)                                                                     \
    do {                                                                             \
        if (!(c)) {                                                                  \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif

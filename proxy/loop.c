/*
 * loop: the clock of the current loop callback (see loop.h).
 */
#include "loop.h"

uint64_t loop_now_ns;

/* libmylib: the function every tracer in tracecost observes. */
#ifndef MYLIB_H
#define MYLIB_H

#include <stdint.h>

/* Four arguments of distinct kinds so that a tracer must get each one from
 * the right place: a in edi, b in rsi, s in rdx (the third *integer*
 * argument) and c in xmm0. Returns a value every validator can recompute:
 *   3*a + (b mod 1000003) + trunc(c) + strlen(s)
 * After computing it, busy-waits for the configured simulated work. */
int64_t my_traced_function(int32_t a, uint64_t b, double c, const char *s);

/* Busy-wait length of every later call, in microseconds (0: no wait). */
void set_simulated_work_duration(unsigned int work_us);

#endif

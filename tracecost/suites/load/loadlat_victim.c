/* loadlat_victim: the running target of tracecost load. It calls each of its
 * LOADLAT_MAX_PROBES functions loadlat_fn_0 .. loadlat_fn_99 in turn, in a tight
 * loop, until it is killed: whichever functions a loader probes, the next hit
 * of each comes within one pass over the others (well under a microsecond
 * untraced), so the time from an attach to its first event is the runtime's,
 * not the victim's.
 *
 * The compiler must keep every function as a real, separate call: each is
 * noinline and called through a volatile table (no devirtualisation), and its
 * body differs by a constant (no identical-code folding). At -O2 each is
 * lea (5 bytes); ret: no branch, and room for uebpf's 5-byte hook patch
 * (`uebpf check-hook` accepts every one).
 *
 * Protocol: prints READY once running; stops on SIGINT or SIGTERM (their default action).
 * With LOADLAT_VICTIM_IDLE set it calls nothing and only waits to be stopped: a target whose
 * probes can never fire (tests/test_load.py: no event is a failed run, not a figure). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "loadlat.h"

#define FN(i)                                                       \
	__attribute__((noinline)) unsigned long loadlat_fn_##i(unsigned long x) \
	{                                                           \
		__asm__ volatile("" : "+r"(x));                     \
		return x * 3 + (i);                                 \
	}
#define FN10(t) FN(t##0) FN(t##1) FN(t##2) FN(t##3) FN(t##4) FN(t##5) FN(t##6) FN(t##7) FN(t##8) FN(t##9)
#define REF(i) loadlat_fn_##i,
#define REF10(t) REF(t##0) REF(t##1) REF(t##2) REF(t##3) REF(t##4) REF(t##5) REF(t##6) REF(t##7) REF(t##8) REF(t##9)

/* loadlat_fn_0..9 need no tens digit: declare them apart. */
FN(0) FN(1) FN(2) FN(3) FN(4) FN(5) FN(6) FN(7) FN(8) FN(9)
FN10(1) FN10(2) FN10(3) FN10(4) FN10(5) FN10(6) FN10(7) FN10(8) FN10(9)

static unsigned long (*volatile functions[])(unsigned long) = {
	REF(0) REF(1) REF(2) REF(3) REF(4) REF(5) REF(6) REF(7) REF(8) REF(9)
	REF10(1) REF10(2) REF10(3) REF10(4) REF10(5) REF10(6) REF10(7) REF10(8) REF10(9)
};

_Static_assert(sizeof(functions) / sizeof(functions[0]) == LOADLAT_MAX_PROBES, "one function per probe");

int main(int argc, char **argv)
{
	unsigned long x = 1;

	(void)argv;
	if (argc != 1) {
		fprintf(stderr, "usage: loadlat_victim   (stop: SIGINT or SIGTERM)\n");
		return 2;
	}
	printf("READY\n");
	fflush(stdout);
	if (getenv("LOADLAT_VICTIM_IDLE"))
		for (;;)
			pause();
	for (;;)
		for (unsigned i = 0; i < LOADLAT_MAX_PROBES; i++)
			x = functions[i](x);
}

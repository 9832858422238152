/* LD_PRELOAD wrapper: interposes my_traced_function, emits mylib:func_entry
 * and mylib:func_exit around the real call (found with dlsym(RTLD_NEXT)) and
 * returns exactly what the real function returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "mylib.h"
#include "mylib_tp.h"

typedef int64_t (*traced_fn)(int32_t, uint64_t, double, const char *);

static traced_fn real_function;

/* Resolved before main so the traced loop never pays for dlsym. */
__attribute__((constructor)) static void resolve_real_function(void)
{
	real_function = (traced_fn)dlsym(RTLD_NEXT, "my_traced_function");
	if (!real_function) {
		fprintf(stderr, "libmylib_lttng: cannot find the real my_traced_function: %s\n", dlerror());
		abort();
	}
}

int64_t my_traced_function(int32_t a, uint64_t b, double c, const char *s)
{
	int64_t ret;

	lttng_ust_tracepoint(mylib, func_entry, a, b, c, s);
	ret = real_function(a, b, c, s);
	lttng_ust_tracepoint(mylib, func_exit, ret);
	return ret;
}

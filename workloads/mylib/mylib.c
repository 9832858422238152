#include "mylib.h"

#include <string.h>
#include <time.h>

static unsigned int simulated_work_us;

void set_simulated_work_duration(unsigned int work_us)
{
	simulated_work_us = work_us;
}

/* A busy-wait rather than usleep: the call must stay on the CPU for the whole
 * duration, as real work would, without the scheduler's wake-up latency. */
static void busy_wait_us(unsigned int us)
{
	struct timespec start, now;
	const uint64_t target_ns = (uint64_t)us * 1000u;
	uint64_t elapsed_ns;

	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		clock_gettime(CLOCK_MONOTONIC, &now);
		elapsed_ns = (uint64_t)(now.tv_sec - start.tv_sec) * 1000000000u +
			     (uint64_t)(now.tv_nsec - start.tv_nsec);
	} while (elapsed_ns < target_ns);
}

__attribute__((noinline)) int64_t my_traced_function(int32_t a, uint64_t b, double c, const char *s)
{
	int64_t result = (int64_t)a * 3 + (int64_t)(b % 1000003u) + (int64_t)c + (int64_t)strlen(s);

	if (simulated_work_us)
		busy_wait_us(simulated_work_us);
	return result;
}

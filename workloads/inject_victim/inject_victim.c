/* inject_victim COUNTER_FILE THREADS WORK_US [seccomp]: the target of tests/test_inject.py, a
 * process that runs without the agent until `uebpf inject` loads it.
 *
 * THREADS threads call my_traced_function until the test asks them to stop. Call i gets
 * sample_app's arguments for index i (tracecost/workload.py: a, b, c and s = "call-<i>"), and i
 * is taken from a counter in COUNTER_FILE (shared memory the test maps) *before* the call, and
 * bit i of the file's `done` bitmap is set once call i has returned: a call whose index the test
 * saw the counter pass after `uebpf inject` returned, and whose bit it saw set before it ran
 * `uebpf detach`, was made while the agent was in, so its event must be there (a thread may be
 * preempted between taking an index and making the call). The test ends the run by setting the file's stop word; the
 * process prints {"calls":N,"checksum":C}, C the sum of the N return values (the same as
 * sample_app N's whatever the threads' interleaving), so that its output can be compared with
 * an untraced run's. The main thread waits in pthread_join (a thread blocked in a system call);
 * the others never make one. "seccomp" installs an allow-all seccomp filter first. */
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "mylib.h"

struct shared {
	_Atomic uint64_t next; /* the next call's index */
	_Atomic uint64_t stop; /* set by the test */
	uint64_t reserved[6];
	_Atomic uint8_t done[]; /* bit i: call i returned (as far as the file goes) */
};

static struct shared *shared;
static uint64_t done_bits;
static _Atomic uint64_t checksum;

static void *calls(void *unused)
{
	char s[32];
	uint64_t sum = 0;

	(void)unused;
	while (!atomic_load(&shared->stop)) {
		uint64_t i = atomic_fetch_add(&shared->next, 1);

		snprintf(s, sizeof(s), "call-%" PRIu64, i);
		sum += (uint64_t)my_traced_function((int32_t)(i % 2001) - 1000, i * 0x9E3779B97F4A7C15ull,
						    (double)(i % 1000) * 0.5 - 100.25, s);
		if (i < done_bits)
			atomic_fetch_or(&shared->done[i / 8], (uint8_t)(1u << (i % 8)));
	}
	atomic_fetch_add(&checksum, sum);
	return NULL;
}

static int allow_all_seccomp(void)
{
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog program = { .len = 1, .filter = &allow };

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program);
}

int main(int argc, char **argv)
{
	pthread_t threads[64];
	struct stat file;
	int fd, count;

	if (argc < 4 || (count = atoi(argv[2])) < 1 || count > 64) {
		fprintf(stderr, "usage: %s COUNTER_FILE THREADS(1-64) WORK_US [seccomp]\n", argv[0]);
		return 2;
	}
	fd = open(argv[1], O_RDWR);
	if (fd < 0 || fstat(fd, &file) || (size_t)file.st_size < sizeof(*shared)) {
		perror(argv[1]);
		return 1;
	}
	shared = mmap(NULL, (size_t)file.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	done_bits = ((uint64_t)file.st_size - sizeof(*shared)) * 8;
	if (shared == MAP_FAILED) {
		perror(argv[1]);
		return 1;
	}
	if (argc > 4 && strcmp(argv[4], "seccomp") == 0 && allow_all_seccomp()) {
		perror("seccomp");
		return 1;
	}
	set_simulated_work_duration((unsigned int)atoi(argv[3]));
	for (int t = 0; t < count; t++)
		if (pthread_create(&threads[t], NULL, calls, NULL)) {
			fprintf(stderr, "cannot start thread %d\n", t);
			return 1;
		}
	printf("READY\n");
	fflush(stdout);
	for (int t = 0; t < count; t++)
		pthread_join(threads[t], NULL);
	printf("{\"calls\":%" PRIu64 ",\"checksum\":%" PRIu64 "}\n", atomic_load(&shared->next), atomic_load(&checksum));
	return 0;
}

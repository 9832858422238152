/* distro_app: the workload the distribution's own tracing tools (libbpf-tools, bpftrace) are run
 * against, on the kernel and on uebpf (tests/test_distro_tools.py): it makes the calls those
 * tools trace, each a fixed number of times, so that what a tool prints can be compared side by
 * side and with what the workload did.
 *
 *   distro_app ACTION...
 *
 * It prints "READY" once it runs, then waits for its go: one byte on stdin, in read(), where it
 * is blocked when the tracer attaches (a system call counter such as syscount reports that read
 * when it returns, on the kernel as on uebpf: runtime/agent/README.md, "Calls in progress"; end
 * of input instead of the byte: the harness is gone, and it ends). Then it runs each ACTION in
 * order and exits with _exit (no stdio flush, no atexit work: nothing after the actions).
 *
 * Every system call below is made through the C library's exported wrapper of that name.
 *   opens    open("/etc/passwd") and close, openat of a missing file      (openat x2, close)
 *   stats    fstatat of /etc/passwd and of a missing file                  (newfstatat x2)
 *   kills    kill(self, 0) and kill of a pid that cannot exist, signal 0   (kill x2)
 *   getpid   getpid() three times                                          (getpid x3)
 *   timed    distro_timed(US) for 3 ms, 3 ms and 12 ms (a funclatency target; busy, no call)
 *   sleep    usleep(2000) twice (a C library function for funclatency LIB:FUNC)
 *   resolve  getaddrinfo("localhost") (gethostlatency)
 *   exec     fork, then execve("/bin/true") in the child, waited for (execsnoop)
 *   mount    mount() of a tmpfs on a missing folder, umount2() of it: both fail (mountsnoop)
 *   usdt     the USDT probe distro:step(I, I * 10) for I = 1..4
 *   greet    distro_greet(NAME, N) for ("alice", 1), ("bob", 2), ("carol", 3): uprobe and uretprobe
 *            targets (returns strlen(NAME) * N) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sdt.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A pid above the kernel's PID_MAX_LIMIT (4194304): no such process, whatever runs. */
#define NO_SUCH_PID 4194305
#define MISSING "/nonexistent/distro-app"

static const struct { const char *name; int n; } GREETS[] = { { "alice", 1 }, { "bob", 2 }, { "carol", 3 } };
static const unsigned TIMED_US[] = { 3000, 3000, 12000 };

static uint64_t now_ns(void)
{
	struct timespec ts;

	/* Served by the vDSO: no system call. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) void distro_timed(unsigned us)
{
	uint64_t end = now_ns() + (uint64_t)us * 1000u;

	while (now_ns() < end)
		__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) int distro_greet(const char *name, int n)
{
	__asm__ volatile("" : : "r"(name) : "memory");
	return (int)strlen(name) * n;
}

static int run(const char *action)
{
	if (!strcmp(action, "opens")) {
		int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);

		if (fd >= 0)
			close(fd);
		return openat(AT_FDCWD, MISSING, O_RDONLY | O_CLOEXEC) == -1 ? 0 : 1;
	}
	if (!strcmp(action, "stats")) {
		struct stat st;

		fstatat(AT_FDCWD, "/etc/passwd", &st, 0);
		return fstatat(AT_FDCWD, MISSING, &st, 0) == -1 ? 0 : 1;
	}
	if (!strcmp(action, "kills")) {
		kill(getpid(), 0);
		return kill(NO_SUCH_PID, 0) == -1 ? 0 : 1;
	}
	if (!strcmp(action, "getpid")) {
		for (int i = 0; i < 3; i++)
			getpid();
		return 0;
	}
	if (!strcmp(action, "timed")) {
		for (size_t i = 0; i < sizeof(TIMED_US) / sizeof(TIMED_US[0]); i++)
			distro_timed(TIMED_US[i]);
		return 0;
	}
	if (!strcmp(action, "sleep")) {
		usleep(2000);
		usleep(2000);
		return 0;
	}
	if (!strcmp(action, "resolve")) {
		struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *found = NULL;
		int err = getaddrinfo("localhost", NULL, &hints, &found);

		if (found)
			freeaddrinfo(found);
		return err ? 1 : 0;
	}
	if (!strcmp(action, "exec")) {
		pid_t child = fork();
		int status;

		if (child == 0) {
			char *const argv[] = { "true", NULL };

			execve("/bin/true", argv, environ);
			_exit(127);
		}
		return child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status);
	}
	if (!strcmp(action, "mount")) {
		/* Both fail (ENOENT): nothing is mounted, whatever the privilege. */
		mount("distro_app", MISSING, "tmpfs", 0, NULL);
		umount2(MISSING, 0);
		return 0;
	}
	if (!strcmp(action, "usdt")) {
		for (long i = 1; i <= 4; i++)
			STAP_PROBE2(distro, step, i, i * 10);
		return 0;
	}
	if (!strcmp(action, "greet")) {
		for (size_t i = 0; i < sizeof(GREETS) / sizeof(GREETS[0]); i++)
			distro_greet(GREETS[i].name, GREETS[i].n);
		return 0;
	}
	fprintf(stderr, "distro_app: unknown action '%s'\n", action);
	return 2;
}

int main(int argc, char **argv)
{
	char go;

	printf("READY\n");
	fflush(stdout);
	if (read(0, &go, 1) != 1)
		_exit(3);
	int failed = 0;

	for (int i = 1; i < argc; i++)
		failed |= run(argv[i]);
	_exit(failed);
}

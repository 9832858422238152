/* gate: holds a command at its door until the harness has attached its probes.
 *
 *   gate OUTPUT [NAME=VALUE]... /ABSOLUTE/PATH [ARG...]
 *
 * Sets each NAME=VALUE (a runtime's preload: the command's, not the gate's), prints "READY" (its
 * pid is the command's: the probes attach to it), waits for SIGUSR1, then execs PATH with ARGs in
 * its own place, its standard output in the file OUTPUT, with the signal mask it was started with.
 * Nothing runs between the signal and the exec that a probe could count: no allocation (execv,
 * not execvp: PATH is absolute). Errors: one line on stderr, exit status 127. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, const char *name)
{
	fprintf(stderr, "gate: %s %s: %s\n", what, name, strerror(errno));
	return 127;
}

int main(int argc, char **argv)
{
	sigset_t go, before;
	int arg = 2, out, sig;

	if (argc < 3) {
		fprintf(stderr, "gate: usage: gate OUTPUT [NAME=VALUE]... /ABSOLUTE/PATH [ARG...]\n");
		return 127;
	}
	for (; arg < argc && argv[arg][0] != '/' && strchr(argv[arg], '='); arg++)
		if (putenv(argv[arg]))
			return fail("cannot set", argv[arg]);
	if (arg == argc || argv[arg][0] != '/') {
		fprintf(stderr, "gate: the command must be an absolute path\n");
		return 127;
	}
	out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return fail("cannot create", argv[1]);
	sigemptyset(&go);
	sigaddset(&go, SIGUSR1);
	sigprocmask(SIG_BLOCK, &go, &before);
	printf("READY\n");
	fflush(stdout);
	if (sigwait(&go, &sig)) {
		fprintf(stderr, "gate: cannot wait for the go signal\n");
		return 127;
	}
	if (dup2(out, STDOUT_FILENO) < 0)
		return fail("cannot redirect the output to", argv[1]);
	sigprocmask(SIG_SETMASK, &before, NULL);
	execv(argv[arg], argv + arg);
	return fail("cannot run", argv[arg]);
}

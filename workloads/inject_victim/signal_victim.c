/* signal_victim: the target of tests/test_inject.py's test of an injected agent's fault-safe
 * probe reads, which divert the C library's sigaction for SIGSEGV and SIGBUS (runtime/agent/README.md,
 * "Attaching to a running process"). Prints READY and makes sample_app's call 0
 * (tracecost/workload.py); then, once a line arrives on stdin (the agent is in), makes call 1
 * and does what a program does with its fault signals: installs a SIGSEGV handler with
 * sigaction and reads it back, installs a SIGBUS one with signal() (which must return the
 * default, the disposition the process had), faults for real on an unmapped page and catches
 * it in its own handler; prints one JSON line of what it saw. Run untraced and injected: the
 * lines must be the same. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "mylib.h"

static sigjmp_buf recovered;
static volatile sig_atomic_t caught;

static void on_segv(int signal)
{
	caught = signal;
	siglongjmp(recovered, 1);
}

static void on_bus(int signal)
{
	(void)signal;
}

int main(void)
{
	struct sigaction mine, back;
	char line[8];
	int read_back, bus_was_default;
	volatile char *unmapped;

	printf("READY\n");
	fflush(stdout);
	my_traced_function(-1000, 0, -100.25, "call-0");
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	my_traced_function(-999, 0x9E3779B97F4A7C15ull, -99.75, "call-1");
	memset(&mine, 0, sizeof(mine));
	mine.sa_handler = on_segv;
	sigemptyset(&mine.sa_mask);
	memset(&back, 0, sizeof(back));
	read_back = sigaction(SIGSEGV, &mine, NULL) == 0 && sigaction(SIGSEGV, NULL, &back) == 0 &&
		    back.sa_handler == on_segv;
	bus_was_default = signal(SIGBUS, on_bus) == SIG_DFL && signal(SIGBUS, on_bus) == on_bus;
	unmapped = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (unmapped == MAP_FAILED)
		return 1;
	if (sigsetjmp(recovered, 1) == 0)
		*unmapped = 1;
	printf("{\"read_back\":%d,\"bus_was_default\":%d,\"caught\":%d}\n", read_back, bus_was_default, (int)caught);
	return 0;
}

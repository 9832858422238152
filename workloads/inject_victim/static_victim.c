/* static_victim: a statically linked process (no dynamic loader, no libc.so.6) that `uebpf
 * inject` must refuse (tests/test_inject.py). Prints READY, then the number of lines it read
 * from stdin once stdin closes. */
#include <stdio.h>

int main(void)
{
	char line[256];
	unsigned long lines = 0;

	printf("READY\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		lines++;
	printf("%lu\n", lines);
	return 0;
}

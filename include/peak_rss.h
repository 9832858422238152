/* Peak resident memory of the calling process, in KiB (VmHWM of /proc/self/status).
 *
 * Why not getrusage()/wait4()'s ru_maxrss: Linux keeps the largest RSS a process
 * ever had, including the image it replaced at exec; a child spawned by a
 * 100 MB Python harness would report at least 100 MB. VmHWM belongs to the
 * current memory map only. Returns 0 if it cannot be read. */
#ifndef PEAK_RSS_H
#define PEAK_RSS_H

#include <stdio.h>
#include <string.h>

static inline unsigned long peak_rss_kb(void)
{
	char line[256];
	unsigned long kb = 0;
	FILE *status = fopen("/proc/self/status", "r");

	if (!status)
		return 0;
	while (fgets(line, sizeof(line), status))
		if (!strncmp(line, "VmHWM:", 6) && sscanf(line + 6, "%lu", &kb) == 1)
			break;
	fclose(status);
	return kb;
}

#endif

/* syscall_ways: the same system calls made every way a program can make them, for the kernel's
 * system call tracepoints and uebpf's to count (tests/test_app.py).
 *
 *   syscall_ways N
 *
 * N times each: getppid() through the C library's wrapper, through syscall(), through the
 * `syscall` function dlsym finds in the C library (which bypasses any interposed one), and through
 * an inline `syscall` instruction of this program's own; then openat() of /dev/null through
 * open(), openat() and syscall(SYS_openat). Prints the checksum of the results; exit 1 if a
 * call failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static long inline_getppid(void)
{
	long result;

	__asm__ volatile("syscall" : "=a"(result) : "a"((long)SYS_getppid) : "rcx", "r11", "memory");
	return result;
}

static int opened(int fd)
{
	return fd >= 0 && close(fd) == 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	long (*found)(long, ...) = libc ? (long (*)(long, ...))dlsym(libc, "syscall") : NULL;

	if (!found) {
		fprintf(stderr, "syscall_ways: no syscall in libc.so.6\n");
		return 2;
	}
	for (long i = 0; i < n; i++) {
		sum += getppid() + syscall(SYS_getppid) + found(SYS_getppid) + inline_getppid();
		if (!opened(open("/dev/null", O_RDONLY)) || !opened(openat(AT_FDCWD, "/dev/null", O_RDONLY)) ||
		    !opened(syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY)))
			return 1;
	}
	printf("%ld\n", sum);
	return 0;
}

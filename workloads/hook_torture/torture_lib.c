/* libhooktorture.so: a hooked function in a shared library. Its first instructions read a
 * global through the GOT (RIP-relative in PIC code). */
#include "torture_lib.h"

long torture_lib_factor = 3;

__attribute__((noinline)) long torture_lib_scale(long x, long y)
{
	return x * torture_lib_factor + y;
}

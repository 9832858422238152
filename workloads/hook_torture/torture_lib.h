/* libhooktorture.so: the "function in a shared library" case of the hook torture victim. */
#ifndef TORTURE_LIB_H
#define TORTURE_LIB_H

long torture_lib_scale(long x, long y);

#endif

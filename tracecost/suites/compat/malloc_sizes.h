/* malloc_sizes: shared by malloc_sizes.bpf.c and its loader. */
#ifndef MALLOC_SIZES_H
#define MALLOC_SIZES_H

/* Distinct request sizes counted; further sizes are counted in `overflow`. */
#define MALLOC_SIZES_MAX 4096

#endif

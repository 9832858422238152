/* func_latency: shared by func_latency.bpf.c and its loader. */
#ifndef FUNC_LATENCY_H
#define FUNC_LATENCY_H

/* Bucket b counts calls that took [2^b, 2^(b+1)) microseconds (bucket 0 also takes 0 us). */
#define FUNC_LATENCY_BUCKETS 32
/* Threads with a call in progress at once. */
#define FUNC_LATENCY_THREADS 1024

#endif

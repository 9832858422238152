/* fuse_cache: what the fuse suite's metadata cache programs share with their harness. */
#ifndef FUSE_CACHE_H
#define FUSE_CACHE_H

/* A path inside the filesystem as its daemon sees it ("/dir/file"), NUL-padded: the cache key. */
#define FUSE_CACHE_PATH 256
/* The longest mountpoint the workload's program compares its paths with. */
#define FUSE_CACHE_MOUNT 128
#define FUSE_CACHE_ENTRIES 16384

/* Counters (the `counts` array), read by the harness after a run. */
enum fuse_cache_count {
	FUSE_CACHE_FILLED,      /* getattr answers stored */
	FUSE_CACHE_FORGOTTEN,   /* epoch advances: an unlink, rename or chmod made every entry stale */
	FUSE_CACHE_ANSWERED,    /* stats answered from the cache, the system call not made */
	FUSE_CACHE_MISSED,      /* stats of the mount the cache could not answer */
	FUSE_CACHE_COUNTS,
};

#endif

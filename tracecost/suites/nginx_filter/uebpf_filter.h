/* uebpf_filter: shared by uebpf_filter.bpf.c, the rules loader (filter_rules.c) and the nginx
 * module (ngx_http_uebpf_filter_module.c): map keys and limits (the suite's README, "The rules
 * file", states them for every method). */
#ifndef UEBPF_FILTER_H
#define UEBPF_FILTER_H

#define FILTER_PREFIX_MAX 64   /* bytes of a prefix rule */
#define FILTER_AGENT_MAX 96    /* bytes of an agent rule */
#define FILTER_PREFIXES 4096   /* prefix rules per set */
#define FILTER_AGENTS 64       /* agent rules per set */
#define FILTER_LENGTHS 64      /* distinct prefix lengths per set: 1..FILTER_PREFIX_MAX */
/* A set is written under a new generation while the old one serves, then made active: two
 * generations live at once, so the maps hold twice a set. */
#define FILTER_GENERATIONS 2

/* prefixes: key -> 1. The first `len` bytes of a path, zero-padded. */
struct filter_prefix_key {
	__u32 generation;
	__u32 len;
	__u8 bytes[FILTER_PREFIX_MAX];
};

/* agents: key -> 1. A whole User-Agent value, zero-padded. */
struct filter_agent_key {
	__u32 generation;
	__u32 len;
	__u8 bytes[FILTER_AGENT_MAX];
};

/* lengths[generation % FILTER_GENERATIONS]: the set's distinct prefix lengths. */
struct filter_lengths {
	__u32 generation; /* whose lengths these are: a slot not yet written for it matches nothing */
	__u32 count;
	__u8 len[FILTER_LENGTHS];
};

/* requests[worker]: the request a worker asks `filter` about. The module writes it with one map
 * update, so the program reads plain map memory: in a process without uebpf's agent a
 * bpf_probe_read_user is a system call (process_vm_readv), two of which cost more than the rest of
 * the decision. */
#define FILTER_WORKERS 1024
struct filter_request {
	__u32 path_len;	 /* the whole path's length; its first FILTER_PREFIX_MAX bytes below */
	__u32 agent_len; /* 0: no User-Agent; more than FILTER_AGENT_MAX: matches no agent */
	__u8 path[FILTER_PREFIX_MAX];
	__u8 agent[FILTER_AGENT_MAX]; /* zero-padded */
};

/* The slots of `decisions`, in this order. */
enum filter_decision {
	FILTER_ALLOWED,
	FILTER_DENIED,
	FILTER_PASSED, /* filter_live: calls of ngx_http_map_find for other maps, left to nginx */
	FILTER_DECISIONS,
};

/* What `filter` returns. Its context is the module's struct pt_regs, di = the worker's slot of
 * `requests`. */
enum filter_verdict {
	FILTER_ALLOW,
	FILTER_DENY,
	FILTER_ERROR, /* no such slot: the module answers 500, never lets the request through */
};

/* filter_live's marker: the constant the live config's map looks up (live_snippets), so that
 * the extension acts on that map's lookups only and lets every other call of ngx_http_map_find
 * run untouched. */
#define FILTER_LIVE_MARKER "uebpf-filter"

#endif

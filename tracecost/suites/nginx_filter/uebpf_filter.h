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

/* The slots of `decisions`, in this order. */
enum filter_decision {
	FILTER_ALLOWED,
	FILTER_DENIED,
	FILTER_DECISIONS,
};

/* The `filter` program's context (the module's struct pt_regs): di = the path ($uri), si = its
 * length, dx = the User-Agent value or 0 when the request has none, cx = its length. It returns
 * 1 to deny, 0 to allow. */

/* filter_live's marker: the constant the live config's map looks up (live_snippets), so that
 * the extension acts on that map's lookups only and lets every other call of ngx_http_map_find
 * run untouched. */
#define FILTER_LIVE_MARKER "uebpf-filter"

#endif

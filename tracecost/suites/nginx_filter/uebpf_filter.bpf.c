// SPDX-License-Identifier: GPL-2.0
/* uebpf_filter: nginx's request filter of the nginx-filter suite, one decision for two programs.
 *
 * Deny when the request's path ($uri) starts with a prefix of the set, or its User-Agent equals
 * an agent of the set. There is no LPM trie in uebpf (it refuses lpm_trie maps), so, as every
 * method of the suite does: for each distinct prefix length L of the set that the path reaches,
 * one lookup of the path's first L bytes in a hash of prefixes; one lookup of the agent.
 *
 * The rules loader (filter_rules.c) writes a new set under a new generation while the active one
 * serves, then flips `active`: a run reads the generation once, so it sees one set whole.
 *
 * `filter` is run by our nginx module (ngx_http_uebpf_filter_module.c) at the access phase, on the
 * request the worker wrote in its slot of `requests` (plain map memory: uebpf_filter.h says why
 * not pointers to nginx's memory).
 * `filter_live` is an extension on ngx_http_map_find(r, map, match) of an unmodified nginx whose
 * config (uebpf_filter.py, live_snippets) has a map from the constant FILTER_LIVE_MARKER that
 * yields "0" when the lookup finds it and its default "1" when ngx_http_map_find returns NULL,
 * as it does itself for "no match"; `if` on that variable returns 403. The extension acts only on
 * calls whose `match` is the marker and answers NULL to deny; every other call runs as it is.
 * It reads the request with bpf_probe_read_user, which in the agent is a fault-safe copy without
 * a system call.
 *
 * Both load on the kernel's verifier too, except filter_live's bpf_override_return, which the
 * kernel refuses in a uprobe program (with it replaced by a return, both load). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "uebpf_filter.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FILTER_PREFIXES *FILTER_GENERATIONS);
	__type(key, struct filter_prefix_key);
	__type(value, __u8);
} prefixes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FILTER_AGENTS *FILTER_GENERATIONS);
	__type(key, struct filter_agent_key);
	__type(value, __u8);
} agents SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_GENERATIONS);
	__type(key, __u32);
	__type(value, struct filter_lengths);
} lengths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} active SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_WORKERS);
	__type(key, __u32);
	__type(value, struct filter_request);
} requests SEC(".maps");

/* Which process holds each slot of `requests` (slot -> pid): a worker claims a free one when it
 * starts (BPF_NOEXIST) and frees it when it exits, so that an old worker finishing its requests
 * after a reload never shares a slot with its successor. The programs do not read it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FILTER_WORKERS);
	__type(key, __u32);
	__type(value, __u32);
} slots SEC(".maps");

/* Exact counts summed over workers (atomic adds: per-CPU slots could lose an update when a
 * worker is preempted between its load and store in userspace). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_DECISIONS);
	__type(key, __u32);
	__type(value, __u64);
} decisions SEC(".maps");

/* filter_live's view of nginx's structures: offsets taken from nginx-dev's headers at build time
 * (nginx_offsets.c), set by the harness, which refuses to run when the installed nginx is not
 * the version of those headers. */
const volatile __u64 request_uri_offset = 0;	     /* ngx_http_request_t.uri (ngx_str_t) */
const volatile __u64 request_user_agent_offset = 0; /* .headers_in.user_agent (ngx_table_elt_t *) */
const volatile __u64 table_elt_value_offset = 0;    /* ngx_table_elt_t.value (ngx_str_t) */

/* nginx's ngx_str_t. */
struct ngx_str {
	__u64 len;
	__u64 data;
};

/* The first `len` bytes of `from`, the rest of `words` words zero (little-endian words). */
static __always_inline void first_bytes(__u64 *to, const __u64 *from, __u32 len, __u32 words)
{
	__u32 w;

	for (w = 0; w < words; w++) {
		__u32 start = w * 8;

		if (len >= start + 8)
			to[w] = from[w];
		else if (len <= start)
			to[w] = 0;
		else
			to[w] = from[w] & ((1ULL << ((len - start) * 8)) - 1);
	}
}

static __always_inline void count(__u32 slot)
{
	__u64 *counter = bpf_map_lookup_elem(&decisions, &slot);

	if (counter)
		__sync_fetch_and_add(counter, 1);
}

/* A request's prefix lookups: its path's first FILTER_PREFIX_MAX bytes, how many it has. */
struct prefix_search {
	struct filter_prefix_key key; /* generation set; len and bytes per length tried */
	__u64 head[FILTER_PREFIX_MAX / 8];
	__u32 reach;
	__u32 found;
};

/* bpf_loop's callback: the set's length `i`, one lookup. The loop runs in bpf_loop so that the
 * safety analysis checks this body once: as a bounded loop of 64 turns it took uebpf's analysis
 * about 5 s (the kernel's 0.2 s), in every nginx worker's start. */
static long try_length(__u64 i, void *data)
{
	struct prefix_search *search = data;
	__u32 slot = search->key.generation % FILTER_GENERATIONS;
	struct filter_lengths *set = bpf_map_lookup_elem(&lengths, &slot);
	__u32 len;

	if (!set || set->generation != search->key.generation || i >= set->count || i >= FILTER_LENGTHS)
		return 1;
	len = set->len[i];
	if (len > search->reach)
		return 1; /* the lengths ascend: no later one fits either */
	if (len == 0)
		return 0;
	search->key.len = len;
	first_bytes((__u64 *)search->key.bytes, search->head, len, FILTER_PREFIX_MAX / 8);
	if (bpf_map_lookup_elem(&prefixes, &search->key)) {
		search->found = 1;
		return 1;
	}
	return 0;
}

/* FILTER_DENY or FILTER_ALLOW, counted. `search` holds the path (head, reach), `agent` the
 * User-Agent (bytes zero-padded, len; len 0: none, or longer than any rule). */
static __always_inline int decide(struct prefix_search *search, struct filter_agent_key *agent)
{
	__u32 zero = 0;
	__u32 *generation = bpf_map_lookup_elem(&active, &zero);
	int deny = 0;

	if (generation) {
		search->key.generation = *generation;
		bpf_loop(FILTER_LENGTHS, try_length, search, 0);
		deny = search->found;
		if (!deny && agent->len) {
			agent->generation = *generation;
			deny = bpf_map_lookup_elem(&agents, agent) != NULL;
		}
	}
	count(deny ? FILTER_DENIED : FILTER_ALLOWED);
	return deny ? FILTER_DENY : FILTER_ALLOW;
}

SEC("uprobe")
int BPF_KPROBE(filter, __u64 worker)
{
	struct prefix_search search = {};
	struct filter_agent_key agent = {};
	__u32 slot = worker, w;
	struct filter_request *request = bpf_map_lookup_elem(&requests, &slot);

	if (!request || worker >= FILTER_WORKERS)
		return FILTER_ERROR;
	search.reach = request->path_len < FILTER_PREFIX_MAX ? request->path_len : FILTER_PREFIX_MAX;
	for (w = 0; w < FILTER_PREFIX_MAX / 8; w++)
		search.head[w] = ((const __u64 *)request->path)[w];
	if (request->agent_len <= FILTER_AGENT_MAX) {
		agent.len = request->agent_len;
		for (w = 0; w < FILTER_AGENT_MAX / 8; w++) /* the module zero-pads it */
			((__u64 *)agent.bytes)[w] = ((const __u64 *)request->agent)[w];
	}
	return decide(&search, &agent);
}

/* Copies `len` bytes (at most `max`) of nginx's memory at `from`; 0, or an error. */
static __always_inline int copy_user(void *to, __u64 len, __u64 max, const void *from)
{
	if (len == 0)
		return 0;
	barrier_var(len); /* two separate tests: clang's merged one is beyond the verifier */
	if (len > max)
		return -1;
	return bpf_probe_read_user(to, len, from);
}

SEC("uprobe")
int BPF_KPROBE(filter_live, void *r, void *map, struct ngx_str *match)
{
	static const char marker[] = FILTER_LIVE_MARKER;
	struct prefix_search search = {};
	struct filter_agent_key key = {};
	struct ngx_str seen, uri, agent = {};
	char text[sizeof(marker) - 1];
	__u64 header = 0;
	__u32 i;

	if (bpf_probe_read_user(&seen, sizeof(seen), match) || seen.len != sizeof(text) ||
	    bpf_probe_read_user(text, sizeof(text), (void *)seen.data))
		goto passed;
#pragma unroll
	for (i = 0; i < sizeof(text); i++)
		if (text[i] != marker[i])
			goto passed;
	/* nginx's request as the module would pass it. A read that fails (a layout that is not this
	 * nginx's) denies, uncounted: the filter never lets a request through unchecked. */
	if (bpf_probe_read_user(&uri, sizeof(uri), r + request_uri_offset) ||
	    bpf_probe_read_user(&header, sizeof(header), r + request_user_agent_offset) ||
	    (header && bpf_probe_read_user(&agent, sizeof(agent), (void *)header + table_elt_value_offset)))
		goto deny;
	search.reach = uri.len < FILTER_PREFIX_MAX ? uri.len : FILTER_PREFIX_MAX;
	if (agent.len <= FILTER_AGENT_MAX)
		key.len = agent.len;
	if (copy_user(search.head, search.reach, FILTER_PREFIX_MAX, (void *)uri.data) ||
	    copy_user(key.bytes, key.len, FILTER_AGENT_MAX, (void *)agent.data))
		goto deny;
	if (decide(&search, &key) == FILTER_ALLOW)
		return 0;
deny:
	bpf_override_return(ctx, 0); /* "no match": the map's default, 1: deny */
	return 0;
passed:
	count(FILTER_PASSED); /* not the filter's map: nginx's lookup runs */
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

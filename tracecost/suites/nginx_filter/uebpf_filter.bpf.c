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
 * `filter` is run by our nginx module (ngx_http_uebpf_filter_module.c) at the access phase.
 * `filter_live` is an extension on ngx_http_map_find(r, map, match) of an unmodified nginx whose
 * config (uebpf_filter.py, live_snippets) has a map from the constant FILTER_LIVE_MARKER that
 * yields "0" when the lookup finds it and its default "1" when ngx_http_map_find returns NULL,
 * as it does itself for "no match"; `if` on that variable returns 403. The extension acts only on
 * calls whose `match` is the marker and answers NULL to deny; every other call runs as it is. */
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

static __always_inline int prefix_denied(__u32 generation, const void *path, __u64 path_len)
{
	struct filter_prefix_key key = {};
	__u64 head[FILTER_PREFIX_MAX / 8] = {};
	__u32 slot = generation % FILTER_GENERATIONS;
	struct filter_lengths *set = bpf_map_lookup_elem(&lengths, &slot);
	__u64 reach = path_len < FILTER_PREFIX_MAX ? path_len : FILTER_PREFIX_MAX;
	__u32 i, count;

	if (!set || set->generation != generation || reach == 0)
		return 0;
	barrier_var(reach);
	if (reach > FILTER_PREFIX_MAX)
		return 0;
	if (bpf_probe_read_user(head, reach, path))
		return 0;
	count = set->count;
	key.generation = generation;
	for (i = 0; i < FILTER_LENGTHS; i++) {
		__u64 *words = (__u64 *)key.bytes;
		__u32 len, w;

		if (i >= count)
			break;
		len = set->len[i];
		if (len == 0 || len > reach)
			continue;
		key.len = len;
		/* The first `len` bytes of the path, the rest of the key zero (little-endian words). */
		for (w = 0; w < FILTER_PREFIX_MAX / 8; w++) {
			__u32 start = w * 8;

			if (len >= start + 8)
				words[w] = head[w];
			else if (len <= start)
				words[w] = 0;
			else
				words[w] = head[w] & ((1ULL << ((len - start) * 8)) - 1);
		}
		if (bpf_map_lookup_elem(&prefixes, &key))
			return 1;
	}
	return 0;
}

static __always_inline int agent_denied(__u32 generation, const void *agent, __u64 agent_len)
{
	struct filter_agent_key key = {};

	if (!agent || agent_len == 0)
		return 0;
	barrier_var(agent_len); /* two separate tests: clang's merged one is beyond the verifier */
	if (agent_len > FILTER_AGENT_MAX)
		return 0;
	if (bpf_probe_read_user(key.bytes, agent_len, agent))
		return 0;
	key.generation = generation;
	key.len = agent_len;
	return bpf_map_lookup_elem(&agents, &key) != NULL;
}

/* 1: deny, 0: allow; counted. */
static __always_inline int decide(const void *path, __u64 path_len, const void *agent, __u64 agent_len)
{
	__u32 zero = 0, slot;
	__u32 *generation = bpf_map_lookup_elem(&active, &zero);
	__u64 *count;
	int deny = 0;

	if (generation)
		deny = prefix_denied(*generation, path, path_len) ||
		       agent_denied(*generation, agent, agent_len);
	slot = deny ? FILTER_DENIED : FILTER_ALLOWED;
	count = bpf_map_lookup_elem(&decisions, &slot);
	if (count)
		__sync_fetch_and_add(count, 1);
	return deny;
}

SEC("uprobe")
int BPF_KPROBE(filter, const void *path, __u64 path_len, const void *agent, __u64 agent_len)
{
	return decide(path, path_len, agent, agent_len);
}

SEC("uprobe")
int BPF_KPROBE(filter_live, void *request, void *map, struct ngx_str *match)
{
	static const char marker[] = FILTER_LIVE_MARKER;
	struct ngx_str seen, uri, agent = {};
	char text[sizeof(marker) - 1];
	__u64 header = 0;
	__u32 i;

	if (bpf_probe_read_user(&seen, sizeof(seen), match) || seen.len != sizeof(text) ||
	    bpf_probe_read_user(text, sizeof(text), (void *)seen.data))
		return 0;
#pragma unroll
	for (i = 0; i < sizeof(text); i++)
		if (text[i] != marker[i])
			return 0; /* not the filter's map: nginx's lookup runs */
	if (bpf_probe_read_user(&uri, sizeof(uri), request + request_uri_offset) ||
	    bpf_probe_read_user(&header, sizeof(header), request + request_user_agent_offset))
		return 0;
	if (header && bpf_probe_read_user(&agent, sizeof(agent), (void *)header + table_elt_value_offset))
		agent.data = 0;
	if (decide((void *)uri.data, uri.len, (void *)agent.data, agent.len))
		bpf_override_return(ctx, 0); /* "no match": the map's default, 1: deny */
	return 0;
}

char LICENSE[] SEC("license") = "GPL";

/* A log-linear latency histogram (as in HdrHistogram): each power of two is
 * split into 2^SUB_BITS equal buckets, so a bucket is at most 1/32 (3.1%) of
 * its values wide, from 1 ns to hours, in 15 KiB and O(1) per record.
 * Exact count, sum, min and max are kept beside it; percentiles are computed
 * from the printed buckets by tracecost (tracecost/latency.py). */
#ifndef LATENCY_HISTOGRAM_H
#define LATENCY_HISTOGRAM_H

#include <stdint.h>
#include <stdio.h>

#define SUB_BITS 5
#define SUB_BUCKETS (1u << SUB_BITS)
#define HISTOGRAM_BUCKETS ((64 - SUB_BITS + 1) * SUB_BUCKETS)

struct latency_histogram {
	uint64_t count, sum_ns, min_ns, max_ns;
	uint64_t buckets[HISTOGRAM_BUCKETS];
};

static inline unsigned int bucket_of(uint64_t ns)
{
	unsigned int shift;

	if (ns < SUB_BUCKETS)
		return (unsigned int)ns; /* below 32 ns every nanosecond has its bucket */
	shift = 63 - (unsigned int)__builtin_clzll(ns) - SUB_BITS;
	return ((shift + 1) << SUB_BITS) + (unsigned int)((ns >> shift) - SUB_BUCKETS);
}

/* First value of a bucket, and its width: the bucket holds [lower, lower + width). */
static inline uint64_t bucket_lower(unsigned int bucket, uint64_t *width)
{
	unsigned int shift;

	if (bucket < SUB_BUCKETS) {
		*width = 1;
		return bucket;
	}
	shift = (bucket >> SUB_BITS) - 1;
	*width = 1ull << shift;
	return (uint64_t)((bucket & (SUB_BUCKETS - 1)) + SUB_BUCKETS) << shift;
}

static inline void histogram_record(struct latency_histogram *h, uint64_t ns)
{
	if (h->count == 0 || ns < h->min_ns)
		h->min_ns = ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
	h->count++;
	h->sum_ns += ns;
	h->buckets[bucket_of(ns)]++;
}

/* {"count":C,"sum_ns":S,"min_ns":m,"max_ns":M,"buckets":[[lower,width,count],...]} (non-empty buckets) */
static inline void histogram_print_json(const struct latency_histogram *h, FILE *out)
{
	const char *separator = "";
	uint64_t lower, width;

	fprintf(out, "{\"count\":%llu,\"sum_ns\":%llu,\"min_ns\":%llu,\"max_ns\":%llu,\"buckets\":[",
		(unsigned long long)h->count, (unsigned long long)h->sum_ns, (unsigned long long)h->min_ns,
		(unsigned long long)h->max_ns);
	for (unsigned int b = 0; b < HISTOGRAM_BUCKETS; b++) {
		if (!h->buckets[b])
			continue;
		lower = bucket_lower(b, &width);
		fprintf(out, "%s[%llu,%llu,%llu]", separator, (unsigned long long)lower,
			(unsigned long long)width, (unsigned long long)h->buckets[b]);
		separator = ",";
	}
	fputs("]}", out);
}

#endif

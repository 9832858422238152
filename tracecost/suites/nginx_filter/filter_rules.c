/* nginx-filter-rules: the rules loader of the nginx-filter suite's uebpf filter.
 *
 *   nginx-filter-rules --region NAME RULES
 *
 * Reads RULES (the suite's rules file: `prefix /path`, `agent Some Agent/1.0`, blank lines and
 * `#` comments), fills the maps of uebpf_filter.bpf.c in region NAME and makes the set active,
 * then prints READY. `uebpf attach` makes the region (uebpf_filter.py): the object holds the
 * extension filter_live, which uebpf's C API cannot load (it has no way to mark a program an
 * extension) nor attach (it writes no attach entries); the region stays attach's to remove.
 *
 * Then commands, one a line on stdin, each answered with one line on stdout:
 *   replace FILE   the set of FILE, made active at once for every run that starts after it:
 *                  "ACTIVE NS", or "ERROR WHY" with the old set still active. NS is
 *                  CLOCK_REALTIME (nginx's $msec's clock) read just before the flip: a request
 *                  answered by the new set was decided after it, one answered before it had the
 *                  old set, and every request that starts once the line is read has the new.
 *   decisions      "DECISIONS ALLOWED DENIED PASSED", the programs' counters over every
 *                  worker (PASSED: filter_live's calls for other maps, left to nginx)
 * End of input: exit 0. A malformed RULES is one line on stderr and status 2, as a usage error;
 * a failure of uebpf is one line and status 1.
 *
 * A set is written under a new generation while the active one serves; then `active` flips, so
 * a run (which reads the generation once) sees one whole set; the old set's keys are deleted a
 * grace period later, after every run that read the old generation has ended (a run is a few
 * microseconds: the grace covers a worker descheduled in the middle of one). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <linux/types.h> /* the __u32 of uebpf_filter.h, the BPF side's types */
#include "uebpf.h"
#include "uebpf_filter.h"

#define GRACE_NS 1000000000L

struct rule_set {
	struct filter_prefix_key prefixes[FILTER_PREFIXES];
	struct filter_agent_key agents[FILTER_AGENTS];
	size_t prefix_count, agent_count;
};

struct filter_maps {
	const struct uebpf_map *prefixes, *agents, *lengths, *active, *decisions;
};

static void fail(const char *what)
{
	fprintf(stderr, "nginx-filter-rules: %s: %s\n", what, uebpf_last_error());
	exit(1);
}

/* The two kinds of rule: the word that starts the line (and its one space), the value's limits. */
struct rule_kind {
	const char *word;
	const char *name;
	size_t max_bytes;
	unsigned char lowest_byte; /* 0x21: no space in it; the highest is 0x7e */
	const char *bytes_are;
	size_t max_rules;
	const char *plural;
};

static const struct rule_kind PREFIX = { "prefix ", "a prefix", FILTER_PREFIX_MAX, 0x21, "printable ASCII without spaces",
					 FILTER_PREFIXES, "prefixes" };
static const struct rule_kind AGENT = { "agent ", "an agent", FILTER_AGENT_MAX, 0x20, "printable ASCII", FILTER_AGENTS, "agents" };

/* Whether `line` is a rule of `kind` (its word, then a value); `value` and `n` are that value. */
static bool rule_of(const struct rule_kind *kind, const char *line, size_t len, const char **value, size_t *n)
{
	size_t word = strlen(kind->word);

	if (len <= word || memcmp(line, kind->word, word) != 0)
		return false;
	*value = line + word;
	*n = len - word;
	return true;
}

/* What the limits of `kind` say of `value` (`n` bytes), the set holding `count` such rules
 * already: true, or false with `why`. */
static bool value_fits(const struct rule_kind *kind, const char *value, size_t n, size_t count, char *why, size_t size)
{
	size_t i;

	if (n > kind->max_bytes) {
		snprintf(why, size, "%s is at most %zu bytes (this one is %zu)", kind->name, kind->max_bytes, n);
		return false;
	}
	for (i = 0; i < n; i++)
		if ((unsigned char)value[i] < kind->lowest_byte || (unsigned char)value[i] > 0x7e) {
			snprintf(why, size, "byte 0x%02x at column %zu: %s is %s", (unsigned char)value[i],
				 strlen(kind->word) + i + 1, kind->name, kind->bytes_are);
			return false;
		}
	if (count == kind->max_rules) {
		snprintf(why, size, "more than %zu %s", kind->max_rules, kind->plural);
		return false;
	}
	return true;
}

/* A key of `size` bytes holding `value` (`n` bytes) zero-padded; its generation is set later. */
static void fill_key(void *key, size_t size, __u32 *len, __u8 *bytes, const char *value, size_t n)
{
	memset(key, 0, size);
	*len = n;
	memcpy(bytes, value, n);
}

/* Sets `why` (a buffer of `size`) to what is wrong with `line` (`len` bytes, no newline) and
 * returns false, or adds its rule to `set`. Blank lines and comments add nothing. */
static bool parse_line(const char *line, size_t len, struct rule_set *set, char *why, size_t size)
{
	const char *value;
	size_t n, blank = 0;

	while (blank < len && (line[blank] == ' ' || line[blank] == '\t'))
		blank++;
	if (blank == len || line[0] == '#')
		return true;
	if (rule_of(&PREFIX, line, len, &value, &n)) {
		struct filter_prefix_key *key = &set->prefixes[set->prefix_count];

		if (!value_fits(&PREFIX, value, n, set->prefix_count, why, size))
			return false;
		if (value[0] != '/') {
			snprintf(why, size, "a prefix must start with /");
			return false;
		}
		fill_key(key, sizeof(*key), &key->len, key->bytes, value, n);
		set->prefix_count++;
		return true;
	}
	if (rule_of(&AGENT, line, len, &value, &n)) {
		struct filter_agent_key *key = &set->agents[set->agent_count];

		if (!value_fits(&AGENT, value, n, set->agent_count, why, size))
			return false;
		if (value[0] == ' ' || value[n - 1] == ' ') {
			snprintf(why, size, "an agent has no leading or trailing space");
			return false;
		}
		fill_key(key, sizeof(*key), &key->len, key->bytes, value, n);
		set->agent_count++;
		return true;
	}
	snprintf(why, size, "expected \"prefix /PATH\" or \"agent VALUE\" (one space after the word)");
	return false;
}

/* Reads the rules file `path` into `set`; false with `why` = "PATH:LINE: what" (or PATH: why it
 * cannot be read). */
static bool read_rules(const char *path, struct rule_set *set, char *why, size_t size)
{
	FILE *file = fopen(path, "r");
	char *line = NULL, what[160];
	size_t capacity = 0, number = 0;
	ssize_t got;
	bool ok = true;

	set->prefix_count = set->agent_count = 0;
	if (file == NULL) {
		snprintf(why, size, "%s: %s", path, strerror(errno));
		return false;
	}
	while (ok && (got = getline(&line, &capacity, file)) >= 0) {
		number++;
		if (got > 0 && line[got - 1] == '\n')
			got--;
		if (!parse_line(line, got, set, what, sizeof(what))) {
			snprintf(why, size, "%s:%zu: %s", path, number, what);
			ok = false;
		}
	}
	if (ok && ferror(file)) {
		snprintf(why, size, "%s: %s", path, strerror(errno));
		ok = false;
	}
	free(line);
	fclose(file);
	return ok;
}

static int compare_u8(const void *a, const void *b)
{
	return *(const __u8 *)a - *(const __u8 *)b;
}

/* Writes `set` under `generation` (not active yet). */
static int write_set(const struct filter_maps *maps, struct rule_set *set, __u32 generation)
{
	struct filter_lengths lengths = { .generation = generation };
	bool seen[FILTER_PREFIX_MAX + 1] = { false };
	__u32 slot = generation % FILTER_GENERATIONS;
	__u8 one = 1;
	size_t i;
	int err;

	for (i = 0; i < set->prefix_count; i++) {
		set->prefixes[i].generation = generation;
		if ((err = uebpf_map_update(maps->prefixes, &set->prefixes[i], &one, 0)) < 0)
			return err;
		if (!seen[set->prefixes[i].len]) {
			seen[set->prefixes[i].len] = true;
			lengths.len[lengths.count++] = set->prefixes[i].len;
		}
	}
	qsort(lengths.len, lengths.count, 1, compare_u8);
	for (i = 0; i < set->agent_count; i++) {
		set->agents[i].generation = generation;
		if ((err = uebpf_map_update(maps->agents, &set->agents[i], &one, 0)) < 0)
			return err;
	}
	return uebpf_map_update(maps->lengths, &slot, &lengths, 0);
}

/* Deletes the keys of `set` (written under an inactive generation). */
static void delete_set(const struct filter_maps *maps, const struct rule_set *set)
{
	size_t i;

	for (i = 0; i < set->prefix_count; i++)
		uebpf_map_delete(maps->prefixes, &set->prefixes[i]); /* -ENOENT for a duplicate: fine */
	for (i = 0; i < set->agent_count; i++)
		uebpf_map_delete(maps->agents, &set->agents[i]);
}

static __u64 realtime_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (__u64)now.tv_sec * 1000000000ULL + now.tv_nsec;
}

static const struct uebpf_map *map_named(const struct uebpf_instance *instance, const char *name)
{
	const struct uebpf_map *map = uebpf_map_find(instance, name);

	if (map == NULL)
		fail(name);
	return map;
}

int main(int argc, char **argv)
{
	const char *region = NULL, *rules = NULL;
	static struct rule_set sets[2];
	struct rule_set *current = &sets[0], *next = &sets[1], *swap;
	struct uebpf_instance *instance;
	struct filter_maps maps;
	char why[512], *line = NULL;
	size_t capacity = 0;
	__u32 generation = 1, zero = 0;
	ssize_t got;
	int i, err;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--region") == 0 && i + 1 < argc)
			region = argv[++i];
		else if (argv[i][0] != '-' && rules == NULL)
			rules = argv[i];
		else
			break;
	}
	if (i < argc || region == NULL || rules == NULL) {
		fprintf(stderr, "usage: nginx-filter-rules --region NAME RULES\n");
		return 2;
	}
	if (!read_rules(rules, current, why, sizeof(why))) {
		fprintf(stderr, "%s\n", why);
		return 2;
	}
	instance = uebpf_instance_open(region);
	if (instance == NULL)
		fail(region);
	maps = (struct filter_maps){ map_named(instance, "prefixes"), map_named(instance, "agents"),
				     map_named(instance, "lengths"), map_named(instance, "active"),
				     map_named(instance, "decisions") };
	if ((err = write_set(&maps, current, generation)) < 0 ||
	    (err = uebpf_map_update(maps.active, &zero, &generation, 0)) < 0) {
		fprintf(stderr, "nginx-filter-rules: filling the maps failed: %s\n", strerror(-err));
		uebpf_instance_free(instance);
		return 1;
	}
	printf("READY\n");
	fflush(stdout);

	while ((got = getline(&line, &capacity, stdin)) >= 0) {
		if (got > 0 && line[got - 1] == '\n')
			line[--got] = '\0';
		if (strncmp(line, "replace ", 8) == 0) {
			__u32 flipped = generation + 1;
			__u64 before_flip = 0;

			if (!read_rules(line + 8, next, why, sizeof(why))) {
				printf("ERROR %s\n", why);
			} else if ((err = write_set(&maps, next, flipped)) < 0 ||
				   (before_flip = realtime_ns(), err = uebpf_map_update(maps.active, &zero, &flipped, 0)) < 0) {
				delete_set(&maps, next);
				printf("ERROR filling the maps failed: %s\n", strerror(-err));
			} else {
				printf("ACTIVE %llu\n", (unsigned long long)before_flip);
				fflush(stdout);
				generation = flipped;
				nanosleep(&(struct timespec){ .tv_nsec = GRACE_NS % 1000000000L, .tv_sec = GRACE_NS / 1000000000L }, NULL);
				delete_set(&maps, current);
				swap = current, current = next, next = swap;
			}
		} else if (strcmp(line, "decisions") == 0) {
			__u64 counts[FILTER_DECISIONS] = { 0 };
			__u32 slot;

			for (slot = 0; slot < FILTER_DECISIONS; slot++)
				uebpf_map_lookup(maps.decisions, &slot, &counts[slot]);
			printf("DECISIONS %llu %llu %llu\n", (unsigned long long)counts[FILTER_ALLOWED],
			       (unsigned long long)counts[FILTER_DENIED], (unsigned long long)counts[FILTER_PASSED]);
		} else {
			printf("ERROR unknown command (replace FILE, decisions)\n");
		}
		fflush(stdout);
	}
	free(line);
	uebpf_instance_free(instance);
	return 0;
}

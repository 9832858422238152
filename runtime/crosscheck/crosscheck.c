/* uebpf-crosscheck: runs the uprobe/uretprobe programs of one .bpf.o on a side (the kernel, or
 * uebpf's interpreter or JIT) around calls of a victim function with known arguments, then prints
 * what the programs left behind as one JSON document: every map's entries, every ring buffer's
 * records, and what the victim returned and had written to its `out` argument.
 *
 *   uebpf-crosscheck OBJ --sides kernel,interpreter,jit [--set NAME=VALUE]... [--programs A,B]
 *                    --call K,V,STR,F ...
 *
 * prints a JSON array with one document per side, in the order given.
 *
 * The victim is this program's own uebpf_check_victim(key, value, str, flags, out). On the kernel
 * every uprobe program is attached to it (and every uretprobe program to its return) with libbpf,
 * and the calls trigger them for real: uprobe programs cannot be BPF_PROG_TEST_RUN. On uebpf the
 * same object is loaded through the C API (uebpf.h) and each call runs the uprobe programs on a
 * struct pt_regs holding the same arguments, then the uretprobe programs with the return value in
 * ax. One thread runs every side in turn, pinned to CPU 0, so pid, tid, comm and the per-CPU
 * slot are the same on every side. tests/test_uebpf.py compares the documents.
 *
 * C with the system libbpf (1.1, the library tracecost's tracers use) rather than a Rust crate:
 * it attaches exactly as our tracers do, and it exercises uebpf's C API at the same time.
 * --set writes a global variable before loading (the variable's size and place come from the
 * object's BTF), as a skeleton's rodata would. --programs limits every side to the programs named
 * (the others are not even loaded), e.g. to leave out one the kernel refuses on this machine. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "uebpf.h"

#define MAX_CALLS 64
#define MAX_SETS 16
#define MAX_PROGS 16
#define MAX_SIDES 8

struct call {
	long key, value, flags;
	char str[64];
	long ret, out;
};

struct global {
	const char *name;
	unsigned long long value;
};

static struct call calls[MAX_CALLS];
static int n_calls;
static const char *only_programs; /* comma-separated, or NULL for all */

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("uebpf-crosscheck: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

__attribute__((noinline, noclone)) long uebpf_check_victim(long key, long value, const char *str, long flags, long *out)
{
	/* Opaque to the optimiser: the probes must see a real call with these arguments. */
	__asm__ volatile("" : : "r"(out) : "memory");
	return key * 3 + value + (long)strlen(str) + flags;
}

static long (*volatile victim)(long, long, const char *, long, long *) = uebpf_check_victim;

/* --- globals: size and place of a variable from the object's BTF ---------------------- */

struct var_place {
	char section[32];
	unsigned int offset, size;
};

static struct var_place find_var(const char *path, const char *name)
{
	struct btf *btf = btf__parse(path, NULL);
	struct var_place place = { 0 };

	if (!btf)
		die("cannot read the BTF of %s", path);
	for (unsigned int id = 1; id < btf__type_cnt(btf); id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);
		const struct btf_var_secinfo *v;

		if (!btf_is_datasec(t))
			continue;
		v = btf_var_secinfos(t);
		for (unsigned int i = 0; i < btf_vlen(t); i++, v++) {
			if (strcmp(btf__name_by_offset(btf, btf__type_by_id(btf, v->type)->name_off), name))
				continue;
			snprintf(place.section, sizeof(place.section), "%s", btf__name_by_offset(btf, t->name_off));
			place.offset = v->offset;
			place.size = v->size;
			btf__free(btf);
			return place;
		}
	}
	die("%s has no global variable `%s`", path, name);
	return place;
}

/* --- JSON output -------------------------------------------------------------------------- */

static void print_hex(const void *data, size_t size)
{
	const unsigned char *p = data;

	putchar('"');
	for (size_t i = 0; i < size; i++)
		printf("%02x", p[i]);
	putchar('"');
}

static int first_record;

static int print_record(void *ctx, void *data, size_t size)
{
	(void)ctx;
	printf("%s", first_record ? "" : ", ");
	first_record = 0;
	print_hex(data, size);
	return 0;
}

static int print_uebpf_record(void *ctx, const void *data, size_t size)
{
	return print_record(ctx, (void *)data, size);
}

/* Global-data maps are "<object>.rodata" in libbpf and ".rodata" in uebpf: print the latter. */
static const char *common_name(const char *name)
{
	const char *dot = strchr(name, '.');

	return dot ? dot : name;
}

static void print_calls(void)
{
	printf("\"victim\": [");
	for (int i = 0; i < n_calls; i++) {
		printf("%s{\"ret\": %ld, \"out\": %ld}", i ? ", " : "", calls[i].ret, calls[i].out);
		calls[i].ret = calls[i].out = 0; /* fresh for the next side */
	}
	printf("]");
}

static int selected(const char *name)
{
	size_t len = strlen(name);

	for (const char *at = only_programs; at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL)
		if (!strncmp(at, name, len) && (at[len] == ',' || at[len] == '\0'))
			return 1;
	return !only_programs;
}

/* --- the kernel side ------------------------------------------------------------------------ */

static int is_percpu(unsigned int type)
{
	return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY;
}

static void run_kernel(const char *path, struct global *globals, int n_globals)
{
	struct bpf_link *links[MAX_PROGS];
	int n_links = 0, first = 1;
	struct bpf_object *obj = bpf_object__open_file(path, NULL);
	struct bpf_program *prog;
	struct bpf_map *map;

	if (!obj)
		die("cannot open %s: %s", path, strerror(errno));
	for (int i = 0; i < n_globals; i++) {
		struct var_place place = find_var(path, globals[i].name);
		struct bpf_map *data = bpf_object__find_map_by_name(obj, place.section);
		size_t size;
		/* libbpf 1.1 returns it const, but it is the writable pre-load image a skeleton writes to. */
		char *value = data ? (char *)bpf_map__initial_value(data, &size) : NULL;

		if (!value || place.offset + place.size > size)
			die("cannot set `%s` in %s", globals[i].name, place.section);
		memcpy(value + place.offset, &globals[i].value, place.size);
	}
	bpf_object__for_each_program(prog, obj)
		bpf_program__set_autoload(prog, selected(bpf_program__name(prog)));
	if (bpf_object__load(obj))
		die("the kernel refuses %s: %s", path, strerror(errno));
	bpf_object__for_each_program(prog, obj) {
		const char *section = bpf_program__section_name(prog);

		if (!bpf_program__autoload(prog))
			continue;
		int ret = !strncmp(section, "uretprobe", 9);
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = "uebpf_check_victim", .retprobe = ret);

		if (strncmp(section, "uprobe", 6) && !ret)
			die("program %s (section %s): only uprobe and uretprobe programs can be cross-checked",
			    bpf_program__name(prog), section);
		if (n_links == MAX_PROGS)
			die("more than %d programs", MAX_PROGS);
		links[n_links] = bpf_program__attach_uprobe_opts(prog, 0, "/proc/self/exe", 0, &opts);
		if (!links[n_links++])
			die("cannot attach %s: %s", bpf_program__name(prog), strerror(errno));
	}
	for (int i = 0; i < n_calls; i++)
		calls[i].ret = victim(calls[i].key, calls[i].value, calls[i].str, calls[i].flags, &calls[i].out);
	for (int i = 0; i < n_links; i++)
		bpf_link__destroy(links[i]);

	printf("{\"side\": \"kernel\", ");
	print_calls();
	printf(", \"maps\": {");
	bpf_object__for_each_map(map, obj) {
		unsigned int type = bpf_map__type(map), key_size = bpf_map__key_size(map);
		size_t value_size = bpf_map__value_size(map);
		unsigned char key[512], next[512];
		void *value, *previous = NULL;

		if (type == BPF_MAP_TYPE_RINGBUF)
			continue;
		if (is_percpu(type))
			value_size = ((value_size + 7) & ~7ul) * (size_t)libbpf_num_possible_cpus();
		value = calloc(1, value_size);
		printf("%s\"%s\": [", first ? "" : ", ", common_name(bpf_map__name(map)));
		first = 0;
		for (int n = 0; !bpf_map_get_next_key(bpf_map__fd(map), previous, next); n++) {
			if (bpf_map_lookup_elem(bpf_map__fd(map), next, value))
				die("lookup in %s: %s", bpf_map__name(map), strerror(errno));
			printf("%s[", n ? ", " : "");
			print_hex(next, key_size);
			printf(", ");
			print_hex(value, value_size);
			printf("]");
			memcpy(key, next, key_size);
			previous = key;
		}
		printf("]");
		free(value);
	}
	printf("}, \"rings\": {");
	first = 1;
	bpf_object__for_each_map(map, obj) {
		struct ring_buffer *rb;

		if (bpf_map__type(map) != BPF_MAP_TYPE_RINGBUF)
			continue;
		printf("%s\"%s\": [", first ? "" : ", ", bpf_map__name(map));
		first = 0;
		first_record = 1;
		rb = ring_buffer__new(bpf_map__fd(map), print_record, NULL, NULL);
		if (!rb || ring_buffer__consume(rb) < 0)
			die("cannot drain %s", bpf_map__name(map));
		ring_buffer__free(rb);
		printf("]");
	}
	printf("}}");
	bpf_object__close(obj);
}

/* --- the uebpf side ------------------------------------------------------------------------- */

static void run_uebpf(const char *path, struct global *globals, int n_globals, int engine)
{
	struct uebpf_object *obj = uebpf_object_open(path);
	struct uebpf_instance *in;
	struct uebpf_program *entry[MAX_PROGS], *exit_[MAX_PROGS];
	int n_entry = 0, n_exit = 0, first = 1;
	uint64_t r0;

	if (!obj)
		die("%s", uebpf_last_error());
	for (int i = 0; i < n_globals; i++) {
		struct var_place place = find_var(path, globals[i].name);

		if (uebpf_object_set_global(obj, globals[i].name, &globals[i].value, place.size))
			die("%s", uebpf_last_error());
	}
	in = uebpf_object_load(obj, NULL);
	if (!in)
		die("%s", uebpf_last_error());
	for (size_t i = 0; i < uebpf_program_count(in); i++) {
		struct uebpf_program_info info;
		struct uebpf_program *p;

		if (uebpf_program_info(in, i, &info))
			die("%s", uebpf_last_error());
		if (!selected(info.name))
			continue;
		if (info.kind != UEBPF_PROGRAM_UPROBE && info.kind != UEBPF_PROGRAM_URETPROBE)
			die("program %s (section %s): only uprobe and uretprobe programs can be cross-checked",
			    info.name, info.section);
		p = uebpf_program_load(in, info.name, engine);
		if (!p)
			die("%s", uebpf_last_error());
		if (info.kind == UEBPF_PROGRAM_UPROBE)
			entry[n_entry++] = p;
		else
			exit_[n_exit++] = p;
	}
	for (int i = 0; i < n_calls; i++) {
		struct call *c = &calls[i];
		struct uebpf_pt_regs regs = { .di = (uint64_t)c->key, .si = (uint64_t)c->value,
					      .dx = (uint64_t)c->str, .cx = (uint64_t)c->flags,
					      .r8 = (uint64_t)&c->out, .ip = (uint64_t)uebpf_check_victim };

		for (int p = 0; p < n_entry; p++)
			if (uebpf_program_run(entry[p], &regs, sizeof(regs), &r0))
				die("%s", uebpf_last_error());
		c->ret = victim(c->key, c->value, c->str, c->flags, &c->out);
		regs.ax = (uint64_t)c->ret;
		for (int p = 0; p < n_exit; p++)
			if (uebpf_program_run(exit_[p], &regs, sizeof(regs), &r0))
				die("%s", uebpf_last_error());
	}

	printf("{\"side\": \"%s\", ", engine == UEBPF_JIT ? "jit" : "interpreter");
	print_calls();
	printf(", \"maps\": {");
	for (size_t i = 0; i < uebpf_map_count(in); i++) {
		const struct uebpf_map *map = uebpf_map_at(in, i);
		struct uebpf_map_info info;
		unsigned char key[512], next[512];
		void *value, *previous = NULL;

		uebpf_map_info(map, &info);
		if (info.type == BPF_MAP_TYPE_RINGBUF)
			continue;
		value = calloc(1, info.syscall_value_size);
		printf("%s\"%s\": [", first ? "" : ", ", info.name);
		first = 0;
		for (int n = 0; !uebpf_map_next_key(map, previous, next); n++) {
			int err = uebpf_map_lookup(map, next, value);

			if (err)
				die("lookup in %s: %s", info.name, strerror(-err));
			printf("%s[", n ? ", " : "");
			print_hex(next, info.key_size);
			printf(", ");
			print_hex(value, info.syscall_value_size);
			printf("]");
			memcpy(key, next, info.key_size);
			previous = key;
		}
		printf("]");
		free(value);
	}
	printf("}, \"rings\": {");
	first = 1;
	for (size_t i = 0; i < uebpf_map_count(in); i++) {
		const struct uebpf_map *map = uebpf_map_at(in, i);
		struct uebpf_map_info info;

		uebpf_map_info(map, &info);
		if (info.type != BPF_MAP_TYPE_RINGBUF)
			continue;
		printf("%s\"%s\": [", first ? "" : ", ", info.name);
		first = 0;
		first_record = 1;
		if (uebpf_ringbuf_consume(map, print_uebpf_record, NULL) < 0)
			die("cannot drain %s", info.name);
		printf("]");
	}
	printf("}}");
	for (int p = 0; p < n_entry; p++)
		uebpf_program_free(entry[p]);
	for (int p = 0; p < n_exit; p++)
		uebpf_program_free(exit_[p]);
	uebpf_instance_free(in);
}

/* --- command line --------------------------------------------------------------------------- */

static void parse_call(const char *text)
{
	struct call *c = &calls[n_calls];
	int consumed = 0;

	if (n_calls == MAX_CALLS)
		die("at most %d calls", MAX_CALLS);
	if (sscanf(text, "%li,%li,%63[^,],%li%n", &c->key, &c->value, c->str, &c->flags, &consumed) != 4 ||
	    text[consumed])
		die("invalid --call '%s' (want KEY,VALUE,STRING,FLAGS)", text);
	n_calls++;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "sides", required_argument, NULL, 's' },
		{ "set", required_argument, NULL, 'g' },
		{ "call", required_argument, NULL, 'c' },
		{ "programs", required_argument, NULL, 'p' },
		{ 0 },
	};
	struct global globals[MAX_SETS];
	char *sides = NULL, *side, *side_names[MAX_SIDES];
	int n_globals = 0, n_sides = 0, opt;
	cpu_set_t cpu0;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 's': sides = optarg; break;
		case 'c': parse_call(optarg); break;
		case 'p': only_programs = optarg; break;
		case 'g': {
			char *eq = strchr(optarg, '='), *end;

			if (!eq || n_globals == MAX_SETS)
				die("invalid --set '%s' (want NAME=VALUE)", optarg);
			*eq = '\0';
			globals[n_globals].name = optarg;
			errno = 0;
			globals[n_globals].value = strtoull(eq + 1, &end, 0);
			if (errno || *end || end == eq + 1)
				die("invalid value in --set %s=%s", optarg, eq + 1);
			n_globals++;
			break;
		}
		default:
			die("usage: uebpf-crosscheck OBJ --sides kernel,interpreter,jit [--set NAME=VALUE]... [--programs A,B] --call K,V,STR,F...");
		}
	}
	if (optind != argc - 1 || !sides || !n_calls)
		die("usage: uebpf-crosscheck OBJ --sides kernel,interpreter,jit [--set NAME=VALUE]... [--programs A,B] --call K,V,STR,F...");
	/* Same CPU for both sides: per-CPU slots and bpf_get_smp_processor_id() agree. */
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	if (sched_setaffinity(0, sizeof(cpu0), &cpu0))
		die("cannot pin to CPU 0: %s", strerror(errno));
	for (char *rest = sides; (side = strtok(rest, ",")); rest = NULL) {
		if (n_sides == MAX_SIDES || (strcmp(side, "kernel") && strcmp(side, "interpreter") && strcmp(side, "jit")))
			die("invalid side '%s' (kernel, interpreter or jit, at most %d)", side, MAX_SIDES);
		side_names[n_sides++] = side;
	}
	putchar('[');
	for (int i = 0; i < n_sides; i++) {
		putchar(i ? ',' : '\n');
		if (!strcmp(side_names[i], "kernel"))
			run_kernel(argv[optind], globals, n_globals);
		else
			run_uebpf(argv[optind], globals, n_globals,
				  strcmp(side_names[i], "jit") ? UEBPF_INTERPRETER : UEBPF_JIT);
	}
	printf("\n]\n");
	return 0;
}

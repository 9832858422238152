/* ngx_http_uebpf_filter_module: the nginx-filter suite's `uebpf` method. At the access phase it
 * runs the `filter` program of uebpf_filter.bpf.c (JIT-compiled by uebpf) on the request's path
 * ($uri) and User-Agent, and answers 403 when the program says deny.
 *
 *   uebpf_filter REGION;   (http level) the uebpf region the rules loader (filter_rules.c)
 *                          made: its maps hold the rules, its `filter` program the decision.
 *
 * The region is checked when the configuration is read (nginx refuses to start without it), and
 * opened again in every worker; a worker that cannot open it or load the program logs why and
 * exits (nginx does not respawn a worker that fails its start), and a request that reaches the
 * handler without the program gets 500: the filter never lets a request through unchecked. */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <uebpf.h>

#include <linux/types.h> /* the __u32 of uebpf_filter.h, the BPF side's types */
#include "uebpf_filter.h"

#define FILTER_PROGRAM "filter"

typedef struct {
	ngx_str_t region; /* empty: no filter */
} ngx_http_uebpf_filter_main_conf_t;

static void *ngx_http_uebpf_filter_create_main_conf(ngx_conf_t *cf);
static ngx_int_t ngx_http_uebpf_filter_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_uebpf_filter_init_process(ngx_cycle_t *cycle);
static void ngx_http_uebpf_filter_exit_process(ngx_cycle_t *cycle);

static ngx_command_t ngx_http_uebpf_filter_commands[] = {
	{ ngx_string("uebpf_filter"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_str_slot,
	  NGX_HTTP_MAIN_CONF_OFFSET, offsetof(ngx_http_uebpf_filter_main_conf_t, region), NULL },
	ngx_null_command
};

static ngx_http_module_t ngx_http_uebpf_filter_module_ctx = {
	NULL,					 /* preconfiguration */
	ngx_http_uebpf_filter_postconfiguration, /* postconfiguration */
	ngx_http_uebpf_filter_create_main_conf,	 /* create main configuration */
	NULL,					 /* init main configuration */
	NULL,					 /* create server configuration */
	NULL,					 /* merge server configuration */
	NULL,					 /* create location configuration */
	NULL					 /* merge location configuration */
};

ngx_module_t ngx_http_uebpf_filter_module = {
	NGX_MODULE_V1,
	&ngx_http_uebpf_filter_module_ctx,  /* module context */
	ngx_http_uebpf_filter_commands,	    /* module directives */
	NGX_HTTP_MODULE,		    /* module type */
	NULL,				    /* init master */
	NULL,				    /* init module */
	ngx_http_uebpf_filter_init_process, /* init process */
	NULL,				    /* init thread */
	NULL,				    /* exit thread */
	ngx_http_uebpf_filter_exit_process, /* exit process */
	NULL,				    /* exit master */
	NGX_MODULE_V1_PADDING
};

/* This worker's view of the region, its program and its slot of `requests` (one per process:
 * workers are single-threaded). */
static struct uebpf_instance *filter_instance;
static struct uebpf_program *filter_program;
static uebpf_program_fn filter_run;
static const struct uebpf_map *filter_requests, *filter_slots;
static __u32 filter_slot;
static ngx_flag_t filter_slot_held;

static void *ngx_http_uebpf_filter_create_main_conf(ngx_conf_t *cf)
{
	/* ngx_pcalloc: region = { 0, NULL }, as ngx_conf_set_str_slot expects of an unset value. */
	return ngx_pcalloc(cf->pool, sizeof(ngx_http_uebpf_filter_main_conf_t));
}

/* The region's name as a C string, or NULL when the configuration has none. */
static const char *region_name(ngx_pool_t *pool, ngx_http_uebpf_filter_main_conf_t *conf)
{
	u_char *name;

	if (conf == NULL || conf->region.len == 0)
		return NULL;
	name = ngx_pnalloc(pool, conf->region.len + 1);
	if (name != NULL)
		*ngx_cpymem(name, conf->region.data, conf->region.len) = '\0';
	return (const char *)name;
}

/* Opens `region` and loads its filter program with the JIT; on failure logs why at `level` and
 * returns NGX_ERROR with nothing held. */
static ngx_int_t filter_open(ngx_log_t *log, ngx_uint_t level, const char *region)
{
	filter_instance = uebpf_instance_open(region);
	if (filter_instance == NULL) {
		ngx_log_error(level, log, 0, "uebpf_filter: cannot open uebpf region \"%s\": %s", region,
			      uebpf_last_error());
		return NGX_ERROR;
	}
	filter_program = uebpf_program_load(filter_instance, FILTER_PROGRAM, UEBPF_JIT);
	if (filter_program == NULL || (filter_run = uebpf_program_jit_function(filter_program)) == NULL) {
		ngx_log_error(level, log, 0, "uebpf_filter: cannot load program \"" FILTER_PROGRAM "\" of uebpf region \"%s\": %s",
			      region, uebpf_last_error());
		ngx_http_uebpf_filter_exit_process(NULL);
		return NGX_ERROR;
	}
	filter_requests = uebpf_map_find(filter_instance, "requests");
	filter_slots = uebpf_map_find(filter_instance, "slots");
	if (filter_requests == NULL || filter_slots == NULL) {
		ngx_log_error(level, log, 0, "uebpf_filter: uebpf region \"%s\" has no map \"%s\"", region,
			      filter_requests == NULL ? "requests" : "slots");
		ngx_http_uebpf_filter_exit_process(NULL);
		return NGX_ERROR;
	}
	return NGX_OK;
}

/* Claims a free slot of `requests` for this process; NGX_ERROR when all are taken. */
static ngx_int_t filter_claim_slot(ngx_log_t *log)
{
	__u32 pid = ngx_pid;
	int err = -ENOSPC;

	for (filter_slot = 0; filter_slot < FILTER_WORKERS; filter_slot++) {
		err = uebpf_map_update(filter_slots, &filter_slot, &pid, 1 /* BPF_NOEXIST */);
		if (err != -EEXIST)
			break;
	}
	if (err < 0) {
		ngx_log_error(NGX_LOG_EMERG, log, 0, "uebpf_filter: no free request slot of %d: %s", FILTER_WORKERS,
			      strerror(-err));
		return NGX_ERROR;
	}
	filter_slot_held = 1;
	return NGX_OK;
}

static ngx_int_t ngx_http_uebpf_filter_handler(ngx_http_request_t *r)
{
	struct uebpf_pt_regs regs = { 0 };
	ngx_table_elt_t *agent = r->headers_in.user_agent;
	struct filter_request request;
	__u64 verdict;

	/* One decision per request: after an internal redirect (an index file, an error page) the
	 * request was decided already. */
	if (r->internal)
		return NGX_DECLINED;
	if (filter_run == NULL) {
		ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0, "uebpf_filter: no program in this worker");
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	}
	/* The whole lengths, and as many bytes as a rule can hold: a longer path is decided by its
	 * first FILTER_PREFIX_MAX bytes, a longer agent matches no rule. */
	request.path_len = ngx_min(r->uri.len, 0xffffffff);
	ngx_memcpy(request.path, r->uri.data, ngx_min(r->uri.len, FILTER_PREFIX_MAX));
	request.agent_len = agent == NULL ? 0 : ngx_min(agent->value.len, 0xffffffff);
	/* Zero-padded: the program takes the bytes as they are for the agent key. */
	ngx_memzero(request.agent, FILTER_AGENT_MAX);
	if (agent != NULL)
		ngx_memcpy(request.agent, agent->value.data, ngx_min(agent->value.len, FILTER_AGENT_MAX));
	if (uebpf_map_update(filter_requests, &filter_slot, &request, 0) < 0) {
		ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0, "uebpf_filter: cannot write the request: %s",
			      uebpf_last_error());
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	}
	regs.di = filter_slot;
	verdict = filter_run(&regs, sizeof(regs));
	if (verdict == FILTER_ALLOW)
		return NGX_DECLINED;
	if (verdict == FILTER_DENY)
		return NGX_HTTP_FORBIDDEN;
	ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0, "uebpf_filter: the program failed (%uL)", verdict);
	return NGX_HTTP_INTERNAL_SERVER_ERROR;
}

/* With a region configured: it must open now (nginx -t and start fail loudly otherwise), and the
 * handler goes on the access phase. */
static ngx_int_t ngx_http_uebpf_filter_postconfiguration(ngx_conf_t *cf)
{
	ngx_http_uebpf_filter_main_conf_t *conf = ngx_http_conf_get_module_main_conf(cf, ngx_http_uebpf_filter_module);
	ngx_http_core_main_conf_t *core = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
	const char *region = region_name(cf->pool, conf);
	ngx_http_handler_pt *handler;

	if (conf->region.len == 0)
		return NGX_OK;
	if (region == NULL)
		return NGX_ERROR;
	if (filter_open(cf->log, NGX_LOG_EMERG, region) != NGX_OK)
		return NGX_ERROR;
	ngx_http_uebpf_filter_exit_process(NULL); /* the master holds nothing: each worker opens its own */
	handler = ngx_array_push(&core->phases[NGX_HTTP_ACCESS_PHASE].handlers);
	if (handler == NULL)
		return NGX_ERROR;
	*handler = ngx_http_uebpf_filter_handler;
	return NGX_OK;
}

static ngx_int_t ngx_http_uebpf_filter_init_process(ngx_cycle_t *cycle)
{
	ngx_http_uebpf_filter_main_conf_t *conf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_uebpf_filter_module);
	const char *region = region_name(cycle->pool, conf);

	if (conf == NULL || conf->region.len == 0)
		return NGX_OK;
	if (region == NULL || filter_open(cycle->log, NGX_LOG_EMERG, region) != NGX_OK)
		return NGX_ERROR;
	if (filter_claim_slot(cycle->log) != NGX_OK) {
		ngx_http_uebpf_filter_exit_process(NULL);
		return NGX_ERROR;
	}
	return NGX_OK;
}

static void ngx_http_uebpf_filter_exit_process(ngx_cycle_t *cycle)
{
	(void)cycle;
	if (filter_slot_held)
		uebpf_map_delete(filter_slots, &filter_slot);
	filter_slot_held = 0;
	filter_requests = filter_slots = NULL;
	filter_run = NULL;
	if (filter_program != NULL)
		uebpf_program_free(filter_program);
	filter_program = NULL;
	if (filter_instance != NULL)
		uebpf_instance_free(filter_instance);
	filter_instance = NULL;
}

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

/* This worker's view of the region and its program (one per process: workers are single-threaded). */
static struct uebpf_instance *filter_instance;
static struct uebpf_program *filter_program;
static uebpf_program_fn filter_run;

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
	return NGX_OK;
}

static ngx_int_t ngx_http_uebpf_filter_handler(ngx_http_request_t *r)
{
	struct uebpf_pt_regs regs = { 0 };
	ngx_table_elt_t *agent = r->headers_in.user_agent;

	/* One decision per request: after an internal redirect (an index file, an error page) the
	 * request was decided already. */
	if (r->internal)
		return NGX_DECLINED;
	if (filter_run == NULL) {
		ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0, "uebpf_filter: no program in this worker");
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	}
	regs.di = (uintptr_t)r->uri.data;
	regs.si = r->uri.len;
	if (agent != NULL) {
		regs.dx = (uintptr_t)agent->value.data;
		regs.cx = agent->value.len;
	}
	return filter_run(&regs, sizeof(regs)) ? NGX_HTTP_FORBIDDEN : NGX_DECLINED;
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
	if (region == NULL)
		return NGX_ERROR;
	return filter_open(cycle->log, NGX_LOG_EMERG, region);
}

static void ngx_http_uebpf_filter_exit_process(ngx_cycle_t *cycle)
{
	(void)cycle;
	filter_run = NULL;
	if (filter_program != NULL)
		uebpf_program_free(filter_program);
	filter_program = NULL;
	if (filter_instance != NULL)
		uebpf_instance_free(filter_instance);
	filter_instance = NULL;
}

/* nginx_offsets: where uebpf_filter.bpf.c's filter_live finds a request's path and User-Agent
 * in nginx's structures, from nginx-dev's headers (the nginx version they describe first), as
 * `name=value` lines the harness passes to `uebpf attach --set` (uebpf_filter.py). Built with
 * the same configure as the module (build.mk), so the layout is nginx-dev's. */
#include <stddef.h>
#include <stdio.h>

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <nginx.h>

int main(void)
{
	printf("nginx_version=%s\n", NGINX_VERSION);
	printf("request_uri_offset=%zu\n", offsetof(ngx_http_request_t, uri));
	printf("request_user_agent_offset=%zu\n", offsetof(ngx_http_request_t, headers_in) +
							  offsetof(ngx_http_headers_in_t, user_agent));
	printf("table_elt_value_offset=%zu\n", offsetof(ngx_table_elt_t, value));
	return 0;
}

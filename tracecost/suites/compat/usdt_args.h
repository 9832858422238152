/* usdt_args: shared by usdt_args.bpf.c and its loader. */
#ifndef USDT_ARGS_H
#define USDT_ARGS_H

#define USDT_ARGS_MAX 8
/* The cookie the loader attaches with (bpf_usdt_cookie reads it back). */
#define USDT_ARGS_COOKIE 0xC00C1Eull

#endif

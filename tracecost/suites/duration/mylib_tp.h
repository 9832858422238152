/* LTTng-UST tracepoint provider "mylib": the same fields as functrace
 * (all four arguments with their types, the return value; timestamp and tid
 * come from the event header and the vtid context the harness adds). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER mylib

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./mylib_tp.h"

#if !defined(MYLIB_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define MYLIB_TP_H

#include <stdint.h>
#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(
	mylib, func_entry,
	LTTNG_UST_TP_ARGS(int32_t, a, uint64_t, b, double, c, const char *, s),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(int32_t, a, a)
		lttng_ust_field_integer(uint64_t, b, b)
		lttng_ust_field_float(double, c, c)
		lttng_ust_field_string(s, s)
	)
)

LTTNG_UST_TRACEPOINT_EVENT(
	mylib, func_exit,
	LTTNG_UST_TP_ARGS(int64_t, ret),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(int64_t, ret, ret)
	)
)

#endif

#include <lttng/tracepoint-event.h>

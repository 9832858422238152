/* aof_bounded: shared by aof_bounded.bpf.c and the harness (tracecost/suites/redis). */
#ifndef AOF_BOUNDED_H
#define AOF_BOUNDED_H

/* The slots of `counts`, in this order (the harness reads them by index). */
enum aof_count {
	AOF_FSYNCS_DONE,    /* the AOF's fdatasync let through: everything fed so far is durable */
	AOF_FSYNCS_SKIPPED, /* answered 0 at once: the writes stay at risk */
	AOF_WRITES_FED,	    /* write commands for the AOF (alsoPropagate with PROPAGATE_AOF) */
	AOF_MOST_AT_RISK,   /* the most writes not yet durable when an fsync was skipped */
	AOF_COUNTS,
};

#endif

/* probes/agent_bench.bpf.c: the probes of the agent's per-hit benchmark (scripts/agent_bench.py). */
#ifndef AGENT_BENCH_H
#define AGENT_BENCH_H
#endif

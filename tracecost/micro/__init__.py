"""The probe micro-benchmarks (seed 002): what one probe, one helper call, one map operation costs.

ops.py says what each operation attaches where; runtimes.py how a runtime (none,
the kernel, uebpf) attaches it; bench.py runs the victim under a runtime
and checks every count.
"""

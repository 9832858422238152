"""The redis suite's folder (issue 34): Redis's AOF durability settings and uebpf extensions, with
the acknowledged writes a power cut loses counted. So far it holds the power-cut filesystem
(powercut.c, driven by powercut.py) that the suite's durability runs put under redis's AOF; the
suite itself (its Suite, report, schema and sample, and its line in the suite table) comes next.
It is not in tracecost/suites/__init__.py's table yet: a suite without a runner would break
`tracecost run`."""

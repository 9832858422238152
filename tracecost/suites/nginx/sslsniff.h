/* sslsniff's record and counters, shared by sslsniff.bpf.c and sslsniff.c. */
#ifndef SSLSNIFF_H
#define SSLSNIFF_H

#define SSLSNIFF_DATA 256 /* plaintext bytes kept per call: the first ones */

enum sslsniff_direction {
	SSLSNIFF_READ = 0,
	SSLSNIFF_WRITE = 1,
};

/* Which OpenSSL function the record came from. */
enum sslsniff_function {
	SSLSNIFF_SSL_READ = 0,
	SSLSNIFF_SSL_WRITE = 1,
	SSLSNIFF_SSL_READ_EX = 2,
	SSLSNIFF_SSL_WRITE_EX = 3,
};

/* Index into the per-CPU stats map: per direction, records submitted and reservations that failed
 * (dropped), and calls that moved no data (e.g. SSL_read's WANT_READ: no record). */
enum sslsniff_stat {
	SSLSNIFF_SUBMITTED_READ = 0,
	SSLSNIFF_SUBMITTED_WRITE = 1,
	SSLSNIFF_DROPPED_READ = 2,
	SSLSNIFF_DROPPED_WRITE = 3,
	SSLSNIFF_EMPTY_CALL = 4,
	SSLSNIFF_STAT_MAX,
};

struct sslsniff_event {
	unsigned long long ts_ns;   /* bpf_ktime_get_ns() at the return */
	unsigned int pid;           /* tgid */
	unsigned int tid;
	unsigned int direction;     /* enum sslsniff_direction */
	unsigned int function;      /* enum sslsniff_function */
	unsigned int len;           /* bytes the call moved */
	unsigned int copied;        /* of them in data: min(len, SSLSNIFF_DATA) */
	char data[SSLSNIFF_DATA];
};

#endif

/* syscount's limits, shared by syscount.bpf.c and syscount.c. */
#ifndef SYSCOUNT_H
#define SYSCOUNT_H

#define SYSCOUNT_MAX_PIDS 64   /* processes a targeted count follows */
#define SYSCOUNT_MAX_NR 1024   /* distinct system call numbers counted (x86-64 has fewer than 512) */

#endif

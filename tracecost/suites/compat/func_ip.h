/* func_ip: shared by func_ip.bpf.c and its loader. */
#ifndef FUNC_IP_H
#define FUNC_IP_H

#define FUNC_IP_MAX 16 /* hits recorded */

#endif

/* appcount: shared by appcount.bpf.c and its loader. */
#ifndef APPCOUNT_H
#define APPCOUNT_H

#define APPCOUNT_MAX_SITES 64 /* probe sites one loader attaches: hits[] slots, by attach cookie */

#endif

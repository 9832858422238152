/* greet_printk: shared by greet_printk.bpf.c and its loader. */
#ifndef GREET_PRINTK_H
#define GREET_PRINTK_H

#define GREET_NAME_LEN 32

#endif

/* probes/uebpf_embed.bpf.c: the programs of the embedded-call benchmark (runtime/vmbench),
 * called through uebpf's embedding API with a struct pt_regs context. */
#ifndef UEBPF_EMBED_H
#define UEBPF_EMBED_H

#define UEBPF_EMBED_VALUES 16

#endif

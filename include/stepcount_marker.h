/* The marker around a call that runtime/stepcount counts instruction by instruction: an int3,
 * which stops the process under stepcount's ptrace, followed by a 7-byte NOP with a displacement
 * no compiler emits (nopl 0x5eed(%rax)), which tells it from an int3 a hook engine patched into
 * the traced code. Without stepcount attached, the int3 kills the process (SIGTRAP). */
#ifndef STEPCOUNT_MARKER_H
#define STEPCOUNT_MARKER_H

#define STEPCOUNT_MARK() __asm__ volatile("int3\n\tnopl 0x5eed(%%rax)" ::: "memory")

#endif

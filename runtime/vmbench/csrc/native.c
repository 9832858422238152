/* Native twins of the benchmark programs (runtime/vmbench/src/programs.rs): the same algorithm
 * over the same packet, compiled with -O2, as the "native" engine. Each returns what its eBPF
 * version returns in r0. */
#include <stdint.h>

#define SIEVE_N 1024
#define MEMCPY_BYTES 1024
#define STRING_LEN 1024
#define SWITCH_BYTES 1024
#define ARITH_ROUNDS 4096

uint64_t native_empty(uint8_t *packet, uint64_t len)
{
	(void)packet;
	(void)len;
	return 0;
}

uint64_t native_prime_sieve(uint8_t *packet, uint64_t len)
{
	(void)len;
	for (uint64_t i = 0; i < SIEVE_N; i++)
		packet[i] = 0;
	for (uint64_t i = 2; i * i < SIEVE_N; i++)
		if (!packet[i])
			for (uint64_t j = i * i; j < SIEVE_N; j += i)
				packet[j] = 1;
	uint64_t primes = 0;
	for (uint64_t i = 2; i < SIEVE_N; i++)
		primes += !packet[i];
	return primes;
}

uint64_t native_memcpy(uint8_t *packet, uint64_t len)
{
	(void)len;
	for (uint64_t i = 0; i < MEMCPY_BYTES; i += 8) {
		uint64_t word;
		__builtin_memcpy(&word, packet + i, 8);
		__builtin_memcpy(packet + MEMCPY_BYTES + i, &word, 8);
	}
	uint64_t last;
	__builtin_memcpy(&last, packet + 2 * MEMCPY_BYTES - 8, 8);
	return last;
}

uint64_t native_strcmp(uint8_t *packet, uint64_t len)
{
	(void)len;
	for (uint64_t i = 0; i < STRING_LEN; i++) {
		uint64_t a = packet[i], b = packet[STRING_LEN + i];
		if (a != b)
			return a - b;
		if (a == 0)
			break;
	}
	return 0;
}

uint64_t native_switch(uint8_t *packet, uint64_t len)
{
	(void)len;
	uint64_t acc = 0;
	for (uint64_t i = 0; i < SWITCH_BYTES; i++) {
		switch (packet[i] & 15) {
		case 0: acc += 1; break;
		case 1: acc ^= 0x55; break;
		case 2: acc *= 3; break;
		case 3: acc -= 7; break;
		case 4: acc >>= 1; break;
		case 5: acc |= 0x100; break;
		case 6: acc &= 0xfffff; break;
		case 7: acc <<= 2; break;
		case 8: acc += 1000; break;
		case 9: acc ^= (uint64_t)-1; break;
		case 10: acc *= 7; break;
		case 11: acc -= 123; break;
		case 12: acc >>= 3; break;
		case 13: acc += i; break;
		case 14: acc ^= i; break;
		default: acc += 15; break;
		}
	}
	return acc;
}

uint64_t native_arith_loop(uint8_t *packet, uint64_t len)
{
	(void)packet;
	(void)len;
	uint64_t x = 1;
	for (uint64_t i = 0; i < ARITH_ROUNDS; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		x ^= x >> 33;
	}
	return x;
}

/* uebpf_embed.bpf.c `array_lookup`: values[di] of a 16-entry array (the packet is a struct
 * pt_regs; di is at byte 112). */
#define EMBED_VALUES 16
uint64_t native_embed_values[EMBED_VALUES];

uint64_t native_array_lookup(uint8_t *packet, uint64_t len)
{
	uint64_t index;

	(void)len;
	__builtin_memcpy(&index, packet + 112, sizeof(index));
	return (uint32_t)index < EMBED_VALUES ? native_embed_values[(uint32_t)index] : 0;
}

/* tinycrc 1.2.0 - table-driven CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320).
 * Copyright (c) 2026 OMP NInfer sample authors. SPDX-License-Identifier: MIT */
#include "tinycrc.h"

#define TINYCRC_POLY 0xEDB88320u

/* One table entry: the CRC of the single byte `index` with a zero register. */
static uint32_t tinycrc_entry(uint32_t index)
{
    uint32_t value = index;
    int bit;
    for (bit = 0; bit < 8; ++bit) {
        value = (value & 1u) ? (value >> 1) ^ TINYCRC_POLY : value >> 1;
    }
    return value;
}

static const uint32_t *tinycrc_table(void)
{
    /* Filled once; filling twice from two threads writes the same values. */
    static uint32_t table[256];
    static volatile int ready = 0;
    if (!ready) {
        uint32_t i;
        for (i = 0; i < 256u; ++i) {
            table[i] = tinycrc_entry(i);
        }
        ready = 1;
    }
    return table;
}

uint32_t tinycrc32_update(uint32_t crc, const void *data, size_t len)
{
    const uint32_t *table = tinycrc_table();
    const unsigned char *bytes = (const unsigned char *)data;
    uint32_t reg = ~crc;
    size_t i;
    for (i = 0; i < len; ++i) {
        reg = table[(reg ^ bytes[i]) & 0xFFu] ^ (reg >> 8);
    }
    return ~reg;
}

uint32_t tinycrc32(const void *data, size_t len)
{
    return tinycrc32_update(0u, data, len);
}

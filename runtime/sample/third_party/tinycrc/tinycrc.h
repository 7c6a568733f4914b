/* tinycrc 1.2.0 - table-driven CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320).
 * Copyright (c) 2026 OMP NInfer sample authors. SPDX-License-Identifier: MIT */
#ifndef TINYCRC_H
#define TINYCRC_H

#include <stddef.h>
#include <stdint.h>

#define TINYCRC_VERSION "1.2.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Continue a CRC-32: pass 0 as `crc` for the first chunk, then the previous
 * result for each following chunk. */
uint32_t tinycrc32_update(uint32_t crc, const void *data, size_t len);

/* CRC-32 of one buffer; tinycrc32("123456789", 9) == 0xCBF43926. */
uint32_t tinycrc32(const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TINYCRC_H */

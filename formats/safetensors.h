/* Safetensors read and write (https://github.com/huggingface/safetensors):
 * u64 little-endian header length, a JSON header padded with spaces to a
 * multiple of 8, then the data area; data_offsets are relative to the data
 * area.  The reader validates everything before any tensor is used.
 *
 * Integrity: the writer stores the CRC-32 (zlib's crc32, the gzip/PNG
 * polynomial) of every tensor's bytes in __metadata__, one entry per tensor:
 *     "crc32:<tensor name>": "<8 lowercase hex digits>"
 * The reader verifies every such entry.  A file with no crc32 entries at
 * all (written by another tool, or by attnres 0.1.0) is accepted
 * unverified; a file with some, all of which must then be there and right,
 * is rejected otherwise, naming the tensor. */
#ifndef AR_SAFETENSORS_H
#define AR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

#define AR_ST_MAX_DIMS 8
#define AR_ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference implementation */

typedef struct {
    char *name;
    char dtype[8];          /* "F32", "F64", "I32", ... as in the file */
    int ndim;
    int64_t shape[AR_ST_MAX_DIMS];
    uint64_t begin, end;    /* byte offsets into the data area */
    int has_crc;            /* the file stored (and the reader verified) crc32 */
    uint32_t crc32;
} ar_st_tensor;

#define AR_ST_CRC_PREFIX "crc32:"


typedef struct {
    char *path;
    int n;
    ar_st_tensor *t;
    int nmeta;              /* __metadata__ without the crc32: entries */
    char **meta_key, **meta_val;
    int crc_verified;       /* 1: every tensor's CRC-32 was stored and matched */
    uint8_t *data;          /* the whole data area */
    uint64_t data_size;
} ar_st_file;

/* Reads and validates a whole file.  Rejected, with a message naming the
 * file and the tensor or byte: short/truncated files, header length past the
 * end or above AR_ST_MAX_HEADER, header that is not a JSON object, unknown
 * dtypes, shapes whose byte size disagrees with the offsets, offsets out of
 * the data area, overlapping tensors, gaps/trailing bytes not covered by any
 * tensor, non-string metadata, and (see above) a crc32 entry that names no
 * tensor, is not 8 hex digits or does not match the tensor's bytes, or a
 * tensor without one when others have one. */
int ar_st_read(ar_st_file *f, const char *path, ar_err *e);
void ar_st_free(ar_st_file *f);
const ar_st_tensor *ar_st_find(const ar_st_file *f, const char *name);
const char *ar_st_meta(const ar_st_file *f, const char *key);

/* Copies tensor `name` into dst after checking that it exists, is F32 and has
 * exactly the given shape; errors name the file, the tensor, what was
 * expected and what was found. */
int ar_st_get_f32(const ar_st_file *f, const char *name, const int64_t *shape, int ndim,
                  float *dst, ar_err *e);

typedef struct {
    const char *name;
    const char *dtype;      /* "F32", "I32", "U8", ... */
    int ndim;
    int64_t shape[AR_ST_MAX_DIMS];
    const void *data;       /* little-endian bytes, size = prod(shape)*dtype size */
} ar_st_entry;

/* Writes atomically: PATH.tmp.<pid>, fsync, rename over PATH, fsync the
 * directory.  meta is NULL or a NULL-terminated list key, value, key, value
 * (keys starting with "crc32:" are reserved); the crc32 entries of every
 * tensor follow it.  Tensors are laid out in the given order. */
int ar_st_write(const char *path, const ar_st_entry *t, int n, const char *const *meta, ar_err *e);

/* CRC-32 of n bytes (zlib crc32, any n). */
uint32_t ar_st_crc32(const void *data, uint64_t n);

/* Size in bytes of one element of a safetensors dtype, 0 if unknown. */
int ar_st_dtype_size(const char *dtype);

#endif

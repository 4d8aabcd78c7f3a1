/* Token streams from files.  Raw text (optionally gzip, read through zlib)
 * is byte-level: one token per byte, vocabulary 256.  llm.c/nanoGPT token
 * files: 256 little-endian int32 header ([0] magic, [1] version, [2] token
 * count) then the tokens; magic 20240520 version 1 = uint16 tokens, magic
 * 20240801 version 7 = uint32 tokens.  A token file whose size disagrees with
 * its header is an error, never a silent truncation; so is a file with no
 * tokens. */
#ifndef AR_TOKENS_H
#define AR_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

#define AR_LLMC_MAGIC_U16 20240520
#define AR_LLMC_MAGIC_U32 20240801

typedef struct {
    int32_t *tok;
    size_t n;
    int is_bytes;      /* 1: raw text, vocabulary 256 */
    int32_t max_token; /* largest id present (-1 if empty) */
} ar_tokens;

/* Loads a file (format detected from content: a leading llm.c magic means a
 * token file, anything else is text; ".gz" is decompressed first).  The
 * error's kind: AR_ERR_NOT_FOUND or AR_ERR_IO when it cannot be opened or
 * read, AR_ERR_FORMAT when it is empty, corrupt gzip data or a token file
 * whose header does not match its contents. */
int ar_tokens_load(ar_tokens *t, const char *path, ar_err *e);
void ar_tokens_free(ar_tokens *t);

/* Writes an llm.c token file (u32 = 0: uint16 layout, else uint32 layout). */
int ar_tokens_write_llmc(const char *path, const int32_t *tok, size_t n, int u32, ar_err *e);

#endif

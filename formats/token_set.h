/* A token set: the tokens of one file, a directory of shards or a glob of
 * shards, read in place through read-only memory maps, never copied whole.
 *
 *   spec                  the shards
 *   a regular file        that file alone
 *   a directory           every regular file in it whose name does not start
 *                         with '.', in name order (strcmp)
 *   a pattern with * ? [  every regular file glob(3) matches, in name order
 *
 * Formats, told apart by content (formats/tokens.h has the headers):
 *   llm.c uint16 shards   256 x int32 little-endian header: magic 20240520,
 *                         version 1, token count; then uint16 tokens
 *   uint32 shards         the same header with magic 20240801, version 7;
 *                         then uint32 tokens (vocabularies over 65,535)
 *   text                  anything else: one token per byte (ids 0..255);
 *                         gzip text is inflated into memory, being
 *                         unmappable (keep large text sets uncompressed)
 * All shards of a set share one format.
 *
 * The set is one stream: its shards concatenated in order, indexed from 0
 * to ar_token_set_count() - 1.  Opening reads each shard's header and size,
 * never its tokens, so it takes the same time for 10 MB and for 100 GB;
 * ids are checked as they are read (ar_token_set_read), or all at once by
 * ar_token_set_check.  Every process that opens the same files shares
 * their pages through the page cache.
 *
 * Errors name the shard and, where it applies, the byte or token offset:
 * an empty glob or directory, a shard that is empty, truncated or longer
 * than its header says, a wrong magic or version, mixed formats, an id not
 * below the limit. */
#ifndef AR_TOKEN_SET_H
#define AR_TOKEN_SET_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef struct ar_token_set ar_token_set;

typedef enum {
    AR_TOKENS_TEXT = 1, /* one byte a token */
    AR_TOKENS_U16 = 2,  /* llm.c's uint16 shards */
    AR_TOKENS_U32 = 4,  /* the uint32 variant */
} ar_token_format;

/* "text", "uint16" or "uint32", as messages and `attnres data check` name
 * a format. */
const char *ar_token_format_name(ar_token_format f);

/* Opens the set named by spec (above).  NULL with e set: AR_ERR_NOT_FOUND
 * where spec names nothing (no such file, an empty directory or a glob that
 * matches nothing), AR_ERR_FORMAT for a malformed shard or mixed formats,
 * AR_ERR_IO where a shard cannot be read. */
ar_token_set *ar_token_set_open(const char *spec, ar_err *e);

/* A set over tokens already in memory (n int32 ids, borrowed: they must
 * outlive the set), named `name` in messages: one shard of format U32. */
ar_token_set *ar_token_set_wrap(const int32_t *tok, size_t n, const char *name);

void ar_token_set_free(ar_token_set *ts); /* NULL: nothing */

size_t ar_token_set_count(const ar_token_set *ts); /* tokens in all shards */
ar_token_format ar_token_set_format(const ar_token_set *ts);
int ar_token_set_shards(const ar_token_set *ts);
const char *ar_token_set_shard_path(const ar_token_set *ts, int i);
/* Stream index of shard i's first token; i = ar_token_set_shards(): the
 * count. */
size_t ar_token_set_shard_first(const ar_token_set *ts, int i);

/* Copies tokens [off, off + n) of the stream into out as int32 (a window may
 * span shards).  With limit > 0 every id must be below it, else AR_ERR_FORMAT
 * naming the shard, the token's offset in it and the id ("'SHARD': token
 * 1234 has id 70000 but the vocabulary holds 50257 ids").  off + n beyond
 * the count is a caller's error: AR_ERR_OTHER. */
int ar_token_set_read(const ar_token_set *ts, size_t off, size_t n, int32_t limit, int32_t *out, ar_err *e);

/* A full pass over every token: the largest id in *max_id, and with
 * limit > 0 the first id not below it as an error (as ar_token_set_read).
 * progress (may be NULL) is called now and then with the tokens done and
 * the total. */
typedef void (*ar_token_progress)(void *ud, size_t done, size_t total);
int ar_token_set_check(const ar_token_set *ts, int32_t limit, int32_t *max_id, ar_token_progress progress, void *ud,
                       ar_err *e);

/* A fingerprint of the set that costs no pass over its tokens: CRC-32 over
 * each shard's token count and its first and last 4 KiB of tokens (the
 * whole shard where shorter), in order.  A resumed run compares it (with
 * the count) to tell a changed data set. */
uint32_t ar_token_set_fingerprint(const ar_token_set *ts);

#endif

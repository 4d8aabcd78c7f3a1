/* The parts of attnres tokenize's encoding (cmd/tokenize*.c):
 *
 *   tokenize.c         the command line, --decode, one token file
 *   tokenize_encode.c  one text -> its ids, in chunks on several threads,
 *                      and the progress line
 *   tokenize_shards.c  the ids -> llm.c's numbered shards in a directory
 */
#ifndef AR_CMD_TOKENIZE_H
#define AR_CMD_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/clock.h"
#include "../core/error.h"
#include "../formats/bpe.h"

/* Where encoded ids go, in order: 0, or -1 with e set. */
typedef int (*tok_put_fn)(void *ud, const int32_t *ids, size_t n, ar_err *e);

/* The progress of a whole run, on stderr: a line rewritten in place while
 * stderr is a terminal, and one summary line at the end in any case. */
typedef struct {
    int tty;
    double start, shown; /* ar_now_s() at the start and at the last line */
    size_t bytes;        /* text bytes encoded so far */
    size_t tokens;       /* ids handed on so far (--eot's included) */
    double encode_s;     /* time spent encoding alone */
} tok_progress;

void tok_progress_start(tok_progress *p);
/* Clears the in-place line (if any) and prints "tokenize: <summary>"
 * (summary NULL: nothing, before an error). */
void tok_progress_end(tok_progress *p, const char *summary);

/* text[0..len), the file name's from its byte base on, encoded on
 * `threads` threads and handed to put in the text's order; p counts the
 * bytes and ids.  The ids are those of ar_bpe_encode on the whole text for
 * any thread count (tokenize_encode.c says why).  0, or -1 with e set
 * (naming the file and the byte, counted from the file's start). */
int tok_encode(const ar_bpe *b, const char *name, size_t base, const char *text, size_t len, int threads,
               tok_put_fn put, void *ud, tok_progress *p, ar_err *e);

/* The last safe place to cut text[0..len) (tokenize_encode.c's rule 1: the
 * pieces on either side are those of the whole), 2 <= p < len, or 0 where
 * there is none. */
size_t tok_last_cut(const char *text, size_t len);

/* ------------------------------------------------------------ shards */

/* llm.c's layout: DIR/val_000000.bin (the first val_tokens ids, when
 * val_tokens > 0), then DIR/train_000001.bin, train_000002.bin, ... of
 * shard_tokens ids each, the last shorter.  A shard is written (atomically)
 * once the first id of the next one arrives, or at the end. */
typedef struct {
    const char *dir;
    size_t val_tokens, shard_tokens;
    int u32; /* llm.c's uint32 layout */
    int32_t *buf;
    size_t n, cap;   /* ids in buf, and its room */
    int shard;       /* the shard being filled: 0 the val shard, then 1, 2, ... */
    int first;       /* the first shard: 0 with a val shard, else 1 */
    int written;     /* shards written: first .. first + written - 1 */
    size_t total;    /* ids handed to the shards */
} tok_shards;

void tok_shards_init(tok_shards *s, const char *dir, size_t val_tokens, size_t shard_tokens, int u32);
/* A tok_put_fn; ud is the tok_shards. */
int tok_shards_put(void *ud, const int32_t *ids, size_t n, ar_err *e);
/* Writes the last shard.  Refused (-1, nothing more written) when every id
 * went to the val shard: then no train shard would exist. */
int tok_shards_finish(tok_shards *s, ar_err *e);
/* Removes the shards of an earlier run in the same directory that this
 * one did not write over (a longer run's later train shards, a val shard
 * when this run has none), so that DIR/train_*.bin is this run's alone;
 * their count. */
int tok_shards_remove_stale(const tok_shards *s);
/* "DIR/val_000000.bin to DIR/train_000003.bin were written" or "no shard
 * was written", for the message of a run that failed midway. */
void tok_shards_done(const tok_shards *s, char *out, size_t cap);
void tok_shards_free(tok_shards *s);

#endif

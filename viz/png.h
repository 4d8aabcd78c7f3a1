/* PNG encoding with libpng: 8-bit RGB, text chunks, written atomically
 * (core/atomic.h: temporary file, fsync, rename). */
#ifndef AR_VIZ_PNG_H
#define AR_VIZ_PNG_H

#include <stdint.h>

#include "../core/error.h"

typedef struct {
    const char *key;  /* 1..79 Latin-1 characters, e.g. "Title", "attnres:run" */
    const char *text; /* tEXt when it is ASCII, else an uncompressed iTXt (UTF-8) */
} ar_png_text;

/* Writes a w x h image whose pixels are native-endian 32-bit words with red,
 * green and blue in bits 23..16, 15..8 and 7..0 (cairo's RGB24 and ARGB32
 * layouts; the top byte is ignored), row y at
 * pixels + y * stride bytes, as an 8-bit RGB PNG with the text chunks
 * before the image data. */
int ar_png_write(const char *path, const unsigned char *pixels, int w, int h, int stride,
                 const ar_png_text *text, int ntext, ar_err *e);

#endif

/* The PNG encoder (png.h).  libpng reports errors by longjmp; the jump
 * lands in fill(), which turns it into errno = EIO for ar_write_atomic. */
#include "png.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/atomic.h"

typedef struct {
    const unsigned char *px;
    int w, h, stride;
    const ar_png_text *text;
    int ntext;
    char why[200]; /* libpng's own message of a failure */
} job;

static void on_error(png_structp png, png_const_charp msg)
{
    job *j = png_get_error_ptr(png);
    snprintf(j->why, sizeof j->why, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (e.g. about text) change nothing in the file */
}

static int is_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80)
            return 0;
    return 1;
}

/* One RGB row from 32-bit words holding red, green, blue in bits 23..0 (the top byte ignored). */
static void to_rgb(const unsigned char *src, int w, unsigned char *dst)
{
    const uint32_t *p = (const uint32_t *)(const void *)src;
    for (int x = 0; x < w; x++) {
        uint32_t v = p[x];
        dst[3 * x] = (unsigned char)(v >> 16);
        dst[3 * x + 1] = (unsigned char)(v >> 8);
        dst[3 * x + 2] = (unsigned char)v;
    }
}

static int fill(FILE *f, void *ud)
{
    job *j = ud;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, j, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* volatile: modified between setjmp and a possible longjmp */
    unsigned char *volatile row = NULL;
    png_textp volatile tx = NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        errno = ENOMEM;
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(row);
        free(tx);
        errno = EIO;
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)j->w, (png_uint_32)j->h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    tx = calloc((size_t)j->ntext + 1, sizeof *tx);
    if (!tx)
        png_error(png, "out of memory");
    for (int i = 0; i < j->ntext; i++) {
        tx[i].key = (png_charp)j->text[i].key;
        tx[i].text = (png_charp)j->text[i].text;
        tx[i].compression = is_ascii(j->text[i].text) ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
    }
    png_set_text(png, info, tx, j->ntext);
    /* Figures are flat colours and thin lines: no row filter and zlib level
     * 3 encode them several times faster than libpng's defaults (every
     * filter tried on every row, then level 6), for 0-25% more bytes. */
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
    png_set_compression_level(png, 3);
    png_write_info(png, info);
    row = malloc((size_t)j->w * 3);
    if (!row)
        png_error(png, "out of memory");
    for (int y = 0; y < j->h; y++) {
        to_rgb(j->px + (size_t)y * (size_t)j->stride, j->w, row);
        png_write_row(png, row);
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(row);
    free(tx);
    return 0;
}

int ar_png_write(const char *path, const unsigned char *pixels, int w, int h, int stride,
                 const ar_png_text *text, int ntext, ar_err *e)
{
    if (w <= 0 || h <= 0)
        return ar_fail(e, "cannot write '%s': the image is empty (%d x %d)", path, w, h);
    for (int i = 0; i < ntext; i++) {
        size_t k = strlen(text[i].key);
        if (k == 0 || k > 79)
            return ar_fail(e, "cannot write '%s': PNG text key '%s' must have 1 to 79 characters", path,
                           text[i].key);
    }
    job j = {.px = pixels, .w = w, .h = h, .stride = stride, .text = text, .ntext = ntext};
    if (ar_write_atomic(path, fill, &j, e) != 0) {
        if (j.why[0]) /* the encoder failed, not the file system */
            ar_fail(e, "cannot write '%s': libpng: %s", path, j.why);
        return -1;
    }
    return 0;
}

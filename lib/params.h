/* The parameter table: every learned tensor's name (docs/reference.md §3),
 * shape, initialisation and place in the single parameter buffer.  The same
 * offsets index the gradient buffer and the optimizer's moment buffers, so
 * all of them are laid out once, before anything is allocated. */
#ifndef AR_PARAMS_H
#define AR_PARAMS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { AR_INIT_NORMAL, AR_INIT_ZEROS, AR_INIT_ONES } ar_init_kind;

typedef struct {
    char name[96];
    int ndim;           /* 1 or 2 */
    int64_t shape[2];   /* [out, in] for matrices, as nn.Linear */
    size_t offset;      /* in floats, multiple of 16 (64-byte alignment) */
    size_t numel;
    ar_init_kind init;
    float std;          /* for AR_INIT_NORMAL */
    int decay;          /* 1: AdamW weight decay applies (2-D weight matrices) */
    float lr_scale;     /* AdamW's learning rate is train.lr's schedule times this (1) */
    int group;          /* sublayer it belongs to (1..L), 0 = embedding, L+1 = head/final */
} ar_param;

typedef struct {
    ar_param *p;
    int n, cap;
    size_t total;       /* floats, including alignment padding */
} ar_param_table;

/* Appends a tensor and returns its index.  d1 = 0 for a vector. */
int ar_params_add(ar_param_table *t, const char *name, int64_t d0, int64_t d1, ar_init_kind init,
                  float std, int group);
int ar_params_find(const ar_param_table *t, const char *name);
void ar_params_free(ar_param_table *t);

#endif

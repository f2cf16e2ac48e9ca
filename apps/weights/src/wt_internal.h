/* Internal helpers shared by libte-weights' files (not installed). */
#ifndef TE_WT_INTERNAL_H
#define TE_WT_INTERNAL_H

#include <errno.h>
#include "te/weights.h"

/* Record the thread's last error and return err (a negative errno). */
int wt_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wt_error_clear(void);

/* Overflow-checked a * b; 0 on success. */
static inline int wt_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* Elements of a tensor (product of the shape). */
uint64_t wt_elements(const te_wt_tensor *t);

/* Append a tensor to a model under construction (capacity doubles). */
int wt_model_push(te_wt_model *m, uint32_t *cap, const char *name,
                  te_wt_dtype dt, uint32_t ndim, const uint64_t *shape);



/* Bytes of the checkpoint tensors param p is made of. */
uint64_t wt_param_input_bytes(const te_wt_model *m, const te_wt_sharding *s,
                              uint32_t p);
/* Bytes trainer t reads from the others to gather param p. */
uint64_t wt_gather_bytes(const te_wt_model *m, const te_wt_sharding *s,
                         uint32_t p, uint32_t trainers, uint32_t t);
/* Whether write w starts a new param in its trainer's order (the trainer
 * gathers that param's tensors before it). */
int wt_gathers(const te_wt_sharding *sh, const te_wt_schedule *s, uint64_t w);
#endif

// Where the heads of an attention input lie (plain C, no CUDA headers: the
// tensor-core kernels' host emulation includes it too).
#ifndef WEFT_CU_ATTENTION_HEADS_H
#define WEFT_CU_ATTENTION_HEADS_H

#include <stdint.h>

// Element (b, h, t, d) of a (B,H,T,D) input at b*sb + h*sh + t*st + d
// (elements), head bh = b*H + h. Contiguous (BH,T,D): H = 1, sb = T*D,
// sh = 0, st = D. The heads of a (B,T,C) tensor viewed as (B,H,T,D):
// sb = T*C, sh = D, st = C.
typedef struct weft_cu_heads {
    int64_t H, sb, sh, st;
} weft_cu_heads;

#endif

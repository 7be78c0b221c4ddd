// Internal structures of the kernel generator (src/kgen): the definition
// (kgen.c), its schedules (schedule.c), C generation and loading (codegen.c)
// and the auto-tuner (tune.c).
#ifndef WEFT_KGEN_IMPL_H
#define WEFT_KGEN_IMPL_H

#include <weft/kgen.h>

#include "../core/core_impl.h"

typedef enum kg_kind { KG_CONST, KG_AXIS, KG_LOAD, KG_BIN, KG_UN, KG_ACC } kg_kind;

struct weft_kg_expr {
    const weft_kg *owner; // the definition that made it (and frees it)
    kg_kind kind;
    weft_kg_op op;      // KG_BIN, KG_UN
    double c;           // KG_CONST; KG_LOAD with pad: the pad value
    int id;             // KG_AXIS: the axis; KG_LOAD: the tensor (an input, or WEFT_KG_MAX_INPUTS + a stage)
    bool pad;           // KG_LOAD: out-of-range indices read c
    bool is_int;        // an integer expression (axes, integer constants, + - *)
    int n;              // children: a load's indices, an op's operands
    weft_kg_expr *a[WEFT_MAX_DIMS];
};

typedef struct kg_input {
    char name[32];
    int ndim;
    int64_t size[WEFT_MAX_DIMS];
} kg_input;

typedef struct kg_axis {
    char name[32];
    int64_t ext;
    bool reduce;
    int stage;          // the stage that owns it: 0.. a weft_kg_stage, KG_MAIN the output; -1 none yet
} kg_axis;

#define KG_MAX_STAGES 4
#define KG_MAIN KG_MAX_STAGES
#define KG_MAX_AXIS (2 * WEFT_KG_MAX_AXES * (KG_MAX_STAGES + 1))

// An intermediate stage (weft_kg_stage): a tensor computed like the output, read by later stages' loads.
typedef struct kg_stage {
    char name[32];
    int n_out;
    int out_axis[WEFT_KG_MAX_AXES];
    int64_t size[WEFT_KG_MAX_AXES];
    weft_kg_reduce red;
    weft_kg_expr *body, *epi;
} kg_stage;

struct weft_kg {
    char name[32];
    int n_in, n_axis;
    kg_input in[WEFT_KG_MAX_INPUTS];
    kg_axis axis[KG_MAX_AXIS];
    int n_stage;
    kg_stage stage[KG_MAX_STAGES];
    bool defined;                       // weft_kg_compute succeeded
    int n_out;
    int out_axis[WEFT_KG_MAX_AXES];     // axis ids, in the output's order
    weft_kg_reduce red;
    weft_kg_expr *body, *epi;           // epi NULL: acc
    weft_kg_expr **nodes;               // every expression, freed with the definition
    int n_nodes, cap_nodes;
};

// Expressions are trees over shared nodes; expanded into a tree, one may have at most this many nodes
// (every walk of it, the checks, the reference and the generated code, is linear in that).
#define KG_MAX_TREE 100000

enum { KG_ANN_NONE, KG_ANN_UNROLL, KG_ANN_VEC, KG_ANN_PAR };

// Where a stage is computed: into a buffer before the output's loops, into a local buffer at a loop (compute_at),
// or at each of its reads (inline).
enum { KG_ROOT, KG_AT, KG_INLINE };

typedef struct kg_loop {
    char name[48];
    int axis;           // the axis this loop walks part of
    int64_t ext;        // trip count
    int64_t stride;     // axis value = sum over the axis's live loops of var * stride
    int ann;
    bool live;          // false once split
    int child[2];       // once split: its outer and inner loops
} kg_loop;

struct weft_kg_sched {
    const weft_kg *kg;
    int n_loops;
    kg_loop loop[WEFT_KG_MAX_LOOPS];
    int n_order;
    int order[WEFT_KG_MAX_LOOPS];       // the live loops, outermost first
    int cache_at;                       // loop of the local accumulator, -1: none
    int tensor_at;                      // tensorize: the loop the micro-kernel replaces (with all inside it); -1 none
    int place[KG_MAX_STAGES];           // KG_ROOT, KG_AT, KG_INLINE
    int at[KG_MAX_STAGES];              // KG_AT: the loop
    int read_at[WEFT_KG_MAX_INPUTS];    // cache_read: the loop where the input's region is copied; -1: none
};

// A split loop l whose factor leaves a tail: its live descendants' values sum past its extent, so the
// code guards sum(var * stride) / l's stride < l's extent where the last of them opens.
bool kg_split_has_tail(const weft_kg_sched *s, int l);
// The live loops l splits into (l itself when live), as positions in the order; returns the count.
int kg_leaf_positions(const weft_kg_sched *s, int l, int *pos);
// Position of loop l in the order, -1 if not there.
int kg_pos(const weft_kg_sched *s, int l);
// Checks the annotations and the cache placement against the order (done before code is generated).
weft_status kg_sched_check(const weft_kg_sched *s);
// FNV-1a over n bytes, from h (KG_FNV_SEED to start).
#define KG_FNV_SEED 0xcbf29ce484222325ull
uint64_t kg_fnv(uint64_t h, const void *p, size_t n);
// A hash of the definition (name, inputs, axes, expressions): the tuning log's key.
uint64_t kg_def_hash(const weft_kg *kg);
// A tensor's (input's or stage's) name, dims and sizes; a stage's handle is WEFT_KG_MAX_INPUTS + its index.
const char *kg_tname(const weft_kg *kg, int t);
int kg_tdims(const weft_kg *kg, int t, const int64_t **size);
static inline bool kg_is_stage(int t) { return t >= WEFT_KG_MAX_INPUTS; }
// An integer expression as c0 + sum coef[axis] * axis; false if it multiplies axes together.
bool kg_affine(const weft_kg_expr *e, int64_t *coef, int64_t *c0);
// Whether e reads tensor t (with s: also through the stages s inlines).
bool kg_reads(const weft_kg_sched *s, const weft_kg_expr *e, int t);
// Stage t may live in a loop's local buffer: no stage computed at root or inlined reads it.
weft_status kg_check_local(const weft_kg_sched *s, int t);
// Number of elements of the output / of input i.
int64_t kg_out_numel(const weft_kg *kg);
int64_t kg_in_numel(const weft_kg *kg, int i);

#endif

// HMMER 3.4's state paths as the tail builds them (src/p7_trace.c): p7_trace_Append,
// p7_trace_AppendWithPP and p7_trace_Reverse (tests/oracle/trace.py).
//
// Thread → data: one thread builds one trace in arrays its caller sized. States are HMMER's
// one-letter names ('S', 'N', 'B', 'M', 'D', 'I', 'E', 'J', 'C', 'T'). No arithmetic.
#pragma once
#include "common.cuh"

namespace gpuhmm::tail {

struct Trace {
    int n, capacity;
    char *st;
    int *k, *i;
    float *pp;  // posteriors, or null for a trace without them
};

TAIL_FN int is_looping_state(char state) { return state == 'N' || state == 'C' || state == 'J'; }

TAIL_FN Trace trace_alloc(Arena *arena, int capacity, int with_posteriors) {
    Trace tr;
    tr.n = 0;
    tr.capacity = capacity;
    tr.st = (char *)arena_alloc(arena, capacity);
    tr.k = (int *)arena_alloc(arena, sizeof(int) * capacity);
    tr.i = (int *)arena_alloc(arena, sizeof(int) * capacity);
    tr.pp = with_posteriors ? (float *)arena_alloc(arena, sizeof(float) * capacity) : 0;
    return tr;
}

// p7_trace_Append(WithPP) after `previous` (the state appended last, 0 for none; the caller
// keeps it, so the step does not read back what it just wrote): N, C and J record i (and pp) only
// when they loop; M and I record k and i; D records k. Returns 0 when the trace is full.
TAIL_FN int trace_append(Trace *tr, char previous, char state, int k, int i, float pp) {
    if (tr->n == tr->capacity) return 0;
    int looping = is_looping_state(state) && previous == state;
    int emits = state == 'M' || state == 'I' || looping;
    int has_node = state == 'M' || state == 'I' || state == 'D';
    tr->st[tr->n] = state;
    tr->k[tr->n] = has_node ? k : 0;
    tr->i[tr->n] = emits ? i : 0;
    if (tr->pp) tr->pp[tr->n] = emits ? pp : 0.0f;
    tr->n++;
    return 1;
}

// p7_trace_Reverse: each N/C/J residue moves to the first step of its looping pair (tracebacks
// record it on the second), then the steps reverse.
TAIL_FN void trace_reverse(Trace *tr) {
    for (int z = 0; z + 1 < tr->n; z++) {
        if (is_looping_state(tr->st[z]) && tr->st[z + 1] == tr->st[z] && tr->i[z] == 0 && tr->i[z + 1] > 0) {
            tr->i[z] = tr->i[z + 1];
            tr->i[z + 1] = 0;
            if (tr->pp) {
                tr->pp[z] = tr->pp[z + 1];
                tr->pp[z + 1] = 0.0f;
            }
        }
    }
    for (int a = 0, b = tr->n - 1; a < b; a++, b--) {
        char st = tr->st[a];
        tr->st[a] = tr->st[b];
        tr->st[b] = st;
        int k = tr->k[a];
        tr->k[a] = tr->k[b];
        tr->k[b] = k;
        int i = tr->i[a];
        tr->i[a] = tr->i[b];
        tr->i[b] = i;
        if (tr->pp) {
            float pp = tr->pp[a];
            tr->pp[a] = tr->pp[b];
            tr->pp[b] = pp;
        }
    }
}

}  // namespace gpuhmm::tail

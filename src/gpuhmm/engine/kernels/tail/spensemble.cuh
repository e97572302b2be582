// HMMER 3.4's clustering of sampled domains into envelopes (src/p7_spensemble.c:
// p7_spensemble_Add's segment list, link_spsamples, p7_spensemble_Cluster) with Easel's
// single-linkage clustering (easel/esl_cluster.c: esl_cluster_SingleLinkage) replayed exactly:
// the cluster numbers decide the order of envelopes that start at the same residue. Translated
// from tests/oracle/spensemble.py.
//
// Thread → data: a warp clusters the segments of one region: its lanes test the links of 32
// stack positions at once (the O(n²) part, computed when needed rather than stored); lane 0
// applies them in Easel's order and does the rest. No vector lanes.
//
// Rounding: overlaps are float32 divisions of (float) ints compared with 0.8f; a cluster's
// probability is (float) ninc / (float) nsamples against 0.25f; the endpoint threshold is the
// ceiling of the float32 product (float) ninc · 0.02f. Integers are exact.
//
// Order: envelopes by start residue, ties in cluster order (glibc's qsort on these small arrays
// is a stable merge sort; a stable insertion sort here gives the same order).
#pragma once
#include "common.cuh"
#include "lanegroup.cuh"

namespace gpuhmm::tail {

// p7_domaindef_Create's clustering parameters (hmmsearch never changes them).
TAIL_CONST float SPE_MIN_OVERLAP = 0.8f;
TAIL_CONST int SPE_MAX_DIAGONAL_DIFFERENCE = 4;
TAIL_CONST float SPE_MIN_POSTERIOR = 0.25f;
TAIL_CONST float SPE_MIN_ENDPOINT_FRACTION = 0.02f;

// A significant cluster (sp->sigc): consensus sequence i..j and model k..m, the cluster's number
// from the single linkage, and its posterior probability (reference Envelope, field for field).
struct Envelope {
    int i, j, k, m, cluster;
    float prob;
};

// The sampled domains of one region (sp->sp) as parallel arrays, in the order they were added.
struct Segments {
    const int *sample, *i, *j, *k, *m;
    int n;
};

TAIL_FN int spe_abs(int x) { return x < 0 ? -x : x; }
TAIL_FN int spe_min(int a, int b) { return a < b ? a : b; }
TAIL_FN int spe_max(int a, int b) { return a > b ? a : b; }

// Whether [s1, e1] and [s2, e2] overlap by at least 80% of the shorter: the negation of
// (float) overlap / (float) shorter < 0.8f (so a NaN ratio links, as it does in the reference).
// The sequence test adds 1 to the overlap, the model test does not (HMMER's asymmetry).
TAIL_FN int spe_overlapping(int s1, int e1, int s2, int e2, int plus_one) {
    int overlap = spe_min(e1, e2) - spe_max(s1, s2) + (plus_one ? 1 : 0);
    int shorter = spe_min(e1 - s1 + 1, e2 - s2 + 1);
    return !((float)overlap / (float)shorter < SPE_MIN_OVERLAP);
}

// link_spsamples for segments a and b: overlapping in sequence and model, and on nearby
// diagonals at the start or at the end.
TAIL_FN int spe_linked(const Segments *s, int a, int b) {
    int near = spe_abs((s->i[a] - s->k[a]) - (s->i[b] - s->k[b])) <= SPE_MAX_DIAGONAL_DIFFERENCE ||
               spe_abs((s->j[a] - s->m[a]) - (s->j[b] - s->m[b])) <= SPE_MAX_DIAGONAL_DIFFERENCE;
    return spe_overlapping(s->i[a], s->j[a], s->i[b], s->j[b], 1) &&
           spe_overlapping(s->k[a], s->m[a], s->k[b], s->m[b], 0) && near;
}

// esl_cluster_SingleLinkage by the warp w: each segment's cluster number into assignment[n], their
// count into *nclusters. Easel keeps a stack of unclustered vertices (n − 1 .. 0, top last), deletes
// a vertex by moving the top into its place, and tests the remaining positions top down; positions
// below the one tested are untouched and the top moved down was tested already, so the lanes test
// 32 positions at once and lane 0 then deletes the linked ones, top down.
TAIL_FN int spe_single_linkage(const Warp &w, const Segments *s, Arena *scratch, int *assignment, int *nclusters) {
    int n = s->n;
    int *available = (int *)arena_alloc(scratch, sizeof(int) * (n > 0 ? n : 1));
    int *pending = (int *)arena_alloc(scratch, sizeof(int) * (n > 0 ? n : 1));
    if (!available || !pending) return TAIL_CAPACITY;
    for (int p = w.lane; p < n; p += w.width) available[p] = n - 1 - p;
    w.sync();
    int remaining = n, clusters = 0;
    while (remaining > 0) {
        remaining--;
        int npending = 0;
        if (w.lane == 0) pending[0] = available[remaining];
        npending++;
        while (npending > 0) {
            w.sync();
            int v = pending[--npending];
            if (w.lane == 0) assignment[v] = clusters;
            for (int top = remaining - 1; top >= 0; top -= w.width) {
                const int p = top - w.lane;
                unsigned linked = w.ballot(p >= 0 && spe_linked(s, v, available[p]));
                w.sync();
                for (; linked; linked &= linked - 1) {  // lane l is position top − l: top down
                    const int at = top - lowest_lane(linked);
                    if (w.lane == 0) {
                        pending[npending] = available[at];  // each vertex is pushed once: npending ≤ n
                        available[at] = available[remaining - 1];
                    }
                    npending++, remaining--;
                }
                w.sync();
            }
        }
        clusters++;
    }
    *nclusters = clusters;
    return TAIL_OK;
}

// The leftmost (or rightmost) value reached by at least `threshold` of the members' `values`,
// else the first most frequent one (esl_vec_IArgMax): HMMER's histogram over low..high.
TAIL_FN int spe_endpoint(const int *values, const int *members, int count, int threshold, int leftmost,
                         Arena *scratch, int *out) {
    int low = values[members[0]], high = low;
    for (int z = 1; z < count; z++) {
        low = spe_min(low, values[members[z]]);
        high = spe_max(high, values[members[z]]);
    }
    tail_size_t mark = scratch->used;
    int width = high - low + 1;
    int *counts = (int *)arena_alloc(scratch, sizeof(int) * width);
    if (!counts) return TAIL_CAPACITY;
    for (int x = 0; x < width; x++) counts[x] = 0;
    for (int z = 0; z < count; z++) counts[values[members[z]] - low]++;
    int found = -1;
    for (int x = 0; x < width; x++) {
        if (counts[x] >= threshold) {
            found = x;
            if (leftmost) break;
        }
    }
    if (found < 0) {
        found = 0;
        for (int x = 1; x < width; x++)
            if (counts[x] > counts[found]) found = x;
    }
    *out = low + found;
    scratch->used = mark;
    return TAIL_OK;
}

// ceilf for the small non-negative thresholds here (no C library under NVRTC).
TAIL_FN int spe_ceil(float x) {
    int t = (int)x;
    return (float)t < x ? t + 1 : t;
}

// p7_spensemble_Cluster by the warp w: the significant envelopes of the n segments (parallel
// arrays, in the order added; `sample` non-decreasing) of `nsamples` sampled traces, into
// out[0 .. *count), by start residue, ties in cluster order; in lane 0 (the other lanes return
// after the linkage). Scratch comes from `scratch` and is given back on return. TAIL_CAPACITY when
// the scratch or `capacity` runs out (*count is then unspecified).
TAIL_FN int cluster(const Warp &w, const int *sample, const int *i, const int *j, const int *k, const int *m, int n,
                    int nsamples, Arena *scratch, Envelope *out, int capacity, int *count) {
    *count = 0;
    if (n <= 0) return TAIL_OK;
    Segments s;
    s.sample = sample;
    s.i = i;
    s.j = j;
    s.k = k;
    s.m = m;
    s.n = n;
    tail_size_t mark = scratch->used;
    int status = TAIL_CAPACITY, clusters = 0;
    int *assignment = (int *)arena_alloc(scratch, sizeof(int) * n);
    int *members = (int *)arena_alloc(scratch, sizeof(int) * n);
    int *first = (int *)arena_alloc(scratch, sizeof(int) * (n + 1));
    if (!assignment || !members || !first) goto done;
    status = spe_single_linkage(w, &s, scratch, assignment, &clusters);
    if (status != TAIL_OK || w.lane != 0) goto done;
    // Members of each cluster in segment order (a counting sort): cluster c is
    // members[first[c] .. first[c + 1]).
    for (int c = 0; c <= clusters; c++) first[c] = 0;
    for (int v = 0; v < n; v++) first[assignment[v] + 1]++;
    for (int c = 0; c < clusters; c++) first[c + 1] += first[c];
    for (int v = 0; v < n; v++) members[first[assignment[v]]++] = v;
    for (int c = clusters; c > 0; c--) first[c] = first[c - 1];
    first[0] = 0;
    for (int c = 0; c < clusters; c++) {
        const int *mine = members + first[c];
        int size = first[c + 1] - first[c];
        int ninc = 1;  // distinct samples: changes of sample number along the members
        for (int z = 1; z < size; z++) ninc += sample[mine[z]] != sample[mine[z - 1]];
        float prob = (float)ninc / (float)nsamples;
        if (prob < SPE_MIN_POSTERIOR) continue;
        int threshold = spe_ceil((float)ninc * SPE_MIN_ENDPOINT_FRACTION);
        Envelope e;
        status = spe_endpoint(i, mine, size, threshold, 1, scratch, &e.i);
        if (status == TAIL_OK) status = spe_endpoint(k, mine, size, threshold, 1, scratch, &e.k);
        if (status == TAIL_OK) status = spe_endpoint(j, mine, size, threshold, 0, scratch, &e.j);
        if (status == TAIL_OK) status = spe_endpoint(m, mine, size, threshold, 0, scratch, &e.m);
        if (status != TAIL_OK) goto done;
        if (e.i > e.j || e.k > e.m) continue;
        if (*count == capacity) {
            status = TAIL_CAPACITY;
            goto done;
        }
        e.cluster = c;
        e.prob = prob;
        // Stable insertion by start residue: after every envelope that starts at or before it.
        int at = *count;
        while (at > 0 && out[at - 1].i > e.i) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = e;
        (*count)++;
    }
    status = TAIL_OK;
done:
    scratch->used = mark;
    return status;
}

}  // namespace gpuhmm::tail

// HMMER 3.4's stochastic traceback (impl_sse/stotrace.c: p7_StochasticTrace with its select_m,
// select_d, select_i, select_e, select_c, select_j and select_b) and the Easel pieces it draws
// with: the fast generator (easel/esl_random.c: esl_randomness_CreateFast, esl_randomness_Init,
// esl_random, esl_mix3), esl_vec_FNorm (easel/esl_vectorops.c) and esl_rnd_FChoose
// (easel/esl_random.c). Translated from tests/oracle/stotrace.py and tests/oracle/trace.py's
// traced_back.
//
// Thread → data: one thread samples the traces of one region, serially, from one generator (the
// draws are a single sequence, so nothing here can be split across threads); a sink takes each
// step (domaindef.cuh's SampledDomains; the tests keep the whole path). Lane width: the
// Forward matrix rows are striped, 4 float32 lanes a vector, each node's M, D and I one 16-byte
// cell and its transitions two vectors, so that a step reads one of each; select_e walks a row
// in striped order (q outer; M's 4 lanes, then D's 4 lanes).
//
// Rounding: each predecessor weight is one float32 product of a Forward cell and a transition
// (C/J's E weight: (E(i) · t) · scale(i), left to right); FNorm is a Kahan float32 sum then one
// float32 division per weight; FChoose sums the float weights in double and tests each cumulative
// sum over the total, an IEEE double quotient (below_quotient divides only near the draw). Both
// run only where the raw weights' double sums leave the choice within a margin (fchoose_raw).
// select_e multiplies each cell by the float32 1/E(i) (a float32 product) and accumulates in
// double, testing the draw once a vector (the total never falls). Draws are x / 2^32 in double
// after the uint32 step x ← 69069·x + 1.
#pragma once
#include "common.cuh"
#include "trace.cuh"

namespace gpuhmm::tail {

// Easel's fast generator (eslRND_FAST): its seed and its current 32-bit state.
struct Randomness {
    tail_u32 seed, x;
};

// One of esl_mix3's three rounds (Bob Jenkins' mix), on uint32 with wraparound.
TAIL_FN void mix3_round(tail_u32 *a, tail_u32 *b, tail_u32 *c, int sa, int sb, int sc) {
    *a = (*a - *b - *c) ^ (*c >> sa);
    *b = (*b - *c - *a) ^ (*a << sb);
    *c = (*c - *a - *b) ^ (*b >> sc);
}

// esl_mix3: the third word after the three rounds.
TAIL_FN tail_u32 mix3(tail_u32 a, tail_u32 b, tail_u32 c) {
    mix3_round(&a, &b, &c, 13, 8, 13);
    mix3_round(&a, &b, &c, 12, 16, 5);
    mix3_round(&a, &b, &c, 3, 10, 15);
    return c;
}

// esl_randomness_Init(r, GetSeed(r)): back to the seeded state (42 where the mix gives 0).
TAIL_FN void rng_reseed(Randomness *r) {
    tail_u32 x = mix3(r->seed, 87654321u, 12345678u);
    r->x = x ? x : 42u;
}

// esl_randomness_CreateFast(seed); seed must not be 0 (Easel would pick an arbitrary one).
TAIL_FN void rng_init(Randomness *r, tail_u32 seed) {
    r->seed = seed;
    rng_reseed(r);
}

// esl_random: the next state over 2^32, a double in [0, 1).
TAIL_FN double rng_random(Randomness *r) {
    r->x = r->x * 69069u + 1u;
    return (double)r->x / 4294967296.0;
}

// esl_vec_FNorm in place on N weights: each over the Kahan float32 sum, or all 1/N when it is 0.
template <int N>
TAIL_FN void vec_fnorm(float *path) {
    float total = kahan_sum(path, N);
    if (total == 0.0f) {
        for (int z = 0; z < N; z++) path[z] = 1.0f / (float)N;
        return;
    }
    for (int z = 0; z < N; z++) path[z] = path[z] / total;
}

// Whether roll < fl(c / norm), IEEE's quotient, where c and norm are sums of at most four
// float32 weights ≥ 0 (norm > 0) and roll a draw (0 or at least 2^−32), given inv = fl(1 / norm):
// a product decides it outside a band of 2^−48 around roll, the division inside it (or for NaN).
// Proof: q = fl(c · inv) is c/norm times 1 + θ, |θ| < 3u (u = 2^−53; such sums neither underflow
// nor overflow). q > fl(roll·(1 + 2^−48)) puts c/norm above roll·(1 + 2^−49), over 8 ulps of roll
// past it, so the quotient rounds above roll; q < fl(roll·(1 − 2^−48)) puts c/norm below roll, so
// the quotient rounds to roll or below. For roll = 0, q > 0 means c > 0, and c/norm ≥ 2^−281
// rounds above 0.
TAIL_FN bool below_quotient(double roll, double c, double norm, double inv) {
    const double q = c * inv;
    if (q > roll * (1.0 + 0x1p-48)) return true;
    if (q < roll * (1.0 - 0x1p-48)) return false;
    return roll < c / norm;
}

// esl_rnd_FChoose on N weights for the draw `roll`: the first index whose double cumulative
// weight over the double total exceeds it (below_quotient), or −1 when none does (weights that
// are not finite).
template <int N>
TAIL_FN int fchoose_rolled(double roll, const float *path) {
    double norm = 0.0, cumulative = 0.0;
    for (int z = 0; z < N; z++) norm += (double)path[z];
    const double inv = 1.0 / norm;
    for (int z = 0; z < N; z++) {
        cumulative += (double)path[z];
        if (below_quotient(roll, cumulative, norm, inv)) return z;
    }
    return -1;
}

// esl_rnd_FChoose on N weights: one draw, then fchoose_rolled.
template <int N>
TAIL_FN int rnd_fchoose(Randomness *r, const float *path) {
    return fchoose_rolled<N>(rng_random(r), path);
}

// What FNorm then FChoose choose for the draw `roll` among N raw weights (finite, ≥ 0), decided
// from the raw weights' double sums c_z (c_{N−1} = n) where a margin allows: z, or −2 where it
// does not (the caller then normalizes and chooses as the reference does). Proof: FNorm's
// weights are w_z = fl(p_z / t), t ≈ n its float sum, so w_z = (p_z/t)(1 + δ_z) + α_z with
// |δ_z| ≤ 2^−24 and |α_z| ≤ 2^−150 (a subnormal's absolute error); t cancels in FChoose's
// quotient of their double sums, which is ρ_z = Σ_{j≤z} p_j / Σ p_j within a factor 1 ± 2^−22.9
// and 2^−146 (its sums' and its division's roundings included); c_z / n is ρ_z within 6 double
// ulps. So c_z > roll·n·(1 + 2^−20) + 2^−140·n makes roll < the quotient, and c_z below
// roll·n·(1 − 2^−20) − 2^−140·n makes it ≥ roll. The last quotient is exactly 1 (both of its
// sums add the same weights in the same order), above any draw. A zero, not finite or nearly
// overflowing float total (FNorm's own cases) is left to the reference.
template <int N>
TAIL_FN int fchoose_raw(double roll, const float *path) {
    double c[N];
    double sum = 0.0;
    for (int z = 0; z < N; z++) c[z] = sum = sum + (double)path[z];
    if (!(sum > 0.0 && sum < 0x1p127)) return -2;
    const double at = roll * sum, slack = at * 0x1p-20 + sum * 0x1p-140;
    for (int z = 0; z < N - 1; z++) {
        if (c[z] > at + slack) return z;
        if (!(c[z] < at - slack)) return -2;
    }
    return N - 1;
}

// What the select_* functions read: om->xf, the transitions node by node, a Forward matrix's
// special states and its rows as cells (domaindef.cuh's CellRows), their pointers held by the
// sampler so that no step reloads them.
struct StoSampler {
    const f4 *cells, *ntv;
    const float *xmx;
    int L, Q;
    SpecialTransitions xf;
};

TAIL_FN StoSampler sto_sampler(const Profile *om, const SpecialTransitions *xf, const Matrix *fwd, const f4 *cells) {
    StoSampler s;
    s.cells = cells, s.ntv = om->ntv;
    s.xmx = fwd->xmx;
    s.L = fwd->L, s.Q = fwd->Q;
    s.xf = *xf;
    return s;
}

// Node k (≥ 1) in striped vectors: vector q, lane z. The trace keeps its node's place and steps it
// back one node at a time, so no step divides by Q.
struct Node {
    int q, z;
};

TAIL_FN Node node_before(Node n, int Q) { return n.q > 0 ? Node{n.q - 1, n.z} : Node{Q - 1, n.z - 1}; }

// Node k's {M, D, I} cell in row i, n its place, in one load; zeros for k ≤ 0.
TAIL_FN f4 sto_cells(const StoSampler &s, int i, int k, Node n) {
    return k > 0 ? ro(s.cells + 4 * ((tail_size_t)i * s.Q + n.q) + n.z) : f4{{0.0f, 0.0f, 0.0f, 0.0f}};
}

// Node k's transitions (place n) from `half` on (0: BM, MM, IM, DM; 1: MD, MI, II, DD) in one
// load; zeros for k ≤ 0.
TAIL_FN f4 sto_transitions(const StoSampler &s, int half, int k, Node n) {
    return k > 0 ? ro(s.ntv + 2 * (4 * n.q + n.z) + half) : f4{{0.0f, 0.0f, 0.0f, 0.0f}};
}

TAIL_FN float sto_special(const StoSampler &s, int i, int x) { return ro(&s.xmx[(tail_size_t)i * X_COUNT + x]); }

// Normalize the N weights and draw one of `states` ("BMID", …); 0 when FChoose finds none.
// The raw weights decide without FNorm's divisions wherever fchoose_raw's margin allows.
template <int N>
TAIL_FN char sto_pick(Randomness *r, float *path, const char *states) {
    const double roll = rng_random(r);
    int z = fchoose_raw<N>(roll, path);
    if (z == -2) {
        vec_fnorm<N>(path);
        z = fchoose_rolled<N>(roll, path);
    }
    return z < 0 ? 0 : states[z];
}

// select_m: what led to M(i, k) (node place n): B(i−1), or M, I, D of node k − 1 at row i − 1.
TAIL_FN char sto_select_m(const StoSampler &s, Randomness *r, int i, int k, Node n) {
    const Node before = node_before(n, s.Q);
    const f4 t = sto_transitions(s, 0, k, n), c = sto_cells(s, i - 1, k - 1, before);
    float path[4];
    path[0] = sto_special(s, i - 1, X_B) * t.v[T_BM];
    path[1] = c.v[0] * t.v[T_MM];
    path[2] = c.v[2] * t.v[T_IM];
    path[3] = c.v[1] * t.v[T_DM];
    return sto_pick<4>(r, path, "BMID");
}

// select_d: M or D of node k − 1 in the same row.
TAIL_FN char sto_select_d(const StoSampler &s, Randomness *r, int i, int k, Node n) {
    const Node before = node_before(n, s.Q);
    const f4 t = sto_transitions(s, 1, k - 1, before), c = sto_cells(s, i, k - 1, before);
    float path[2];
    path[0] = c.v[0] * t.v[T_MD - 4];
    path[1] = c.v[1] * t.v[T_DD - 4];
    return sto_pick<2>(r, path, "MD");
}

// select_i: M or I of node k at row i − 1.
TAIL_FN char sto_select_i(const StoSampler &s, Randomness *r, int i, int k, Node n) {
    const f4 t = sto_transitions(s, 1, k, n), c = sto_cells(s, i - 1, k, n);
    float path[2];
    path[0] = c.v[0] * t.v[T_MI - 4];
    path[1] = c.v[2] * t.v[T_II - 4];
    return sto_pick<2>(r, path, "MI");
}

// select_c / select_j: the state looped from row i − 1, or came from E(i) (its scale put back).
TAIL_FN char sto_select_c_or_j(const StoSampler &s, Randomness *r, char state, int i) {
    float path[2];
    path[0] = sto_special(s, i - 1, state == 'C' ? X_C : X_J) * s.xf.loop;
    float e_weight = state == 'C' ? s.xf.e_move : s.xf.e_loop;
    path[1] = (sto_special(s, i, X_E) * e_weight) * sto_special(s, i, X_SCALE);
    return sto_pick<2>(r, path, state == 'C' ? "CE" : "JE");
}

// select_b: N(i) or J(i), each times the move.
TAIL_FN char sto_select_b(const StoSampler &s, Randomness *r, int i) {
    float path[2];
    path[0] = sto_special(s, i, X_N) * s.xf.move;
    path[1] = sto_special(s, i, X_J) * s.xf.move;
    return sto_pick<2>(r, path, "NJ");
}

// Vector q of a row of cells as its M and D vectors.
TAIL_FN void sto_vectors(const f4 *row, int q, f4 *m, f4 *d) {
    for (int z = 0; z < 4; z++) {
        const f4 c = ro(row + 4 * q + z);
        m->v[z] = c.v[0], d->v[z] = c.v[1];
    }
}

// How many times select_e sweeps row i before giving up (HMMER would loop forever on weights that
// never reach the draw; one or two sweeps suffice for any finite row).
TAIL_CONST int STO_E_MAX_SWEEPS = 64;

// select_e: 'M' or 'D' and node *k (at place *n) of the cell that ended at E(i); 0 when the
// sweeps stall.
TAIL_FN char sto_select_e(const StoSampler &s, Randomness *r, int i, int *k, Node *n) {
    const int Q = s.Q;
    double roll = rng_random(r);
    float weight = 1.0f / sto_special(s, i, X_E);
    const f4 *row = s.cells + 4 * (tail_size_t)i * Q;
    double total = 0.0;  // kept across sweeps, as the reference's running sum is
    for (int sweep = 0; sweep < STO_E_MAX_SWEEPS; sweep++) {
        double before = total;
        f4 m, d;
        sto_vectors(row, 0, &m, &d);
        for (int q = 0; q < Q; q++) {
            f4 m_next = m, d_next = d;  // the next vectors load while these are tested
            if (q + 1 < Q) sto_vectors(row, q + 1, &m_next, &d_next);
            double sums[8];  // the running total after each of the vector's M, then D cells
            for (int z = 0; z < 4; z++) sums[z] = total = total + (double)(m.v[z] * weight);
            for (int z = 0; z < 4; z++) sums[4 + z] = total = total + (double)(d.v[z] * weight);
            // The terms are ≥ 0 or NaN, so the total never falls: unless its last value is at
            // most the draw, the first of the eight to pass it is the reference's.
            if (!(total <= roll))
                for (int c = 0; c < 8; c++)
                    if (roll < sums[c]) {
                        *k = (c & 3) * Q + q + 1, *n = Node{q, c & 3};
                        return c < 4 ? 'M' : 'D';
                    }
            m = m_next, d = d_next;
        }
        if (!(total > before)) return 0;  // no progress (all zero, or NaN): it would never end
    }
    return 0;
}

// p7_StochasticTrace's traceback on the full multihit Forward matrix of `s`: one sampled path,
// from T at row L back to S, each step to sink.append(previous, state, k, i, place of node k)
// (previous: the state appended before, 0 for none), which returns 0 when it cannot take it
// (TAIL_CAPACITY). TAIL_RANGE where the reference has no answer: no weight is chosen (not
// finite), select_e stalls, or a step would read row −1 (numpy would wrap to row L, HMMER reads
// before the matrix). Neither happens on a Forward matrix whose scores are finite.
template <class Sink>
TAIL_FN int sample_trace(Randomness *r, const StoSampler &s, Sink &sink) {
    int i = s.L, k = 0;
    Node n = {0, 0};  // node k's place, once select_e has set k
    if (!sink.append(0, 'T', k, i, n) || !sink.append('T', 'C', k, i, n)) return TAIL_CAPACITY;
    char previous = 'C';
    while (previous != 'S') {
        char state;
        if ((previous == 'M' || previous == 'I' || previous == 'C' || previous == 'J') && i < 1) return TAIL_RANGE;
        if (previous == 'M') {
            state = sto_select_m(s, r, i, k, n);
            k--, n = node_before(n, s.Q);
            i--;
        } else if (previous == 'D') {
            state = sto_select_d(s, r, i, k, n);
            k--, n = node_before(n, s.Q);
        } else if (previous == 'I') {
            state = sto_select_i(s, r, i, k, n);
            i--;
        } else if (previous == 'N') {
            state = i == 0 ? 'S' : 'N';
        } else if (previous == 'C' || previous == 'J') {
            state = sto_select_c_or_j(s, r, previous, i);
        } else if (previous == 'E') {
            state = sto_select_e(s, r, i, &k, &n);
        } else {  // B
            state = sto_select_b(s, r, i);
        }
        if (state == 0) return TAIL_RANGE;
        if (!sink.append(previous, state, k, i, n)) return TAIL_CAPACITY;
        if (is_looping_state(state) && state == previous) i--;
        previous = state;
    }
    return TAIL_OK;
}

}  // namespace gpuhmm::tail

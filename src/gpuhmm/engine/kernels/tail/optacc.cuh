// HMMER 3.4's optimal accuracy alignment (impl_sse/optacc.c): p7_OptimalAccuracy, the max-plus
// fill over an envelope's posterior probabilities, and p7_OATrace, its traceback with each
// step's posterior (tests/oracle/optacc.py; the traceback loop is tests/oracle/trace.py:traced_back).
//
// Thread → data: a lane group or a warp fills one envelope's matrix row after row, each thread
// lane z of its vectors (the shifts and the D→D carries exchanged between threads); one thread
// traces it back.
// Lane width: 4 float32 lanes (f4) of striped vectors; the D→D carry runs q = 0..Q−1 in order.
// Rounding: the fill's only rounding is the float32 sum of a best predecessor and a posterior;
// maxima and masks are exact. As HMMER: a zero transition masks its predecessor to +0.0 (SSE
// `and` with `cmpgt`), not −∞; shifts bring −∞ into node 1; the first D→D pass carries each
// updated cell, three more passes carry only the shifted carry; special states use 0.0 for a
// term whose transition is 0.0. The traceback masks predecessors behind a zero transition to −∞.
#pragma once
#include "common.cuh"
#include "decoding.cuh"
#include "lanegroup.cuh"
#include "trace.cuh"

namespace gpuhmm::tail {

TAIL_FN float oa_neg_inf() { return bits_float(0xff800000u); }

// _mm_max_ps(a, b) (np.maximum on the values the fill meets: no NaN, no −0).
TAIL_FN float oa_max(float a, float b) { return a > b ? a : b; }

// _mm_and_ps(v, _mm_cmpgt_ps(t, 0)): v behind an open transition, +0.0 behind a closed one.
TAIL_FN float oa_open(float t, float v) { return t > 0.0f ? v : 0.0f; }

// p7_OptimalAccuracy by the lane group g: fills rows 0..pp->L of the full matrix `oa` (M, D, I,
// thread z lane z; the specials E, N, J, B, C, SCALE set to 0, thread 0) and returns the OA score,
// C at row L, in every thread; the group is synchronized when it returns. `oa` may hold anything
// before (the caller reuses the Forward matrix's storage): every cell is written. The specials
// are computed alike in every thread, from the lanes' largest E (a maximum: exact in any order).
template <class Group>
TAIL_FN float optimal_accuracy(const Group &g, const Profile *om, const SpecialTransitions *xf, const Posteriors *pp,
                               Matrix *oa) {
    const int L = pp->L, Q = om->Q, z = g.z;
    const WideRange r = wide_range(g, Q);
    const int q0 = r.q0, q1 = r.q1;
    const float neg_inf = oa_neg_inf();
    const f4 *tBM = om->tfv + T_BM * Q, *tMM = om->tfv + T_MM * Q, *tIM = om->tfv + T_IM * Q;
    const f4 *tDM = om->tfv + T_DM * Q, *tMD = om->tfv + T_MD * Q, *tMI = om->tfv + T_MI * Q;
    const f4 *tII = om->tfv + T_II * Q, *tDD = om->tfv + T_DD * Q;

    for (int q = q0; q < q1; q++) oa->M[q].v[z] = oa->D[q].v[z] = oa->I[q].v[z] = neg_inf;
    float xN = 0.0f, xJ = neg_inf, xB = 0.0f, xC = neg_inf;  // row i − 1's
    if (leads(g)) {
        float *X = oa->xmx;
        X[X_E] = neg_inf, X[X_N] = xN, X[X_J] = xJ, X[X_B] = xB, X[X_C] = xC, X[X_SCALE] = 0.0f;
    }

    for (int i = 1; i <= L; i++) {
        const f4 *Mp = oa->M + (i - 1) * Q, *Dp = oa->D + (i - 1) * Q, *Ip = oa->I + (i - 1) * Q;
        f4 *Mc = oa->M + i * Q, *Dc = oa->D + i * Q, *Ic = oa->I + i * Q;
        const f4 *ppM = pp->M + i * Q, *ppI = pp->I + i * Q;

        // M and I. Node k−1 of vector q is vector q−1; for q = 0, vector Q−1 shifted, −∞ in.
        float mpv = wide_before(g, r, Mp[q1 - 1].v[z], neg_inf);
        float ipv = wide_before(g, r, Ip[q1 - 1].v[z], neg_inf);
        float dpv = wide_before(g, r, Dp[q1 - 1].v[z], neg_inf);
        for (int q = q0; q < q1; q++) {
            float sv = oa_open(ro(&tBM[q].v[z]), xB);
            sv = oa_max(sv, oa_open(ro(&tMM[q].v[z]), mpv));
            sv = oa_max(sv, oa_open(ro(&tIM[q].v[z]), ipv));
            sv = oa_max(sv, oa_open(ro(&tDM[q].v[z]), dpv));
            Mc[q].v[z] = sv + ppM[q].v[z];
            const float ic = oa_max(oa_open(ro(&tMI[q].v[z]), Mp[q].v[z]), oa_open(ro(&tII[q].v[z]), Ip[q].v[z]));
            Ic[q].v[z] = ic + ppI[q].v[z];
            mpv = Mp[q].v[z];
            ipv = Ip[q].v[z];
            dpv = Dp[q].v[z];
        }

        // D: M(k)→D(k+1) lands one vector later; vector 0 gets M(Q−1) shifted, −∞ in (and the
        // first vector of a part the previous part's last M).
        const float shifted = wide_before(g, r, oa_open(ro(&tMD[q1 - 1].v[z]), Mc[q1 - 1].v[z]), neg_inf);
        for (int q = q0; q < q1; q++)
            Dc[q].v[z] = q == 0 ? neg_inf : q == q0 ? shifted : oa_open(ro(&tMD[q - 1].v[z]), Mc[q - 1].v[z]);
        // First D→D pass: the carry is each updated cell behind its DD.
        float dcv = wide_chain(g, r, 0, shifted, [&](float carry) {
            for (int q = q0; q < q1; q++) {
                Dc[q].v[z] = oa_max(carry, Dc[q].v[z]);
                carry = oa_open(ro(&tDD[q].v[z]), Dc[q].v[z]);
            }
            return carry;
        });
        // Three more passes carry only the shifted carry, masked by each DD it crosses.
        for (int pass = 0; pass < 3; pass++) {
            dcv = wide_chain(g, r, 0, wide_from_left(g, dcv, neg_inf), [&](float carry) {
                for (int q = q0; q < q1; q++) {
                    Dc[q].v[z] = oa_max(carry, Dc[q].v[z]);
                    carry = oa_open(ro(&tDD[q].v[z]), carry);
                }
                return carry;
            });
        }

        // E: the best M or D cell of the row, padded lanes included.
        float xE = neg_inf;
        for (int q = q0; q < q1; q++) {
            xE = oa_max(xE, Mc[q].v[z]);
            xE = oa_max(xE, Dc[q].v[z]);
        }
        xE = wide_max(g, xE);
        float t1 = xf->loop == 0.0f ? 0.0f : xJ + pp->J[i];
        float t2 = xf->e_loop == 0.0f ? 0.0f : xE;
        xJ = t1 > t2 ? t1 : t2;
        t1 = xf->loop == 0.0f ? 0.0f : xC + pp->C[i];
        t2 = xf->e_move == 0.0f ? 0.0f : xE;
        xC = t1 > t2 ? t1 : t2;
        xN = xf->loop == 0.0f ? 0.0f : xN + pp->N[i];
        t1 = xf->move == 0.0f ? 0.0f : xN;
        t2 = xf->move == 0.0f ? 0.0f : xJ;
        xB = t1 > t2 ? t1 : t2;
        if (leads(g)) {
            float *Xc = oa->xmx + i * X_COUNT;
            Xc[X_E] = xE, Xc[X_N] = xN, Xc[X_J] = xJ, Xc[X_B] = xB, Xc[X_C] = xC, Xc[X_SCALE] = 0.0f;
        }
    }
    g.sync();
    return xC;
}

// Node k's cell of row i of striped rows (Q vectors a row), or −∞ behind a zero transition
// `kind` of node `node` (0 for k = 0 and for node 0's transitions, as HMMER's shifts bring in).
TAIL_FN float oa_masked(const Profile *om, int kind, int node, const f4 *rows, int i, int k) {
    if (transition(om, kind, node) == 0.0f) return oa_neg_inf();
    return node_value(rows + i * om->Q, om->Q, k);
}

// select_m: the state before M(i, k): the strictly best of M, I, D, B, in that order of ties.
TAIL_FN char oa_select_m(const Profile *om, const Matrix *oa, int i, int k) {
    float path[4];
    path[0] = oa_masked(om, T_MM, k, oa->M, i - 1, k - 1);
    path[1] = oa_masked(om, T_IM, k, oa->I, i - 1, k - 1);
    path[2] = oa_masked(om, T_DM, k, oa->D, i - 1, k - 1);
    path[3] = transition(om, T_BM, k) == 0.0f ? oa_neg_inf() : oa->xmx[(i - 1) * X_COUNT + X_B];
    int best = 0;
    for (int s = 1; s < 4; s++) {
        if (path[s] > path[best]) best = s;
    }
    const char states[4] = {'M', 'I', 'D', 'B'};
    return states[best];
}

// select_d: the state before D(i, k): M(k−1) unless D(k−1) is strictly better.
TAIL_FN char oa_select_d(const Profile *om, const Matrix *oa, int i, int k) {
    const float from_m = oa_masked(om, T_MD, k - 1, oa->M, i, k - 1);
    const float from_d = oa_masked(om, T_DD, k - 1, oa->D, i, k - 1);
    return from_m >= from_d ? 'M' : 'D';
}

// select_i: the state before I(i, k): M(k) of row i−1 unless I(k) there is strictly better.
TAIL_FN char oa_select_i(const Profile *om, const Matrix *oa, int i, int k) {
    const float from_m = oa_masked(om, T_MI, k, oa->M, i - 1, k);
    const float from_i = oa_masked(om, T_II, k, oa->I, i - 1, k);
    return from_m >= from_i ? 'M' : 'I';
}

// select_c / select_j: C (J) at row i looped from row i−1 only if strictly better than E(i).
TAIL_FN char oa_select_c_or_j(const SpecialTransitions *xf, const Posteriors *pp, const Matrix *oa, char state,
                              int i) {
    const int column = state == 'C' ? X_C : X_J;
    const float emission = state == 'C' ? pp->C[i] : pp->J[i];
    const float looped = xf->loop == 0.0f ? oa_neg_inf() : oa->xmx[(i - 1) * X_COUNT + column] + emission;
    const float e_weight = state == 'C' ? xf->e_move : xf->e_loop;
    const float from_e = e_weight == 0.0f ? oa_neg_inf() : oa->xmx[i * X_COUNT + X_E];
    return looped > from_e ? state : 'E';
}

// select_b: B at row i came from N only if strictly better than J.
TAIL_FN char oa_select_b(const SpecialTransitions *xf, const Matrix *oa, int i) {
    const float from_n = xf->move == 0.0f ? oa_neg_inf() : oa->xmx[i * X_COUNT + X_N];
    const float from_j = xf->move == 0.0f ? oa_neg_inf() : oa->xmx[i * X_COUNT + X_J];
    return from_n > from_j ? 'N' : 'J';
}

// select_e: the M or D cell that ended at E(i), scanning striped cells in order (q outer, M's four
// lanes then D's): a later M wins ties, a D only when strictly better. Sets *k (0: none found,
// only possible with NaN cells); padded lanes take part, as in HMMER.
TAIL_FN char oa_select_e(const Matrix *oa, int Q, int i, int *k) {
    const f4 *M = oa->M + i * Q, *D = oa->D + i * Q;
    float best = oa_neg_inf();
    char chosen = 'M';
    *k = 0;
    for (int q = 0; q < Q; q++) {
        for (int z = 0; z < 4; z++) {
            if (M[q].v[z] >= best) {
                best = M[q].v[z];
                chosen = 'M';
                *k = z * Q + q + 1;
            }
        }
        for (int z = 0; z < 4; z++) {
            if (D[q].v[z] > best) {
                best = D[q].v[z];
                chosen = 'D';
                *k = z * Q + q + 1;
            }
        }
    }
    return chosen;
}

// get_postprob: M and I their cell's posterior, N/C/J their row's when they loop, else 0.
TAIL_FN float oa_posterior(const Posteriors *pp, int Q, char state, char previous, int k, int i) {
    if (state == 'M') return node_value(pp->M + i * Q, Q, k);
    if (state == 'I') return node_value(pp->I + i * Q, Q, k);
    if (state == previous) {
        if (state == 'N') return pp->N[i];
        if (state == 'C') return pp->C[i];
        if (state == 'J') return pp->J[i];
    }
    return 0.0f;
}

// p7_OATrace: the optimal accuracy path through `oa` (filled by optimal_accuracy from `pp`), with
// each step's posterior, into `tr` (which must keep posteriors; it is reset first). Traced from
// T at row L back to S, then reversed. TAIL_CAPACITY when the trace is full; TAIL_RANGE if the
// path would leave the matrix (only on a malformed matrix; the reference would fail there too).
TAIL_FN int oa_trace(const Profile *om, const SpecialTransitions *xf, const Posteriors *pp, const Matrix *oa,
                     Trace *tr) {
    const int L = pp->L, Q = om->Q, nodes = 4 * Q;
    int i = L, k = 0;
    tr->n = 0;
    if (!trace_append(tr, 0, 'T', k, i, 0.0f) || !trace_append(tr, 'T', 'C', k, i, 0.0f)) return TAIL_CAPACITY;
    char previous = 'C';
    while (previous != 'S') {
        char state;
        if (previous == 'M') {
            if (i < 1 || i > L || k < 1 || k > nodes) return TAIL_RANGE;
            state = oa_select_m(om, oa, i, k);
            k--;
            i--;
        } else if (previous == 'D') {
            if (i < 0 || i > L || k < 1 || k > nodes) return TAIL_RANGE;
            state = oa_select_d(om, oa, i, k);
            k--;
        } else if (previous == 'I') {
            if (i < 1 || i > L || k < 1 || k > nodes) return TAIL_RANGE;
            state = oa_select_i(om, oa, i, k);
            i--;
        } else if (previous == 'N') {
            state = i == 0 ? 'S' : 'N';
        } else if (previous == 'C' || previous == 'J') {
            if (i < 1 || i > L) return TAIL_RANGE;
            state = oa_select_c_or_j(xf, pp, oa, previous, i);
        } else if (previous == 'E') {
            if (i < 0 || i > L) return TAIL_RANGE;
            state = oa_select_e(oa, Q, i, &k);
            if (k == 0) return TAIL_RANGE;
        } else {  // B
            if (i < 0 || i > L) return TAIL_RANGE;
            state = oa_select_b(xf, oa, i);
        }
        if (!trace_append(tr, previous, state, k, i, oa_posterior(pp, Q, state, previous, k, i)))
            return TAIL_CAPACITY;
        if (is_looping_state(state) && state == previous) i--;
        previous = state;
    }
    trace_reverse(tr);
    return TAIL_OK;
}

}  // namespace gpuhmm::tail

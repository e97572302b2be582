// HMMER 3.4's Forward and Backward in probability space (impl_sse/fwdback.c: p7_ForwardParser and
// p7_Forward (forward_engine), p7_BackwardParser and p7_Backward (backward_engine)) run by a lane
// group, bit for bit (tests/oracle/fwdback.py). A parser matrix (M null) keeps only the special
// states; a full one every row.
//
// Thread → data: the 4 threads of a LaneGroup share one target; thread z updates lane z of every
// striped vector of the rows (component z of each f4), in HMMER's q order, so each lane's chains
// (xE and xB sums, the D→D passes) stay in one thread. What crosses lanes goes through the
// group: the shifted vectors at the ends of the q loops (kept in registers and exchanged), the
// horizontal sums and the vote that stops Forward's D→D passes. Every thread computes the
// special states from the same values in the same order, so all hold the same bits; thread 0
// writes them. Lane width: one float32 per thread. Overflow: rows whose xE (Forward) or xB
// (Backward's own scales) passes 1e4 are divided by it, as HMMER does; NaN, 0 or infinite final
// values are HMMER's eslERANGE and return TAIL_RANGE.
//
// Rounding: float32 throughout, except totscale, which HMMER accumulates as
// (float)((double)totscale + log((double)xE)). The host build calls the C library's log, as
// HMMER does. CUDA's log differs from glibc's by at most a few ulp, so on the GPU the sum is
// kept only when every double within a bound of it rounds to the same float (certified_float);
// otherwise Forward returns TAIL_UNCERTAIN (after filling the whole matrix, which the log does
// not touch: a caller that needs only the matrix may go on), and a pair that needs the score goes
// to pyhmmer.
#pragma once
#include "common.cuh"
#include "lanegroup.cuh"

#ifndef __CUDACC__
#include <cmath>
#endif

namespace gpuhmm::tail {

TAIL_FN double host_or_device_log(double x) {
#ifdef __CUDACC__
    return log(x);
#else
    return std::log(x);
#endif
}

TAIL_FN double host_or_device_exp(double x) {
#ifdef __CUDACC__
    return exp(x);
#else
    return std::exp(x);
#endif
}

// (float)(base + log(x)), or TAIL_UNCERTAIN when a log a few ulp off could round differently.
TAIL_FN int certified_float(double base, double x, float *out) {
    double logx = host_or_device_log(x);
    double sum = base + logx;
    float rounded = (float)sum;
    double bound = (logx < 0 ? -logx : logx) * 0x1p-49 + (sum < 0 ? -sum : sum) * 0x1p-50;
    *out = rounded;
    return ((float)(sum - bound) == rounded && (float)(sum + bound) == rounded) ? TAIL_OK : TAIL_UNCERTAIN;
}

TAIL_FN int is_range_error(float value) {
    return value != value || value == 0.0f || value - value != 0.0f;  // NaN, zero or infinite
}

// A Forward row's special states from its xE, in HMMER's order; where xE passes 1e4 (the row is
// rescaled) they come out divided by it.
TAIL_FN void forward_specials(const SpecialTransitions *xf, float xE, float *xN, float *xC, float *xJ, float *xB) {
    *xN = *xN * xf->loop;
    *xC = (*xC * xf->loop) + (xE * xf->e_move);
    *xJ = (*xJ * xf->loop) + (xE * xf->e_loop);
    *xB = (*xJ * xf->move) + (*xN * xf->move);
    if (xE > 1.0e4f) *xN = *xN / xE, *xC = *xC / xE, *xJ = *xJ / xE, *xB = *xB / xE;
}

// Forward's row i in lane z before the D→D passes: M and I into Mc and Ic, D's terms from M into
// Dc (its carry out in *dcv), from row i − 1 (Mp, Dp, Ip; mpv, ipv, dpv shifted in from the left
// lane); returns the lane's xE sum. The rows are restricted, so that the compiler may load a
// vector ahead of the stores before it.
TAIL_FN float forward_cells(int Q, int z, const f4 *t, const f4 *e, float xB, float mpv, float ipv, float dpv,
                            const f4 *__restrict__ Mp, const f4 *__restrict__ Dp, const f4 *__restrict__ Ip,
                            f4 *__restrict__ Mc, f4 *__restrict__ Dc, f4 *__restrict__ Ic, float *dcv) {
    const f4 *tBM = t + T_BM * Q, *tMM = t + T_MM * Q, *tIM = t + T_IM * Q, *tDM = t + T_DM * Q;
    const f4 *tMD = t + T_MD * Q, *tMI = t + T_MI * Q, *tII = t + T_II * Q;
    float xEv = 0.0f, carry = 0.0f;
#pragma unroll 4
    for (int q = 0; q < Q; q++) {
        float s = xB * ro(&tBM[q].v[z]);
        s = s + mpv * ro(&tMM[q].v[z]);
        s = s + ipv * ro(&tIM[q].v[z]);
        s = s + dpv * ro(&tDM[q].v[z]);
        float sv = s * ro(&e[q].v[z]);
        xEv = xEv + sv;
        mpv = Mp[q].v[z], dpv = Dp[q].v[z], ipv = Ip[q].v[z];
        Mc[q].v[z] = sv;
        Dc[q].v[z] = carry;
        carry = sv * ro(&tMD[q].v[z]);
        Ic[q].v[z] = mpv * ro(&tMI[q].v[z]) + ipv * ro(&tII[q].v[z]);
    }
    *dcv = carry;
    return xEv;
}

// What a Forward row is handed to when it is done: nothing, unless a caller keeps it elsewhere.
struct NoRows {
    TAIL_MEMBER void operator()(int, int, const f4 *, const f4 *, const f4 *) const {}
};

// p7_ForwardParser (fwd->M null; `rows` then holds 6·Q vectors of scratch) or p7_Forward: fills
// fwd->xmx (thread 0) and lane z of the full matrix's rows (thread z), the score in nats in every
// thread; each finished row i (0 first, all zeros), as it will stay, to done(i, z, M, D, I) in
// thread z. The group is synchronized when it returns.
template <class Done = NoRows>
TAIL_FN int group_forward(const LaneGroup &g, const Profile *om, const unsigned char *dsq, int L,
                          const SpecialTransitions *xf, Matrix *fwd, f4 *rows, float *score, Done done = Done()) {
    const int Q = om->Q, z = g.z;
    const f4 *t = om->tfv, *tDD = t + T_DD * Q;
    const int stop_early = om->M >= 100, full = fwd->M != 0;
    f4 *Mp = rows, *Dp = rows + Q, *Ip = rows + 2 * Q, *Mc = rows + 3 * Q, *Dc = rows + 4 * Q, *Ic = rows + 5 * Q;
    if (full) Mp = fwd->M, Dp = fwd->D, Ip = fwd->I;
    for (int q = 0; q < Q; q++) Mp[q].v[z] = Dp[q].v[z] = Ip[q].v[z] = 0.0f;
    done(0, z, Mp, Dp, Ip);
    float xN = 1.0f, xJ = 0.0f, xC = 0.0f, xB = xf->move, xE = 0.0f;
    if (z == 0) {
        float *x = fwd->xmx;
        x[X_E] = 0.0f, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = 1.0f;
    }
    float totscale = 0.0f, mlast = 0.0f, dlast = 0.0f, ilast = 0.0f;  // this lane's previous q = Q − 1
    int certain = TAIL_OK;
    fwd->L = L, fwd->Q = Q, fwd->has_own_scales = 1;
    for (int i = 1; i <= L; i++) {
        if (full) Mc = fwd->M + (tail_size_t)i * Q, Dc = fwd->D + (tail_size_t)i * Q, Ic = fwd->I + (tail_size_t)i * Q;
        const f4 *e = om->rfv + dsq[i - 1] * Q;
        float dcv = 0.0f;
        float xEv = forward_cells(Q, z, t, e, xB, from_left(g, mlast), from_left(g, ilast), from_left(g, dlast), Mp, Dp,
                                  Ip, Mc, Dc, Ic, &dcv);
        // The D→D passes: one extending D itself (each updated cell times DD carries on), then up
        // to three extending only the carry; from M = 100 on HMMER stops after a pass that raised
        // no cell.
        float carry = from_left(g, dcv);
        for (int q = 0; q < Q; q++) {
            Dc[q].v[z] = carry + Dc[q].v[z];
            carry = Dc[q].v[z] * ro(&tDD[q].v[z]);
        }
        for (int pass = 0; pass < 3; pass++) {
            float carried = from_left(g, carry);
            int changed = 0;
            for (int q = 0; q < Q; q++) {
                if (q > 0) carried = carried * ro(&tDD[q - 1].v[z]);
                float updated = carried + Dc[q].v[z];
                changed |= updated > Dc[q].v[z];
                Dc[q].v[z] = updated;
            }
            carry = carried * ro(&tDD[Q - 1].v[z]);
            if (stop_early && !g.any(changed)) break;
        }
        for (int q = 0; q < Q; q++) xEv = xEv + Dc[q].v[z];
        xE = g.hsum(xEv);
        forward_specials(xf, xE, &xN, &xC, &xJ, &xB);
        float scale = 1.0f;
        if (xE > 1.0e4f) {
            float reciprocal = 1.0f / xE;
            for (int q = 0; q < Q; q++) {
                Mc[q].v[z] = Mc[q].v[z] * reciprocal;
                Dc[q].v[z] = Dc[q].v[z] * reciprocal;
                Ic[q].v[z] = Ic[q].v[z] * reciprocal;
            }
            if (certified_float((double)totscale, (double)xE, &totscale) != TAIL_OK) certain = TAIL_UNCERTAIN;
            scale = xE, xE = 1.0f;
        }
        if (z == 0) {
            float *x = fwd->xmx + (tail_size_t)i * X_COUNT;
            x[X_E] = xE, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = scale;
        }
        done(i, z, Mc, Dc, Ic);
        mlast = Mc[Q - 1].v[z], dlast = Dc[Q - 1].v[z], ilast = Ic[Q - 1].v[z];
        f4 *swap;
        swap = Mp, Mp = Mc, Mc = swap;
        swap = Dp, Dp = Dc, Dc = swap;
        swap = Ip, Ip = Ic, Ic = swap;
    }
    g.sync();  // the other threads read thread 0's scale factors next, and thread 0 every lane
    if (L > 0 && is_range_error(xC)) return TAIL_RANGE;
    if (certified_float((double)totscale, (double)(xC * xf->move), score) != TAIL_OK) return TAIL_UNCERTAIN;
    return certain;
}

// Row L's special states, into x: C, which ends the target, and E, at which every M and D of
// the row may end; Forward's scale. Returns E.
TAIL_FN float backward_last_row(const SpecialTransitions *xf, const Matrix *fwd, int L, float *x) {
    x[X_C] = xf->move, x[X_E] = x[X_C] * xf->e_move, x[X_N] = x[X_J] = x[X_B] = 0.0f;
    x[X_SCALE] = fwd->xmx[(tail_size_t)L * X_COUNT + X_SCALE];
    return x[X_E];
}

// Row 0's special states (only B and N) from its xB and row 1's x, written by the thread that
// `leads`; returns N.
TAIL_FN float backward_first_row(const SpecialTransitions *xf, float xB, const float *x, int leads, Matrix *bck) {
    const float xN = (xB * xf->move) + (x[X_N] * xf->loop);
    if (leads) {
        float *out = bck->xmx;
        out[X_E] = 0.0f, out[X_N] = xN, out[X_J] = 0.0f, out[X_B] = xB, out[X_C] = 0.0f, out[X_SCALE] = 1.0f;
    }
    return xN;
}

// A Backward row's special states from its xB, in HMMER's order, into x (E, N, J, B, C, then
// the scale: Forward's `forward_scale` until Backward keeps its own, then xB where it passes 1e4).
TAIL_FN void backward_specials(const SpecialTransitions *xf, float xB, int own_scales, float forward_scale, float *x) {
    const float xC = x[X_C] * xf->loop;
    const float xJ = (xB * xf->move) + (x[X_J] * xf->loop);
    const float xN = (xB * xf->move) + (x[X_N] * xf->loop);
    x[X_E] = (xC * xf->e_move) + (xJ * xf->e_loop), x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC;
    x[X_SCALE] = own_scales ? (xB > 1.0e4f ? xB : 1.0f) : forward_scale;
}

// Backward's three D→D passes after the first, in one lane: the carry runs q = Q−1 .. 0.
TAIL_FN float group_backward_dd(const LaneGroup &g, f4 *D, float dcv, const f4 *tDD, int Q) {
    for (int pass = 0; pass < 3; pass++) {
        float carried = from_right(g, dcv);
        for (int q = Q - 1; q >= 0; q--) {
            carried = carried * ro(&tDD[q].v[g.z]);
            D[q].v[g.z] = D[q].v[g.z] + carried;
        }
        dcv = carried;
    }
    return dcv;
}

// M(q) += D(k + 1)·MD for every q: the D of node k + 1 is lane z's vector q + 1, or for q = Q − 1
// the next lane's vector 0.
TAIL_FN void group_add_md(const LaneGroup &g, f4 *M, const f4 *D, const f4 *tMD, int Q) {
    const int z = g.z;
    float wrapped = from_right(g, D[0].v[z]);
    for (int q = 0; q < Q; q++) M[q].v[z] = M[q].v[z] + (q + 1 < Q ? D[q + 1].v[z] : wrapped) * ro(&tMD[q].v[z]);
}

// Lane z of a model vector's successor, node k + 1: vector q + 1, or for q = Q − 1 the next
// lane's vector 0 (0 in lane 3).
TAIL_FN float model_successor(const f4 *a, int q, int Q, int z) {
    return q + 1 < Q ? ro(&a[q + 1].v[z]) : (z < 3 ? ro(&a[0].v[z + 1]) : 0.0f);
}

// A Backward row's end: its specials x (E, N, J, B, C, then the scale) and lane z of its cells
// divided by the scale where it is above 1; thread 0 writes the specials to `out`.
TAIL_FN void group_scale_row(int z, f4 *M, f4 *D, f4 *I, int Q, float *x, float *out) {
    const float scale = x[X_SCALE];
    if (scale > 1.0f) {
        for (int c = X_E; c <= X_C; c++) x[c] = x[c] / scale;
        float reciprocal = 1.0f / scale;
        for (int q = 0; q < Q; q++) {
            M[q].v[z] = M[q].v[z] * reciprocal;
            D[q].v[z] = D[q].v[z] * reciprocal;
            I[q].v[z] = I[q].v[z] * reciprocal;
        }
    }
    if (z == 0)
        for (int c = 0; c < X_COUNT; c++) out[c] = x[c];
}

// p7_BackwardParser (bck->M null) or p7_Backward, with the scale factors of `fwd` (thread 0's,
// synchronized by group_forward) until its own xB passes 1e16: fills bck->xmx (thread 0) and lane
// z of the full matrix's rows (thread z); the group is synchronized when it returns. `rows` holds
// 4·Q vectors of scratch.
TAIL_FN int group_backward(const LaneGroup &g, const Profile *om, const unsigned char *dsq, int L,
                           const SpecialTransitions *xf, const Matrix *fwd, Matrix *bck, f4 *rows) {
    const int Q = om->Q, z = g.z;
    const f4 *t = om->tfv;
    const f4 *tBM = t + T_BM * Q, *tMM = t + T_MM * Q, *tIM = t + T_IM * Q, *tDM = t + T_DM * Q;
    const f4 *tMD = t + T_MD * Q, *tMI = t + T_MI * Q, *tII = t + T_II * Q, *tDD = t + T_DD * Q;
    const int full = bck->M != 0;
    f4 *emitted = rows, *Mc = rows + Q, *Dc = rows + 2 * Q, *Ic = rows + 3 * Q;
    if (full) Mc = bck->M + (tail_size_t)L * Q, Dc = bck->D + (tail_size_t)L * Q, Ic = bck->I + (tail_size_t)L * Q;
    bck->L = L, bck->Q = Q;

    // Row L: every M and D may end at E, then D→D and M→D.
    float x[X_COUNT];
    float xE = backward_last_row(xf, fwd, L, x);
    for (int q = 0; q < Q; q++) Mc[q].v[z] = xE, Dc[q].v[z] = xE, Ic[q].v[z] = 0.0f;
    float dpv = from_right(g, xE), dcv = 0.0f;
    for (int q = Q - 1; q >= 0; q--) {
        dcv = dpv * ro(&tDD[q].v[z]);
        Dc[q].v[z] = Dc[q].v[z] + dcv;
        dpv = Dc[q].v[z];
    }
    group_backward_dd(g, Dc, dcv, tDD, Q);
    group_add_md(g, Mc, Dc, tMD, Q);
    int own_scales = 0;
    group_scale_row(z, Mc, Dc, Ic, Q, x, bck->xmx + (tail_size_t)L * X_COUNT);

    for (int i = L - 1; i >= 1; i--) {
        const f4 *e = om->rfv + dsq[i] * Q;  // residue i + 1
        for (int q = 0; q < Q; q++) emitted[q].v[z] = Mc[q].v[z] * ro(&e[q].v[z]);
        float wrapped = from_right(g, emitted[0].v[z]);
        float xBv = 0.0f;
        f4 *Mn = Mc, *Dn = Dc, *In = Ic;  // row i: in place in a parser, its own row in a full matrix
        if (full) Mn = bck->M + (tail_size_t)i * Q, Dn = bck->D + (tail_size_t)i * Q, In = bck->I + (tail_size_t)i * Q;
        for (int q = Q - 1; q >= 0; q--) {
            float next = q + 1 < Q ? emitted[q + 1].v[z] : wrapped;
            float ic = Ic[q].v[z];
            In[q].v[z] = (ic * ro(&tII[q].v[z])) + (next * model_successor(tIM, q, Q, z));
            Dn[q].v[z] = next * model_successor(tDM, q, Q, z);
            Mn[q].v[z] = (ic * ro(&tMI[q].v[z])) + (next * model_successor(tMM, q, Q, z));
            float term = emitted[q].v[z] * ro(&tBM[q].v[z]);
            xBv = q == Q - 1 ? term : xBv + term;
        }
        Mc = Mn, Dc = Dn, Ic = In;
        const float xB = g.hsum(xBv);
        own_scales = own_scales || (double)xB > 1.0e16;
        backward_specials(xf, xB, own_scales, fwd->xmx[(tail_size_t)i * X_COUNT + X_SCALE], x);
        xE = x[X_E];
        dpv = from_right(g, Dc[0].v[z] + xE);
        for (int q = Q - 1; q >= 0; q--) {
            dcv = dpv * ro(&tDD[q].v[z]);
            Dc[q].v[z] = Dc[q].v[z] + (dcv + xE);
            dpv = Dc[q].v[z];
        }
        for (int q = 0; q < Q; q++) Mc[q].v[z] = Mc[q].v[z] + xE;
        group_backward_dd(g, Dc, dcv, tDD, Q);
        group_add_md(g, Mc, Dc, tMD, Q);
        group_scale_row(z, Mc, Dc, Ic, Q, x, bck->xmx + (tail_size_t)i * X_COUNT);
    }

    // Row 0: only B and N, from M(1); the sum runs q upward here.
    const f4 *e = om->rfv + dsq[0] * Q;
    float xBv = 0.0f;
    for (int q = 0; q < Q; q++) {
        float term = (Mc[q].v[z] * ro(&e[q].v[z])) * ro(&tBM[q].v[z]);
        xBv = q == 0 ? term : xBv + term;
    }
    const float xN = backward_first_row(xf, g.hsum(xBv), x, z == 0, bck);
    if (full)
        for (int q = 0; q < Q; q++) bck->M[q].v[z] = bck->D[q].v[z] = bck->I[q].v[z] = 0.0f;
    bck->has_own_scales = own_scales;
    g.sync();
    if (L > 0 && is_range_error(xN)) return TAIL_RANGE;
    return TAIL_OK;
}

}  // namespace gpuhmm::tail

// HMMER 3.4's Forward and Backward in probability space (impl_sse/fwdback.c): p7_ForwardParser
// and p7_Forward (forward_engine), p7_BackwardParser and p7_Backward (backward_engine), bit for
// bit (tests/oracle/fwdback.py). A parser matrix (mx->M null) keeps only the special states.
//
// Thread → data: one thread per DP problem (a target, a region or an envelope), rows in order;
// each row is Q striped f4 vectors, lanes updated one after another in HMMER's operand order.
// Lane width: 4 float32 lanes (one __m128). Overflow: rows whose xE (Forward) or xB (Backward's
// own scales) passes 1e4 are divided by it, as HMMER does; NaN, 0 or infinite final values are
// HMMER's eslERANGE and return TAIL_RANGE.
//
// Rounding: float32 throughout, except totscale, which HMMER accumulates as
// (float)((double)totscale + log((double)xE)). The host build calls the C library's log, as
// HMMER does. CUDA's log differs from glibc's by at most a few ulp, so on the GPU the sum is
// kept only when every double within a bound of it rounds to the same float (certified_float);
// otherwise forward returns TAIL_UNCERTAIN (after filling the whole matrix, which the log does
// not touch: a caller that needs only the matrix may go on), and a pair that needs the score goes
// to pyhmmer.
#pragma once
#include "common.cuh"

#ifndef __CUDACC__
#include <cmath>
#endif

namespace gpuhmm_tail {

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

// The D→D paths of one Forward row, in place: a pass extending D itself (each updated cell times
// DD carries on), then up to three passes extending only the carry; from M = 100 on HMMER stops
// after a pass that raised no cell.
TAIL_FN void forward_dd(f4 *D, f4 dcv, const f4 *tDD, int Q, int stop_early) {
    for (int q = 0; q < Q; q++)
        for (int z = 0; z < 4; z++) {
            D[q].v[z] = dcv.v[z] + D[q].v[z];
            dcv.v[z] = D[q].v[z] * tDD[q].v[z];
        }
    for (int pass = 0; pass < 3; pass++) {
        f4 carried = rightshift(dcv, 0.0f);
        int changed = 0;
        for (int q = 0; q < Q; q++) {
            if (q > 0)
                for (int z = 0; z < 4; z++) carried.v[z] = carried.v[z] * tDD[q - 1].v[z];
            for (int z = 0; z < 4; z++) {
                float updated = carried.v[z] + D[q].v[z];
                changed |= updated > D[q].v[z];
                D[q].v[z] = updated;
            }
        }
        for (int z = 0; z < 4; z++) dcv.v[z] = carried.v[z] * tDD[Q - 1].v[z];
        if (stop_early && !changed) break;
    }
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

// What forward_row leaves: the row's xE lanes over M, and the D carry out of its last vector.
struct ForwardRow {
    f4 xE, dcv;
};

// forward_engine's main loop over one row: M, I and the D entries (before D→D) from the previous
// row, emission vectors e and transitions t (om->tfv). No row written overlaps another array.
TAIL_FN ForwardRow forward_row(int Q, float xB, const f4 *TAIL_RESTRICT e, const f4 *TAIL_RESTRICT t,
                               const f4 *TAIL_RESTRICT Mp, const f4 *TAIL_RESTRICT Dp, const f4 *TAIL_RESTRICT Ip,
                               f4 *TAIL_RESTRICT Mc, f4 *TAIL_RESTRICT Dc, f4 *TAIL_RESTRICT Ic) {
    const f4 *tBM = t + T_BM * Q, *tMM = t + T_MM * Q, *tIM = t + T_IM * Q, *tDM = t + T_DM * Q;
    const f4 *tMD = t + T_MD * Q, *tMI = t + T_MI * Q, *tII = t + T_II * Q;
    f4 mpv = rightshift(Mp[Q - 1], 0.0f), ipv = rightshift(Ip[Q - 1], 0.0f), dpv = rightshift(Dp[Q - 1], 0.0f);
    ForwardRow row = {splat(0.0f), splat(0.0f)};
    for (int q = 0; q < Q; q++) {
        f4 sv;
        for (int z = 0; z < 4; z++) {
            float s = xB * tBM[q].v[z];
            s = s + mpv.v[z] * tMM[q].v[z];
            s = s + ipv.v[z] * tIM[q].v[z];
            s = s + dpv.v[z] * tDM[q].v[z];
            sv.v[z] = s * e[q].v[z];
            row.xE.v[z] = row.xE.v[z] + sv.v[z];
        }
        mpv = Mp[q], dpv = Dp[q], ipv = Ip[q];
        Mc[q] = sv;
        Dc[q] = row.dcv;
        for (int z = 0; z < 4; z++) {
            row.dcv.v[z] = sv.v[z] * tMD[q].v[z];
            Ic[q].v[z] = mpv.v[z] * tMI[q].v[z] + ipv.v[z] * tII[q].v[z];
        }
    }
    return row;
}

// p7_Forward (mx full) or p7_ForwardParser (mx->M null, `rows` then holds 6·Q vectors of
// scratch) of digital residues dsq[0 .. L−1]: fills mx, sets the score in nats.
TAIL_FN int forward(const Profile *om, const unsigned char *dsq, int L, const SpecialTransitions *xf, Matrix *mx,
                    f4 *rows, float *score) {
    const int Q = om->Q;
    const f4 *t = om->tfv, *tDD = t + T_DD * Q;
    const int full = mx->M != 0;
    f4 *Mp, *Dp, *Ip, *Mc, *Dc, *Ic;
    if (full) {
        Mp = mx->M, Dp = mx->D, Ip = mx->I;
    } else {
        Mp = rows, Dp = rows + Q, Ip = rows + 2 * Q;
        Mc = rows + 3 * Q, Dc = rows + 4 * Q, Ic = rows + 5 * Q;
    }
    for (int q = 0; q < Q; q++) Mp[q] = Dp[q] = Ip[q] = splat(0.0f);
    float xN = 1.0f, xJ = 0.0f, xC = 0.0f, xB = xf->move, xE = 0.0f;
    float *x = mx->xmx;
    x[X_E] = 0.0f, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = 1.0f;
    float totscale = 0.0f;
    int certain = TAIL_OK;
    mx->L = L, mx->Q = Q, mx->has_own_scales = 1;
    for (int i = 1; i <= L; i++) {
        if (full) Mc = mx->M + (tail_size_t)i * Q, Dc = mx->D + (tail_size_t)i * Q, Ic = mx->I + (tail_size_t)i * Q;
        const ForwardRow row = forward_row(Q, xB, om->rfv + dsq[i - 1] * Q, t, Mp, Dp, Ip, Mc, Dc, Ic);
        f4 xEv = row.xE;
        forward_dd(Dc, rightshift(row.dcv, 0.0f), tDD, Q, om->M >= 100);
        for (int q = 0; q < Q; q++)
            for (int z = 0; z < 4; z++) xEv.v[z] = xEv.v[z] + Dc[q].v[z];
        xE = hsum(xEv);
        forward_specials(xf, xE, &xN, &xC, &xJ, &xB);
        float scale = 1.0f;
        if (xE > 1.0e4f) {
            float reciprocal = 1.0f / xE;
            for (int q = 0; q < Q; q++)
                for (int z = 0; z < 4; z++) {
                    Mc[q].v[z] = Mc[q].v[z] * reciprocal;
                    Dc[q].v[z] = Dc[q].v[z] * reciprocal;
                    Ic[q].v[z] = Ic[q].v[z] * reciprocal;
                }
            if (certified_float((double)totscale, (double)xE, &totscale) != TAIL_OK) certain = TAIL_UNCERTAIN;
            scale = xE, xE = 1.0f;
        }
        x = mx->xmx + (tail_size_t)i * X_COUNT;
        x[X_E] = xE, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = scale;
        if (full) {
            Mp = Mc, Dp = Dc, Ip = Ic;
        } else {
            f4 *swap;
            swap = Mp, Mp = Mc, Mc = swap;
            swap = Dp, Dp = Dc, Dc = swap;
            swap = Ip, Ip = Ic, Ic = swap;
        }
    }
    if (L > 0 && is_range_error(xC)) return TAIL_RANGE;
    if (certified_float((double)totscale, (double)(xC * xf->move), score) != TAIL_OK) return TAIL_UNCERTAIN;
    return certain;
}

// Backward's three D→D passes after the first: the carry runs q = Q−1 .. 0, times DD, added on.
TAIL_FN void backward_dd(f4 *D, f4 dcv, const f4 *tDD, int Q) {
    for (int pass = 0; pass < 3; pass++) {
        f4 carried = leftshift(dcv);
        for (int q = Q - 1; q >= 0; q--)
            for (int z = 0; z < 4; z++) {
                carried.v[z] = carried.v[z] * tDD[q].v[z];
                D[q].v[z] = D[q].v[z] + carried.v[z];
            }
        dcv = carried;
    }
}

// Vector q + 1 of `a`, or for q = Q − 1 the left-shifted vector 0: each lane's node k + 1.
TAIL_FN f4 successor(const f4 *a, int q, int Q) { return q + 1 < Q ? a[q + 1] : leftshift(a[0]); }

TAIL_FN void backward_rescale(f4 *Mc, f4 *Dc, f4 *Ic, int Q, float scale) {
    float reciprocal = 1.0f / scale;
    for (int q = 0; q < Q; q++)
        for (int z = 0; z < 4; z++) {
            Mc[q].v[z] = Mc[q].v[z] * reciprocal;
            Dc[q].v[z] = Dc[q].v[z] * reciprocal;
            Ic[q].v[z] = Ic[q].v[z] * reciprocal;
        }
}

// p7_Backward (bck full) or p7_BackwardParser, using the scale factors of `fwd` (the Forward
// matrix of the same residues) until its own xB passes 1e16. `rows` holds 4·Q vectors of
// scratch (3·Q more are not needed: a parser keeps one row, updated in place).
TAIL_FN int backward(const Profile *om, const unsigned char *dsq, int L, const SpecialTransitions *xf,
                     const Matrix *fwd, Matrix *bck, f4 *rows) {
    const int Q = om->Q;
    const f4 *t = om->tfv;
    const f4 *tBM = t + T_BM * Q, *tMM = t + T_MM * Q, *tIM = t + T_IM * Q, *tDM = t + T_DM * Q;
    const f4 *tMD = t + T_MD * Q, *tMI = t + T_MI * Q, *tII = t + T_II * Q, *tDD = t + T_DD * Q;
    const int full = bck->M != 0;
    f4 *emitted = rows;
    f4 *Mc, *Dc, *Ic;
    if (full) {
        Mc = bck->M + (tail_size_t)L * Q, Dc = bck->D + (tail_size_t)L * Q, Ic = bck->I + (tail_size_t)L * Q;
    } else {
        Mc = rows + Q, Dc = rows + 2 * Q, Ic = rows + 3 * Q;
    }
    bck->L = L, bck->Q = Q;

    // Row L: every M and D may end at E (padded lanes too), then D→D and M→D.
    float xJ = 0.0f, xB = 0.0f, xN = 0.0f, xC = xf->move;
    float xE = xC * xf->e_move;
    for (int q = 0; q < Q; q++) Mc[q] = splat(xE), Dc[q] = splat(xE), Ic[q] = splat(0.0f);
    f4 dpv = leftshift(Dc[Q - 1]), dcv = splat(0.0f);
    for (int q = Q - 1; q >= 0; q--) {
        for (int z = 0; z < 4; z++) {
            dcv.v[z] = dpv.v[z] * tDD[q].v[z];
            Dc[q].v[z] = Dc[q].v[z] + dcv.v[z];
        }
        dpv = Dc[q];
    }
    backward_dd(Dc, dcv, tDD, Q);
    for (int q = 0; q < Q; q++) {
        f4 next = successor(Dc, q, Q);
        for (int z = 0; z < 4; z++) Mc[q].v[z] = Mc[q].v[z] + next.v[z] * tMD[q].v[z];
    }
    int own_scales = 0;
    float scale = fwd->xmx[(tail_size_t)L * X_COUNT + X_SCALE];
    if (scale > 1.0f) {
        xE = xE / scale, xN = xN / scale, xC = xC / scale, xJ = xJ / scale, xB = xB / scale;
        backward_rescale(Mc, Dc, Ic, Q, scale);
    }
    float *x = bck->xmx + (tail_size_t)L * X_COUNT;
    x[X_E] = xE, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = scale;

    for (int i = L - 1; i >= 1; i--) {
        const f4 *e = om->rfv + dsq[i] * Q;  // residue i + 1
        for (int q = 0; q < Q; q++)
            for (int z = 0; z < 4; z++) emitted[q].v[z] = Mc[q].v[z] * e[q].v[z];
        f4 *Mn = Mc, *Dn = Dc, *In = Ic;
        if (full) Mn = bck->M + (tail_size_t)i * Q, Dn = bck->D + (tail_size_t)i * Q, In = bck->I + (tail_size_t)i * Q;
        f4 xBv = splat(0.0f);
        for (int q = Q - 1; q >= 0; q--) {
            f4 next = successor(emitted, q, Q);
            f4 nIM = successor(tIM, q, Q), nDM = successor(tDM, q, Q), nMM = successor(tMM, q, Q);
            for (int z = 0; z < 4; z++) {
                float ic = Ic[q].v[z];
                In[q].v[z] = (ic * tII[q].v[z]) + (next.v[z] * nIM.v[z]);
                Dn[q].v[z] = next.v[z] * nDM.v[z];
                Mn[q].v[z] = (ic * tMI[q].v[z]) + (next.v[z] * nMM.v[z]);
                float term = emitted[q].v[z] * tBM[q].v[z];
                xBv.v[z] = q == Q - 1 ? term : xBv.v[z] + term;
            }
        }
        Mc = Mn, Dc = Dn, Ic = In;
        xB = hsum(xBv);
        xC = xC * xf->loop;
        xJ = (xB * xf->move) + (xJ * xf->loop);
        xN = (xB * xf->move) + (xN * xf->loop);
        xE = (xC * xf->e_move) + (xJ * xf->e_loop);
        f4 first;
        for (int z = 0; z < 4; z++) first.v[z] = Dc[0].v[z] + xE;
        dpv = leftshift(first);
        for (int q = Q - 1; q >= 0; q--) {
            for (int z = 0; z < 4; z++) {
                dcv.v[z] = dpv.v[z] * tDD[q].v[z];
                Dc[q].v[z] = Dc[q].v[z] + (dcv.v[z] + xE);
            }
            dpv = Dc[q];
        }
        for (int q = 0; q < Q; q++)
            for (int z = 0; z < 4; z++) Mc[q].v[z] = Mc[q].v[z] + xE;
        backward_dd(Dc, dcv, tDD, Q);
        for (int q = 0; q < Q; q++) {
            f4 next = successor(Dc, q, Q);
            for (int z = 0; z < 4; z++) Mc[q].v[z] = Mc[q].v[z] + next.v[z] * tMD[q].v[z];
        }
        own_scales = own_scales || (double)xB > 1.0e16;
        if (own_scales)
            scale = xB > 1.0e4f ? xB : 1.0f;
        else
            scale = fwd->xmx[(tail_size_t)i * X_COUNT + X_SCALE];
        if (scale > 1.0f) {
            xE = xE / scale, xN = xN / scale, xJ = xJ / scale, xB = xB / scale, xC = xC / scale;
            backward_rescale(Mc, Dc, Ic, Q, scale);
        }
        x = bck->xmx + (tail_size_t)i * X_COUNT;
        x[X_E] = xE, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = scale;
    }

    // Row 0: only B and N, from M(1); the sum runs q upward here.
    const f4 *e = om->rfv + dsq[0] * Q;
    f4 xBv = splat(0.0f);
    for (int q = 0; q < Q; q++)
        for (int z = 0; z < 4; z++) {
            float term = (Mc[q].v[z] * e[q].v[z]) * tBM[q].v[z];
            xBv.v[z] = q == 0 ? term : xBv.v[z] + term;
        }
    xB = hsum(xBv);
    xN = (xB * xf->move) + (xN * xf->loop);
    x = bck->xmx;
    x[X_E] = 0.0f, x[X_N] = xN, x[X_J] = 0.0f, x[X_B] = xB, x[X_C] = 0.0f, x[X_SCALE] = 1.0f;
    if (full)
        for (int q = 0; q < Q; q++) bck->M[q] = bck->D[q] = bck->I[q] = splat(0.0f);
    bck->has_own_scales = own_scales;
    if (L > 0 && is_range_error(xN)) return TAIL_RANGE;
    return TAIL_OK;
}

}  // namespace gpuhmm_tail

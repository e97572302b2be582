// HMMER 3.4's p7_ForwardParser and p7_BackwardParser (impl_sse/fwdback.c) run by a whole warp,
// bit for bit as group_forward and group_backward run them (fwdback.cuh), for the pairs whose
// serial chains would outlast the rest of the batch.
//
// Thread → data: a WideGroup; thread (z, part) owns lane z of vectors q0 .. q1 − 1, the part-th of
// P = min(WIDE_PARTS, Q) consecutive ranges of the striped row, for all of the row's cells. What
// HMMER computes in q order within a lane (the xE and xB sums, the D→D passes) runs part after
// part (wide_chain): each part goes on from the value the part before it handed over, so every
// operation is the serial one, in its order, on the same operands. What crosses a part's
// boundary (the cell before q0 or after q1 − 1, the last part's carry into the next lane) is an
// exchange. Every thread computes the special states from the same values in the same order;
// thread (0, 0) writes them. Lane width: one float32 per thread. Overflow and rounding: as
// fwdback.cuh (rows rescaled above 1e4, totscale certified).
#pragma once
#include "fwdback.cuh"

namespace gpuhmm::tail {

// p7_ForwardParser (fwd->M null; `rows` then holds 6·Q vectors of scratch) or p7_Forward, as
// group_forward.
TAIL_FN int wide_forward(const WideGroup &w, const Profile *om, const unsigned char *dsq, int L,
                         const SpecialTransitions *xf, Matrix *fwd, f4 *rows, float *score) {
    const int Q = om->Q, z = w.z;
    const WideRange r = wide_range(w, Q);
    const int q0 = r.q0, q1 = r.q1;
    const f4 *t = om->tfv, *tDD = t + T_DD * Q, *tMD = t + T_MD * Q, *tMI = t + T_MI * Q, *tII = t + T_II * Q;
    const f4 *tBM = t + T_BM * Q, *tMM = t + T_MM * Q, *tIM = t + T_IM * Q, *tDM = t + T_DM * Q;
    const int stop_early = om->M >= 100, full = fwd->M != 0;
    f4 *Mp = rows, *Dp = rows + Q, *Ip = rows + 2 * Q, *Mc = rows + 3 * Q, *Dc = rows + 4 * Q, *Ic = rows + 5 * Q;
    if (full) Mp = fwd->M, Dp = fwd->D, Ip = fwd->I;
    for (int q = q0; q < q1; q++) Mp[q].v[z] = Dp[q].v[z] = Ip[q].v[z] = 0.0f;
    float xN = 1.0f, xJ = 0.0f, xC = 0.0f, xB = xf->move, xE = 0.0f;
    const int leader = z == 0 && w.part == 0;
    if (leader) {
        float *x = fwd->xmx;
        x[X_E] = 0.0f, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = 1.0f;
    }
    float totscale = 0.0f, mlast = 0.0f, dlast = 0.0f, ilast = 0.0f;  // this part's previous row at q1 − 1
    int certain = TAIL_OK;
    fwd->L = L, fwd->Q = Q, fwd->has_own_scales = 1;
    for (int i = 1; i <= L; i++) {
        if (full) Mc = fwd->M + (tail_size_t)i * Q, Dc = fwd->D + (tail_size_t)i * Q, Ic = fwd->I + (tail_size_t)i * Q;
        const f4 *e = om->rfv + dsq[i - 1] * Q;
        float mpv = wide_before(w, r, mlast), ipv = wide_before(w, r, ilast), dpv = wide_before(w, r, dlast);
        float carry = 0.0f;
        for (int q = q0; q < q1; q++) {
            float s = xB * ro(&tBM[q].v[z]);
            s = s + mpv * ro(&tMM[q].v[z]);
            s = s + ipv * ro(&tIM[q].v[z]);
            s = s + dpv * ro(&tDM[q].v[z]);
            float sv = s * ro(&e[q].v[z]);
            mpv = Mp[q].v[z], dpv = Dp[q].v[z], ipv = Ip[q].v[z];
            Mc[q].v[z] = sv;
            Dc[q].v[z] = carry;
            carry = sv * ro(&tMD[q].v[z]);
            Ic[q].v[z] = mpv * ro(&tMI[q].v[z]) + ipv * ro(&tII[q].v[z]);
        }
        // D of vector q0 takes the previous part's last M→D; the lane's last carry goes on to
        // the next lane's first D→D pass.
        const float carried_in = wide_before(w, r, carry);
        if (w.part > 0 && q0 < q1) Dc[q0].v[z] = carried_in;
        const float dcv = w.from(carry, z, r.parts - 1);
        float xEv = wide_chain(w, r, 0, 0.0f, [&](float sum) {
            for (int q = q0; q < q1; q++) sum = sum + Mc[q].v[z];
            return sum;
        });
        float chain = wide_chain(w, r, 0, wide_from_left(w, dcv), [&](float c) {
            for (int q = q0; q < q1; q++) {
                Dc[q].v[z] = c + Dc[q].v[z];
                c = Dc[q].v[z] * ro(&tDD[q].v[z]);
            }
            return c;
        });
        for (int pass = 0; pass < 3; pass++) {
            int changed = 0;
            const float carried = wide_chain(w, r, 0, wide_from_left(w, chain), [&](float c) {
                for (int q = q0; q < q1; q++) {
                    if (q > 0) c = c * ro(&tDD[q - 1].v[z]);
                    float updated = c + Dc[q].v[z];
                    changed |= updated > Dc[q].v[z];
                    Dc[q].v[z] = updated;
                }
                return c;
            });
            chain = carried * ro(&tDD[Q - 1].v[z]);
            if (stop_early && !w.any(changed)) break;
        }
        xEv = wide_chain(w, r, 0, xEv, [&](float sum) {
            for (int q = q0; q < q1; q++) sum = sum + Dc[q].v[z];
            return sum;
        });
        xE = wide_hsum(w, xEv);
        forward_specials(xf, xE, &xN, &xC, &xJ, &xB);
        float scale = 1.0f;
        if (xE > 1.0e4f) {
            float reciprocal = 1.0f / xE;
            for (int q = q0; q < q1; q++) {
                Mc[q].v[z] = Mc[q].v[z] * reciprocal;
                Dc[q].v[z] = Dc[q].v[z] * reciprocal;
                Ic[q].v[z] = Ic[q].v[z] * reciprocal;
            }
            if (certified_float((double)totscale, (double)xE, &totscale) != TAIL_OK) certain = TAIL_UNCERTAIN;
            scale = xE, xE = 1.0f;
        }
        if (leader) {
            float *x = fwd->xmx + (tail_size_t)i * X_COUNT;
            x[X_E] = xE, x[X_N] = xN, x[X_J] = xJ, x[X_B] = xB, x[X_C] = xC, x[X_SCALE] = scale;
        }
        if (q0 < q1) mlast = Mc[q1 - 1].v[z], dlast = Dc[q1 - 1].v[z], ilast = Ic[q1 - 1].v[z];
        f4 *swap;
        swap = Mp, Mp = Mc, Mc = swap;
        swap = Dp, Dp = Dc, Dc = swap;
        swap = Ip, Ip = Ic, Ic = swap;
    }
    w.sync();  // the other threads read thread (0, 0)'s scale factors next
    if (L > 0 && is_range_error(xC)) return TAIL_RANGE;
    if (certified_float((double)totscale, (double)(xC * xf->move), score) != TAIL_OK) return TAIL_UNCERTAIN;
    return certain;
}

// Backward's D→D passes after the first, as group_backward_dd: the carry runs q = Q−1 .. 0,
// the last part first; returns the lane's final carry.
TAIL_FN float wide_backward_dd(const WideGroup &w, const WideRange &r, f4 *D, float dcv, const f4 *tDD) {
    for (int pass = 0; pass < 3; pass++) {
        dcv = wide_chain(w, r, 1, wide_from_right(w, dcv), [&](float carried) {
            for (int q = r.q1 - 1; q >= r.q0; q--) {
                carried = carried * ro(&tDD[q].v[w.z]);
                D[q].v[w.z] = D[q].v[w.z] + carried;
            }
            return carried;
        });
    }
    return dcv;
}

// M(q) += D(k + 1)·MD, as group_add_md: D of vector q + 1, past q1 − 1 the next part's first.
TAIL_FN void wide_add_md(const WideGroup &w, const WideRange &r, f4 *M, const f4 *D, const f4 *tMD) {
    const int z = w.z;
    const float after = wide_after(w, r, r.q0 < r.q1 ? D[r.q0].v[z] : 0.0f);
    for (int q = r.q0; q < r.q1; q++) M[q].v[z] = M[q].v[z] + (q + 1 < r.q1 ? D[q + 1].v[z] : after) * ro(&tMD[q].v[z]);
}

// A row's end, as group_scale_row over this thread's vectors.
TAIL_FN void wide_scale_row(const WideGroup &w, const WideRange &r, f4 *M, f4 *D, f4 *I, float *x, float *out) {
    const float scale = x[X_SCALE];
    if (scale > 1.0f) {
        for (int c = X_E; c <= X_C; c++) x[c] = x[c] / scale;
        float reciprocal = 1.0f / scale;
        for (int q = r.q0; q < r.q1; q++) {
            M[q].v[w.z] = M[q].v[w.z] * reciprocal;
            D[q].v[w.z] = D[q].v[w.z] * reciprocal;
            I[q].v[w.z] = I[q].v[w.z] * reciprocal;
        }
    }
    if (w.z == 0 && w.part == 0)
        for (int c = 0; c < X_COUNT; c++) out[c] = x[c];
}

// The D→D chain that opens a Backward row, as group_backward's: dpv the D after q1 − 1 (shifted
// in from lane z + 1 at the lane's end), each D(q) += dpv·DD(q) + xE (`add` 0 at row L, where
// its D already holds E); returns the lane's last dcv (at q = 0).
TAIL_FN float wide_backward_first_dd(const WideGroup &w, const WideRange &r, f4 *D, float dpv, float xE, int add,
                                     const f4 *tDD) {
    const int z = w.z;
    float dcv = 0.0f;
    wide_chain(w, r, 1, dpv, [&](float d) {
        for (int q = r.q1 - 1; q >= r.q0; q--) {
            dcv = d * ro(&tDD[q].v[z]);
            D[q].v[z] = add ? D[q].v[z] + (dcv + xE) : D[q].v[z] + dcv;
            d = D[q].v[z];
        }
        return d;
    });
    return w.from(dcv, z, 0);
}

// p7_BackwardParser (bck->M null; `rows`: 4·Q vectors of scratch) or p7_Backward, as
// group_backward, with the scale factors of `fwd` until its own xB passes 1e16.
TAIL_FN int wide_backward(const WideGroup &w, const Profile *om, const unsigned char *dsq, int L,
                          const SpecialTransitions *xf, const Matrix *fwd, Matrix *bck, f4 *rows) {
    const int Q = om->Q, z = w.z;
    const WideRange r = wide_range(w, Q);
    const int q0 = r.q0, q1 = r.q1;
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
    for (int q = q0; q < q1; q++) Mc[q].v[z] = xE, Dc[q].v[z] = xE, Ic[q].v[z] = 0.0f;
    float first = q0 < q1 ? Dc[q0].v[z] : 0.0f;
    float dcv = wide_backward_first_dd(w, r, Dc, wide_after(w, r, first), xE, 0, tDD);
    wide_backward_dd(w, r, Dc, dcv, tDD);
    wide_add_md(w, r, Mc, Dc, tMD);
    int own_scales = 0;
    wide_scale_row(w, r, Mc, Dc, Ic, x, bck->xmx + (tail_size_t)L * X_COUNT);

    for (int i = L - 1; i >= 1; i--) {
        const f4 *e = om->rfv + dsq[i] * Q;  // residue i + 1
        for (int q = q0; q < q1; q++) emitted[q].v[z] = Mc[q].v[z] * ro(&e[q].v[z]);
        const float after = wide_after(w, r, q0 < q1 ? emitted[q0].v[z] : 0.0f);
        f4 *Mn = Mc, *Dn = Dc, *In = Ic;  // row i: in place in a parser, its own row in a full matrix
        if (full) Mn = bck->M + (tail_size_t)i * Q, Dn = bck->D + (tail_size_t)i * Q, In = bck->I + (tail_size_t)i * Q;
        for (int q = q1 - 1; q >= q0; q--) {
            float next = q + 1 < q1 ? emitted[q + 1].v[z] : after;
            float ic = Ic[q].v[z];
            In[q].v[z] = (ic * ro(&tII[q].v[z])) + (next * model_successor(tIM, q, Q, z));
            Dn[q].v[z] = next * model_successor(tDM, q, Q, z);
            Mn[q].v[z] = (ic * ro(&tMI[q].v[z])) + (next * model_successor(tMM, q, Q, z));
        }
        Mc = Mn, Dc = Dn, Ic = In;
        float xBv = wide_chain(w, r, 1, 0.0f, [&](float sum) {
            for (int q = q1 - 1; q >= q0; q--) {
                float term = emitted[q].v[z] * ro(&tBM[q].v[z]);
                sum = q == Q - 1 ? term : sum + term;
            }
            return sum;
        });
        const float xB = wide_hsum(w, xBv);
        own_scales = own_scales || (double)xB > 1.0e16;
        backward_specials(xf, xB, own_scales, fwd->xmx[(tail_size_t)i * X_COUNT + X_SCALE], x);
        xE = x[X_E];
        first = q0 < q1 ? Dc[q0].v[z] + xE : 0.0f;
        dcv = wide_backward_first_dd(w, r, Dc, wide_after(w, r, first), xE, 1, tDD);
        for (int q = q0; q < q1; q++) Mc[q].v[z] = Mc[q].v[z] + xE;
        wide_backward_dd(w, r, Dc, dcv, tDD);
        wide_add_md(w, r, Mc, Dc, tMD);
        wide_scale_row(w, r, Mc, Dc, Ic, x, bck->xmx + (tail_size_t)i * X_COUNT);
    }

    // Row 0: only B and N, from M(1); the sum runs q upward here.
    const f4 *e = om->rfv + dsq[0] * Q;
    float xBv = wide_chain(w, r, 0, 0.0f, [&](float sum) {
        for (int q = q0; q < q1; q++) {
            float term = (Mc[q].v[z] * ro(&e[q].v[z])) * ro(&tBM[q].v[z]);
            sum = q == 0 ? term : sum + term;
        }
        return sum;
    });
    const float xN = backward_first_row(xf, wide_hsum(w, xBv), x, z == 0 && w.part == 0, bck);
    if (full)
        for (int q = q0; q < q1; q++) bck->M[q].v[z] = bck->D[q].v[z] = bck->I[q].v[z] = 0.0f;
    bck->has_own_scales = own_scales;
    w.sync();
    if (L > 0 && is_range_error(xN)) return TAIL_RANGE;
    return TAIL_OK;
}

// Forward and Backward by a lane group or by a warp.
TAIL_FN int any_forward(const LaneGroup &g, const Profile *om, const unsigned char *dsq, int L,
                        const SpecialTransitions *xf, Matrix *fwd, f4 *rows, float *score) {
    return group_forward(g, om, dsq, L, xf, fwd, rows, score);
}

TAIL_FN int any_forward(const WideGroup &w, const Profile *om, const unsigned char *dsq, int L,
                        const SpecialTransitions *xf, Matrix *fwd, f4 *rows, float *score) {
    return wide_forward(w, om, dsq, L, xf, fwd, rows, score);
}

TAIL_FN int any_backward(const LaneGroup &g, const Profile *om, const unsigned char *dsq, int L,
                         const SpecialTransitions *xf, const Matrix *fwd, Matrix *bck, f4 *rows) {
    return group_backward(g, om, dsq, L, xf, fwd, bck, rows);
}

TAIL_FN int any_backward(const WideGroup &w, const Profile *om, const unsigned char *dsq, int L,
                         const SpecialTransitions *xf, const Matrix *fwd, Matrix *bck, f4 *rows) {
    return wide_backward(w, om, dsq, L, xf, fwd, bck, rows);
}

}  // namespace gpuhmm::tail

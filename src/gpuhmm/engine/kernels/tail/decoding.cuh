// HMMER 3.4's posterior decoding (impl_sse/decoding.c): p7_DomainDecoding on the Forward and
// Backward parser matrices, and p7_Decoding on full matrices (tests/oracle/decoding.py).
//
// Thread → data: one thread decodes one pair's parser matrices (domain_decoding), serially, row
// after row; a lane group or a warp decodes one envelope's full matrices (decoding), each thread
// lane z of its vectors.
// Lane width: 4 float32 lanes (f4); every lane is the same scalar product, lane by lane.
// Rounding: every product is float32 in HMMER's left-to-right order, ((F·B)·scale)·product; the
// running scale product and the cumulative B and E occupancies are strictly sequential float32;
// 1/N_b(0) and 1 − njcp are single float32 operations (HMMER's double forms round to the same).
#pragma once
#include "common.cuh"
#include "lanegroup.cuh"

namespace gpuhmm::tail {

// Infinity of either sign, by bits (no library isinf on both compilers).
TAIL_FN int decoding_is_inf(float x) { return (float_bits(x) & 0x7fffffffu) == 0x7f800000u; }

// The special cell `column` of row i of a matrix.
TAIL_FN float decoding_x(const Matrix *mx, int i, int column) { return mx->xmx[i * X_COUNT + column]; }

// _scale_products' factor for row r: Forward's scale over Backward's, only when Backward kept
// its own scale factors (otherwise the product stays 1/N_b(0) for every row).
TAIL_FN float decoding_scale_step(const Matrix *fwd, const Matrix *bck, int r, float product) {
    if (!bck->has_own_scales) return product;
    return product * (decoding_x(fwd, r, X_SCALE) / decoding_x(bck, r, X_SCALE));
}

// p7_DomainDecoding: btot, etot and mocc of rows 0..L (each L + 1 floats, caller-allocated) from
// the multihit parser matrices. The scale product at row i is the one after rows 0..i−1's factors
// (B terms use it before row i−1's update, E and N/J/C terms after). TAIL_RANGE where the final
// scale product is infinite (HMMER's eslERANGE); the arrays are filled either way.
TAIL_FN int domain_decoding(const SpecialTransitions *xf, const Matrix *fwd, const Matrix *bck, float *btot,
                            float *etot, float *mocc) {
    const int L = fwd->L;
    float product = 1.0f / decoding_x(bck, 0, X_N);
    btot[0] = 0.0f;
    etot[0] = 0.0f;
    mocc[0] = 0.0f;
    for (int i = 1; i <= L; i++) {
        const float *f0 = fwd->xmx + (i - 1) * X_COUNT, *b0 = bck->xmx + (i - 1) * X_COUNT;
        const float *f1 = fwd->xmx + i * X_COUNT, *b1 = bck->xmx + i * X_COUNT;
        const float before = product;
        product = decoding_scale_step(fwd, bck, i - 1, product);
        btot[i] = btot[i - 1] + ((f0[X_B] * b0[X_B]) * f0[X_SCALE]) * before;
        etot[i] = etot[i - 1] + ((f1[X_E] * b1[X_E]) * f1[X_SCALE]) * product;
        // Probability that residue i is emitted by N, J or C (each from row i−1 to row i).
        float njcp = ((f0[X_N] * b1[X_N]) * xf->loop) * product;
        njcp = njcp + ((f0[X_J] * b1[X_J]) * xf->loop) * product;
        njcp = njcp + ((f0[X_C] * b1[X_C]) * xf->loop) * product;
        mocc[i] = 1.0f - njcp;
    }
    return decoding_is_inf(product) ? TAIL_RANGE : TAIL_OK;
}

// p7_Decoding's posterior matrix: M and I (L + 1) · Q vectors each, row 0 zero (D is always zero
// and not kept), and the N, J, C emission posteriors of rows 0..L.
struct Posteriors {
    int L, Q;
    f4 *M, *I;
    float *N, *J, *C;
};

// p7_Decoding from the full unihit Forward and Backward matrices of an envelope, by the lane group
// or warp g: each thread decodes lane z of its vectors, the one that `leads` the N, J and C rows;
// the group is synchronized when it returns. Sets pp->L and pp->Q. Works in place (pp->M == bck->M, pp->I ==
// bck->I, as HMMER decodes into the Backward matrix): each cell is read before it is written.
// TAIL_RANGE, with pp untouched, where the scale product overflows (the reference's None: the
// envelope is dropped).
template <class Group>
TAIL_FN int decoding(const Group &g, const SpecialTransitions *xf, const Matrix *fwd, const Matrix *bck,
                     Posteriors *pp) {
    const int L = fwd->L, Q = fwd->Q, z = g.z;
    const WideRange r = wide_range(g, Q);
    const float start = 1.0f / decoding_x(bck, 0, X_N);
    // First pass: only the final product decides the overflow, before anything is written.
    float product = start;
    for (int i = 1; i <= L; i++) product = decoding_scale_step(fwd, bck, i, product);
    if (decoding_is_inf(product)) return TAIL_RANGE;

    pp->L = L;
    pp->Q = Q;
    for (int q = r.q0; q < r.q1; q++) pp->M[q].v[z] = pp->I[q].v[z] = 0.0f;
    if (leads(g)) pp->N[0] = pp->J[0] = pp->C[0] = 0.0f;
    product = start;  // the product before row i's own update
    for (int i = 1; i <= L; i++) {
        const float row_scale = product * decoding_x(fwd, i, X_SCALE);
        for (int q = r.q0; q < r.q1; q++) {
            const int at = i * Q + q;
            pp->M[at].v[z] = (fwd->M[at].v[z] * bck->M[at].v[z]) * row_scale;
            pp->I[at].v[z] = (fwd->I[at].v[z] * bck->I[at].v[z]) * row_scale;
        }
        if (leads(g)) {
            pp->N[i] = ((decoding_x(fwd, i - 1, X_N) * decoding_x(bck, i, X_N)) * xf->loop) * product;
            pp->J[i] = ((decoding_x(fwd, i - 1, X_J) * decoding_x(bck, i, X_J)) * xf->loop) * product;
            pp->C[i] = ((decoding_x(fwd, i - 1, X_C) * decoding_x(bck, i, X_C)) * xf->loop) * product;
        }
        product = decoding_scale_step(fwd, bck, i, product);
    }
    g.sync();
    return TAIL_OK;
}

}  // namespace gpuhmm::tail

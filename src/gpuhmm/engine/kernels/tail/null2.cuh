// HMMER 3.4's null2 (biased composition) model of a domain (impl_sse/null2.c):
// p7_Null2_ByExpectation, from an envelope's posteriors, and p7_Null2_ByTrace, from the nodes
// one sampled domain used (tests/oracle/null2.py).
//
// Thread → data: the lanes of a warp split a sampled domain's residues x (by trace); a lane group
// or a warp computes an envelope's odds (by expectation), each thread summing lane z of its
// vectors, the sums over a lane handed from part to part in q order.
// Lane width: 4 float32 lanes (f4); the usage and odds sums run lane-wise over the striped
// vectors q = 0..Q−1, then one horizontal sum (a0 + a1) + (a2 + a3).
// Rounding: float32 throughout, in the reference's order: per-node usage sums run over rows in
// order starting from row 1's value; the normalizer is 1 / (float) Ld; for residue x the striped
// sum starts at usage_M(0)·odds(0), then adds usage_I(0), usage_M(1)·odds(1), usage_I(1), ...;
// then the N/C/J share is added (by trace, only the used nodes' terms: null2_of_nodes says why
// that is exact). Degenerate codes get the float32 mean of their members' odds
// (esl_abc_FAvgScVec); gap, nonresidue and missing codes get 1.
#pragma once
#include "common.cuh"
#include "decoding.cuh"
#include "lanegroup.cuh"

namespace gpuhmm::tail {

// _odds' last part: each degenerate code K+1..Kp−3 gets a float32 sum of its members' odds from 0,
// over their number; gap, nonresidue and missing data get 1.
TAIL_FN void null2_degenerate_odds(const Profile *om, float *null2) {
    const int K = om->K, Kp = om->Kp;
    for (int x = K + 1; x <= Kp - 3; x++) {
        const unsigned char *row = om->degenerate + (x - K - 1) * (K + 1);
        float total = 0.0f;
        for (int m = 1; m <= row[0]; m++) total = total + null2[row[m]];
        null2[x] = total / (float)row[0];
    }
    null2[K] = 1.0f;       // gap
    null2[Kp - 2] = 1.0f;  // nonresidue
    null2[Kp - 1] = 1.0f;  // missing data
}

// p7_Null2_ByExpectation by the lane group or warp g: the null2 odds (Kp floats, written by the
// thread that `leads`) of the envelope whose posteriors are `pp` (rows 1..L): each node's
// expected M and I use summed over rows, over L. `scratch`: 2·Q f4.
template <class Group>
TAIL_FN void null2_by_expectation(const Group &g, const Profile *om, const Posteriors *pp, f4 *scratch, float *null2) {
    const int Q = om->Q, L = pp->L, z = g.z;
    const WideRange r = wide_range(g, Q);
    f4 *m_use = scratch, *i_use = scratch + Q;
    for (int q = r.q0; q < r.q1; q++) {
        m_use[q].v[z] = pp->M[Q + q].v[z];
        i_use[q].v[z] = pp->I[Q + q].v[z];
    }
    for (int i = 2; i <= L; i++) {
        for (int q = r.q0; q < r.q1; q++) {
            m_use[q].v[z] = m_use[q].v[z] + pp->M[i * Q + q].v[z];
            i_use[q].v[z] = i_use[q].v[z] + pp->I[i * Q + q].v[z];
        }
    }
    const float norm = 1.0f / (float)L;
    for (int q = r.q0; q < r.q1; q++) {
        m_use[q].v[z] = m_use[q].v[z] * norm;
        i_use[q].v[z] = i_use[q].v[z] * norm;
    }
    float n = pp->N[1], c = pp->C[1], j = pp->J[1];
    for (int i = 2; i <= L; i++) {
        n = n + pp->N[i];
        c = c + pp->C[i];
        j = j + pp->J[i];
    }
    const float xfactor = (n * norm + c * norm) + j * norm;
    for (int x = 0; x < om->K; x++) {
        const f4 *odds = om->rfv + x * Q;
        const float sv = wide_chain(g, r, 0, 0.0f, [&](float sum) {
            for (int q = r.q0; q < r.q1; q++) {
                const float used = m_use[q].v[z] * odds[q].v[z];
                sum = q == 0 ? used : sum + used;
                sum = sum + i_use[q].v[z];
            }
            return sum;
        });
        const float total = wide_hsum(g, sv) + xfactor;
        if (leads(g)) null2[x] = total;
    }
    if (leads(g)) null2_degenerate_odds(om, null2);
}

// p7_Null2_ByTrace's odds of residues x = x0, x0 + dx, … < K, from the n nodes a domain used:
// node e at offset offsets[e] = 4q + z of the striped rows (nodes ascending), used counts[e]
// times, norm = 1 / the domain's emitting steps. Sparse, and exact: the dense sum's other terms
// are 0·odds = +0 (odds are finite) and its I usage is 0, and x + (+0) = x for the sums ≥ +0.
// A B..E segment emits at least once (local entry is B→M), so norm is finite.
TAIL_FN void null2_of_nodes(const Profile *om, const int *offsets, const float *counts, int n, float norm, int x0,
                            int dx, float *null2) {
    const float *odds = (const float *)om->rfv;
    for (int x = x0; x < om->K; x += dx) {
        const float *row = odds + (tail_size_t)x * 4 * om->Q;
        float lane[4];
        int e = 0;
        for (int z = 0; z < 4; z++) {  // the nodes of lane z are consecutive, in q order
            float sum = 0.0f;
            for (; e < n && (offsets[e] & 3) == z; e++) sum = sum + (counts[e] * norm) * ro(row + offsets[e]);
            lane[z] = sum;
        }
        null2[x] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    }
}

}  // namespace gpuhmm::tail

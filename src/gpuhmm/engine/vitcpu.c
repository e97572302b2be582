/* HMMER 3.4's p7_ViterbiFilter for the CPU: the arithmetic of the numpy reference
 * (engine/reference/vitfilter.py, viterbi_scores) in node order, one sequence at a time.
 *
 * Node n (0-based) is model node n + 1; the striped vectors of impl_sse/vitfilter.c hold node
 * z*Q + q in lane z of vector q, so "vector q - 1, lanes shifted in at q = 0" is node n - 1 and
 * the padding nodes (past M, up to 8Q) come last. Cells add with int16 saturation, eight nodes
 * at a time (SSE2 or AArch64's NEON, else plain C: -DVITCPU_PORTABLE forces it); the specials are int64,
 * as in the reference. The caller turns xC into nats (stages.vitlayout.scores_from_xc).
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NEG_INF (-32768)
#define LANES 8

#if defined(__SSE2__) && !defined(VITCPU_PORTABLE)
#include <emmintrin.h>
typedef __m128i lanes_t;
#define LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define STORE(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define ADDS(a, b) _mm_adds_epi16(a, b)
#define MAX(a, b) _mm_max_epi16(a, b)
#define SPLAT(x) _mm_set1_epi16(x)
/* Lanes moved up by k, -inf shifted in: HMMER's slli-and-or. */
#define SHIFT_IN(v, k) _mm_or_si128(_mm_slli_si128(v, 2 * (k)), _mm_srli_si128(_mm_set1_epi16(NEG_INF), 16 - 2 * (k)))
#define LAST_LANE(v) _mm_unpackhi_epi64(_mm_shufflehi_epi16(v, 0xFF), _mm_shufflehi_epi16(v, 0xFF))
static inline int16_t lane_max(lanes_t v) {
    v = _mm_max_epi16(v, _mm_srli_si128(v, 8));
    v = _mm_max_epi16(v, _mm_srli_si128(v, 4));
    v = _mm_max_epi16(v, _mm_srli_si128(v, 2));
    return (int16_t)_mm_extract_epi16(v, 0);
}
#elif defined(__aarch64__) && !defined(VITCPU_PORTABLE)
#include <arm_neon.h>
typedef int16x8_t lanes_t;
#define LOAD(p) vld1q_s16(p)
#define STORE(p, v) vst1q_s16(p, v)
#define ADDS(a, b) vqaddq_s16(a, b)
#define MAX(a, b) vmaxq_s16(a, b)
#define SPLAT(x) vdupq_n_s16(x)
#define SHIFT_IN(v, k) vextq_s16(vdupq_n_s16(NEG_INF), v, LANES - (k))
#define LAST_LANE(v) vdupq_laneq_s16(v, LANES - 1)
static inline int16_t lane_max(lanes_t v) { return vmaxvq_s16(v); }
#else
typedef struct {
    int16_t v[LANES];
} lanes_t;
static inline lanes_t LOAD(const int16_t *p) {
    lanes_t out;
    memcpy(out.v, p, sizeof out.v);
    return out;
}
static inline void STORE(int16_t *p, lanes_t x) { memcpy(p, x.v, sizeof x.v); }
static inline lanes_t ADDS(lanes_t a, lanes_t b) {
    for (int z = 0; z < LANES; z++) {
        const int32_t sum = (int32_t)a.v[z] + b.v[z];
        a.v[z] = (int16_t)(sum < -32768 ? -32768 : (sum > 32767 ? 32767 : sum));
    }
    return a;
}
static inline lanes_t MAX(lanes_t a, lanes_t b) {
    for (int z = 0; z < LANES; z++) a.v[z] = a.v[z] > b.v[z] ? a.v[z] : b.v[z];
    return a;
}
static inline lanes_t SPLAT(int16_t x) {
    lanes_t out;
    for (int z = 0; z < LANES; z++) out.v[z] = x;
    return out;
}
static inline lanes_t SHIFT_IN(lanes_t a, int k) {
    lanes_t out;
    for (int z = 0; z < LANES; z++) out.v[z] = z < k ? NEG_INF : a.v[z - k];
    return out;
}
static inline lanes_t LAST_LANE(lanes_t a) { return SPLAT(a.v[LANES - 1]); }
static inline int16_t lane_max(lanes_t a) {
    int16_t best = a.v[0];
    for (int z = 1; z < LANES; z++) best = a.v[z] > best ? a.v[z] : best;
    return best;
}
#endif

/* A row of cells: `nodes` values with -inf at index -1 (node 0's predecessor) and room for the
 * M -> D values shifted one node on (index `nodes`). */
#define ROW_PAD LANES
#define ROW_SIZE(nodes) ((size_t)(nodes) + 2 * ROW_PAD)

/* The D -> D closure of a row, d(n) = max(d(n), closed d(n - 1) + DD(n - 1)): a max-plus
 * prefix scan, in steps of 1, 2 and 4 lanes within each block of eight nodes, then the block
 * before's last node carried in. `closure` holds, per node, DD summed over the 1, 2 and 4 nodes
 * before and over those back to the block before's last, each sum (floored at -65536, which no
 * cell can climb out of) split into two int16 words added one after the other: saturating
 * once at the floor, they add as the exact sum would against any cell of the max. */
static void close_d(int nodes, const int16_t *closure, int16_t *d) {
    const int16_t *one = closure, *two_a = one + nodes, *two_b = two_a + nodes, *four_a = two_b + nodes;
    const int16_t *four_b = four_a + nodes, *carry_a = four_b + nodes, *carry_b = carry_a + nodes;
    lanes_t carry = SPLAT(NEG_INF);
    for (int n = 0; n < nodes; n += LANES) {
        lanes_t v = LOAD(d + n);
        v = MAX(v, ADDS(SHIFT_IN(v, 1), LOAD(one + n)));
        v = MAX(v, ADDS(ADDS(SHIFT_IN(v, 2), LOAD(two_a + n)), LOAD(two_b + n)));
        v = MAX(v, ADDS(ADDS(SHIFT_IN(v, 4), LOAD(four_a + n)), LOAD(four_b + n)));
        v = MAX(v, ADDS(ADDS(carry, LOAD(carry_a + n)), LOAD(carry_b + n)));
        STORE(d + n, v);
        carry = LAST_LANE(v);
    }
}

/* One sequence of `length` residue codes against a profile of `nodes` (8Q) nodes.
 * emissions: Kp x nodes; transitions: 7 x nodes (BM MM IM DM MD MI II); specials: E move,
 * E loop, N loop, J loop, C loop, base, ddbound; closure: close_d's 7 x nodes. `scratch`: 6 rows. */
static void score_one(int nodes, const int16_t *emissions, const int16_t *transitions, const int16_t *closure,
                      const int64_t *specials, int64_t move, const uint8_t *residues, int64_t length, int16_t *scratch, int64_t *xc_out,
                      uint8_t *overflow_out) {
    const int16_t *bm = transitions, *mm = bm + nodes, *im = mm + nodes, *dm = im + nodes;
    const int16_t *md = dm + nodes, *mi = md + nodes, *ii = mi + nodes;
    int16_t *row[6];
    for (int r = 0; r < 6; r++) {
        row[r] = scratch + r * ROW_SIZE(nodes) + ROW_PAD;
        for (int n = -1; n <= nodes; n++) row[r][n] = NEG_INF;
    }
    int16_t *m = row[0], *ins = row[1], *d = row[2], *m_next = row[3], *i_next = row[4], *d_next = row[5];
    const int64_t e_move = specials[0], e_loop = specials[1], n_loop = specials[2];
    const int64_t j_loop = specials[3], c_loop = specials[4], base = specials[5], ddbound = specials[6];
    int64_t xn = base, xb = base + move, xj = NEG_INF, xc = NEG_INF;
    uint8_t overflow = 0;

    for (int64_t i = 0; i < length && !overflow; i++) {
        const int16_t *emission = emissions + (int64_t)residues[i] * nodes;
        const lanes_t entry = SPLAT((int16_t)(xb < -32768 ? -32768 : (xb > 32767 ? 32767 : xb)));
        lanes_t x_e = SPLAT(NEG_INF), to_d_max = SPLAT(NEG_INF);
        for (int n = 0; n < nodes; n += LANES) {
            lanes_t sv = ADDS(entry, LOAD(bm + n));
            sv = MAX(sv, ADDS(LOAD(m + n - 1), LOAD(mm + n)));
            sv = MAX(sv, ADDS(LOAD(ins + n - 1), LOAD(im + n)));
            sv = MAX(sv, ADDS(LOAD(d + n - 1), LOAD(dm + n)));
            sv = ADDS(sv, LOAD(emission + n));
            STORE(m_next + n, sv);
            x_e = MAX(x_e, sv);
            STORE(i_next + n, MAX(ADDS(LOAD(m + n), LOAD(mi + n)), ADDS(LOAD(ins + n), LOAD(ii + n))));
            /* M -> D lands one node on: node 0 keeps -inf, the last node's falls off the end. */
            const lanes_t to_d = ADDS(sv, LOAD(md + n));
            STORE(d_next + n + 1, to_d);
            to_d_max = MAX(to_d_max, to_d);
        }
        d_next[0] = NEG_INF;
        const int64_t best = lane_max(x_e);
        if (best >= 32767) overflow = 1; /* HMMER stops with +inf; no later row can clear it */
        xn += n_loop;
        xc = xc + c_loop > best + e_move ? xc + c_loop : best + e_move;
        xj = xj + j_loop > best + e_loop ? xj + j_loop : best + e_loop;
        xb = (xj > xn ? xj : xn) + move;
        /* Lazy F: the D -> D closure, only where a D -> D path could beat entering from B. */
        if ((int64_t)lane_max(to_d_max) + ddbound > xb) close_d(nodes, closure, d_next);
        int16_t *swap;
        swap = m, m = m_next, m_next = swap;
        swap = ins, ins = i_next, i_next = swap;
        swap = d, d = d_next, d_next = swap;
    }
    *xc_out = xc;
    *overflow_out = overflow;
}

/* `count` sequences of one length, end to end in `residues`: xC and the overflow flag of each.
 * Returns 1 where the rows cannot be allocated. */
int vitcpu_scores(int nodes, const int16_t *emissions, const int16_t *transitions, const int16_t *closure,
                  const int64_t *specials, int64_t move, const uint8_t *residues, int64_t length, int64_t count, int64_t *xc,
                  uint8_t *overflow) {
    int16_t *scratch = malloc(sizeof(int16_t) * 6 * ROW_SIZE(nodes));
    if (!scratch) return 1;
    for (int64_t s = 0; s < count; s++)
        score_one(nodes, emissions, transitions, closure, specials, move, residues + s * length, length, scratch, xc + s,
                  overflow + s);
    free(scratch);
    return 0;
}

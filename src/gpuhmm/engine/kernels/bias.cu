// The bias filter, HMMER 3.4 bg.c p7_bg_FilterScore: the Forward score of the two-state
// composition HMM (esl_hmm_Forward with per-row rescaling) plus its length terms, in float32,
// bit for bit as engine/reference/biasfilter.py computes it (that numpy model is the oracle).
//
// Thread → data. One thread per (model, sequence) pair: thread i scores pair i, model
// pair_model[i] against sequence pair_sequence[i] (residues[offsets[s] .. offsets[s + 1]),
// Easel digital codes). The pair list is the host's: sorting it by sequence, then by model,
// keeps a warp's residue reads on few cache lines and its loop lengths alike. Per model, odds
// holds the 29 rows of esl_hmm_Configure's emission odds (stages/biasfilter.py, _emission_odds: .x the
// null state, .y the composition state) and leave1, stay1 the composition state's transitions
// from L1 = M/8; per sequence, p1 = L/(L+1), length_term = L·logf(p1) and tail_term =
// logf(1 − p1), rounded by the host through glibc's logf (biasfilter.length_terms).
//
// Precision and rounding. Every float32 step is the numpy model's IEEE operation, in its
// order, written with __fmul_rn/__fadd_rn/__fdiv_rn so that nothing contracts into an FMA:
//   row 0:   dp = e[0] · (0.999, 0.001)
//   row i>0: dp0 = (dp0·p1 + dp1·leave1)·e0,  dp1 = (dp0·(1 − p1) + dp1·stay1)·e1
//   every row: peak = max(0, dp0, dp1); dp /= peak; total += float(log(double(peak)))
// (the peak's own cell is set to 1, which is what x/x gives for any finite x > 0).
//   end:     total += float(log(double(dp0 + dp1))); score = (total + length_term) + tail_term
// Compiled without -use_fast_math, and with -ftz=true as CuPy compiles every kernel; numpy keeps
// subnormals, but none arises here: each row is divided by its peak, so the other cell is at
// least a transition (1/(L+1) or leave1) times an emission odds ratio, far above FLT_MIN.
// The one step that is not exactly rounded is the double log: numpy rounds glibc's log to
// float32, and CUDA's log may differ from glibc's by an ulp or two. Where the double
// result lies within 8–16 double ulps of a float32 rounding boundary, the two libraries could
// round to different floats; the pair is then flagged in `uncertain` and the host recomputes it
// (engine/filters.py, resolve_uncertain). The flag is 1 also where a peak is 0 or not finite.
// An empty sequence scores 0 and is certain, as in the numpy model.
#include "types.cuh"

namespace gpuhmm {

constexpr int BIAS_CODES = 29;  // Easel's amino alphabet, Kp: canonical, gap, degenerate, '*', '~'

// bg.c's initial state probabilities, numpy's float32(0.999) and float32(0.001) bit for bit.
constexpr float START_NULL = 0x1.ff7ceep-1f;
constexpr float START_COMPOSITION = 0x1.0624dep-10f;

// float(d), and whether a log within about 8 ulps of d could round to another float. Rounding
// is monotone, so if both ends of [d − tol, d + tol] round to the same float, all of it does.
// tol = |d|·2⁻⁴⁹ is 8 to 16 ulps of d; log(1) = 0 is exact in both libraries. A NaN or an
// infinite d (peak 0) compares unequal and is flagged.
__device__ __forceinline__ float rounded_log(double value, bool &uncertain) {
    const double d = log(value);
    const double tol = fabs(d) * 0x1p-49;
    const float low = __double2float_rn(d - tol);
    const float high = __double2float_rn(d + tol);
    uncertain |= !(low == high);
    return __double2float_rn(d);
}

template <int CTA_THREADS>
__global__ void __launch_bounds__(CTA_THREADS)
bias_filter(const uint8_t *__restrict__ residues, const long long *__restrict__ offsets,
            const int *__restrict__ pair_model, const int *__restrict__ pair_sequence, int n_pairs,
            const float2 *__restrict__ odds, const float *__restrict__ leave1,
            const float *__restrict__ stay1, const float *__restrict__ p1,
            const float *__restrict__ length_term, const float *__restrict__ tail_term,
            float *__restrict__ score, uint8_t *__restrict__ uncertain) {
    const long long pair = (long long)blockIdx.x * CTA_THREADS + threadIdx.x;
    if (pair >= n_pairs) return;
    const int model = pair_model[pair];
    const int sequence = pair_sequence[pair];
    const long long start = offsets[sequence];
    const long long L = offsets[sequence + 1] - start;
    if (L == 0) {
        score[pair] = 0.0f;
        uncertain[pair] = 0;
        return;
    }

    const float2 *e = odds + (long long)model * BIAS_CODES;
    const float to_null = p1[sequence];             // t[0][0]
    const float to_composition = __fsub_rn(1.0f, to_null);  // t[0][1]
    const float leave = leave1[model];              // t[1][0]
    const float stay = stay1[model];                // t[1][1]
    const uint8_t *x = residues + start;

    bool unsure = false;
    float total = 0.0f;
    float2 row = __ldg(e + __ldg(x));
    float dp0 = __fmul_rn(row.x, START_NULL);
    float dp1 = __fmul_rn(row.y, START_COMPOSITION);
    for (long long i = 0;;) {
        // peak = max(0, dp0, dp1), dp /= peak. The cell holding the peak becomes peak/peak,
        // exactly 1 in IEEE arithmetic, so only the other one is divided. (Both cells are ≥ 0;
        // where both are 0 the peak is 0, its log −inf flags the pair, and the host rescores it.)
        float peak;
        if (dp1 > dp0) {
            peak = dp1;
            dp0 = __fdiv_rn(dp0, peak);
            dp1 = 1.0f;
        } else {
            peak = dp0;
            dp1 = __fdiv_rn(dp1, peak);
            dp0 = 1.0f;
        }
        total = __fadd_rn(total, rounded_log((double)peak, unsure));
        if (++i == L) break;
        row = __ldg(e + __ldg(x + i));
        const float next0 = __fmul_rn(__fadd_rn(__fmul_rn(dp0, to_null), __fmul_rn(dp1, leave)), row.x);
        const float next1 = __fmul_rn(__fadd_rn(__fmul_rn(dp0, to_composition), __fmul_rn(dp1, stay)), row.y);
        dp0 = next0;
        dp1 = next1;
    }
    total = __fadd_rn(total, rounded_log((double)__fadd_rn(dp0, dp1), unsure));
    score[pair] = __fadd_rn(__fadd_rn(total, length_term[sequence]), tail_term[sequence]);
    uncertain[pair] = unsure ? 1 : 0;
}

}  // namespace gpuhmm

// F1 decision (HMMER 3.4 ssvfilter.c p7_SSVFilter's tests after get_xE, then p7_Pipeline's F1
// test on the MSV score) for every (model, sequence) of an SSV launch, so that only the passing
// and the undecided pairs leave the GPU. msvfilter.f1_outcome is the same decision in numpy.
//
// Thread → data: one thread per (model, sequence); blockIdx.y is the model, blockIdx.x·THREADS +
// threadIdx.x the sequence. Lanes: plain int for the byte arithmetic (no saturation can bind:
// the tests below are HMMER's overflow tests), IEEE float32 and double with explicit rounding
// (_rn intrinsics, no contraction) for the score, in msvfilter.scores_from_xj's and score_bits' order:
// ((float)(xJ − tjb) − base) / scale_b − 3, then (float)((double)(score − null1) / ln 2).
// Overflow: SSV's certain overflow, or xE ≥ 255 − bias, scores +inf (HMMER's eslINFINITY) and
// passes.
//
// Outcome per pair: F1_FAIL, F1_PASS (score written), F1_UNDECIDED (SSV cannot decide: the full
// MSV filter must, msvpairs.cu). Empty sequences fail, as the pipeline skips them.
#include "types.cuh"

namespace gpuhmm {

constexpr uint8_t F1_FAIL = 0;
constexpr uint8_t F1_PASS = 1;
constexpr uint8_t F1_UNDECIDED = 2;

// stages/msvfilter.py's F1_PARAMETERS mirrors this.
struct F1Parameters {
    int base, bias, tbm, tec;
    float scale, threshold;  // scale_b; the least passing bit score (msvfilter.pass_threshold)
};

template <int THREADS>
__global__ void __launch_bounds__(THREADS)
f1_decide(const uint8_t *__restrict__ best, int sequences, const F1Parameters *__restrict__ parameters,
          const uint8_t *__restrict__ tjb, const float *__restrict__ null1, const int *__restrict__ length,
          uint8_t *__restrict__ outcome, float *__restrict__ score) {
    const int s = blockIdx.x * THREADS + threadIdx.x;
    if (s >= sequences) return;
    const F1Parameters p = parameters[blockIdx.y];
    const long long at = (long long)blockIdx.y * sequences + s;
    if (length[s] == 0) {
        outcome[at] = F1_FAIL;
        return;
    }
    const int b = best[at];
    const int tjbm = tjb[s] + p.tbm;
    const bool unsafe = tjbm + p.tec + p.bias >= 127;
    const bool ssv_overflow = b + 128 >= 255 - p.bias;
    const bool certain = p.base - tjbm >= 128;
    const int x_e = b + p.base - tjbm;
    const int x_j = x_e - p.tec;
    bool undecided = unsafe || (ssv_overflow && !certain);
    const bool overflow = !undecided && (ssv_overflow || x_e >= 255 - p.bias);
    if (!overflow && x_j > p.base) undecided = true;
    if (undecided) {
        outcome[at] = F1_UNDECIDED;
        return;
    }
    float value = __int_as_float(0x7f800000);  // +inf
    if (!overflow) {
        const float numerator = __fsub_rn(float(x_j - tjb[s]), float(p.base));
        value = __fsub_rn(__fdiv_rn(numerator, p.scale), 3.0f);
    }
    const float bits = __double2float_rn(__ddiv_rn(double(__fsub_rn(value, null1[s])), 0.69314718055994530942));
    outcome[at] = bits >= p.threshold ? F1_PASS : F1_FAIL;
    score[at] = value;
}

}  // namespace gpuhmm

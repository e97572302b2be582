// The pieces HMMER 3.4's Forward and Backward in probability space (impl_sse/fwdback.c:
// forward_engine and backward_engine) share, which parsers.cuh's lane groups run: the special
// states of a Forward row, the certified log of the scale factors, the range test.
//
// Thread → data: called by each thread of a lane group with the same values. Lane width: scalar.
// Overflow: rows whose xE (Forward) or xB (Backward's own scales) passes 1e4 are divided by it,
// as HMMER does; NaN, 0 or infinite final values are HMMER's eslERANGE (TAIL_RANGE).
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

// A Forward row's special states from its xE, in HMMER's order; where xE passes 1e4 (the row is
// rescaled) they come out divided by it.
TAIL_FN void forward_specials(const SpecialTransitions *xf, float xE, float *xN, float *xC, float *xJ, float *xB) {
    *xN = *xN * xf->loop;
    *xC = (*xC * xf->loop) + (xE * xf->e_move);
    *xJ = (*xJ * xf->loop) + (xE * xf->e_loop);
    *xB = (*xJ * xf->move) + (*xN * xf->move);
    if (xE > 1.0e4f) *xN = *xN / xE, *xC = *xC / xE, *xJ = *xJ / xE, *xB = *xB / xE;
}

}  // namespace gpuhmm_tail

// Lane arithmetic for the MSV/SSV kernels: two exact emulations of HMMER 3.4's unsigned-byte
// SIMD (msvfilter.c p7_MSVFilter, ssvfilter.c p7_SSVFilter), chosen by compute capability
// (tuning.py). Thread → data: each 32-bit register of a thread holds W cells, one per vector
// lane, of one model word; msv.cu maps threads and words to model nodes.
//
// Lanes16 (sm_90+): two 16-bit cells per 32-bit word, on Hopper's DPX instructions
// (__viaddmax_s16x2, __vimax3_s16x2, __vmaxs2: one SASS instruction each). HMMER's byte cells
// saturate at 0 and 255; here only the floor at 0 is applied. The 255 ceiling never binds
// before HMMER's own overflow test has fired (see the proof at each cell function), and after
// that test fires the sequence's answer is fixed (+inf), so later values may wrap harmlessly.
//
// Lanes8 (older GPUs): CUDAMPF's four 8-bit cells per word with the SIMD-within-a-register
// intrinsics (__vaddus4, __vsubus4, __vmaxu4), HMMER's saturating byte arithmetic itself.
//
// Both provide: W (cells per word), the table cell width, the cell updates and the
// begin-of-diagonal shift. Table words are used as they are: 16-bit lanes read int16 gains
// (bias − cost; an 8-bit table would need a byte permute per word on the same pipe as the
// DP instructions), 8-bit lanes read HMMER's biased byte costs.
#pragma once

#include "types.cuh"

namespace gpuhmm {

struct Lanes16 {
    static constexpr int W = 2;
    static constexpr int CELL_BYTES = 2;
    static constexpr int SHIFT = 16;  // one cell, the shift that moves a diagonal one lane up

    __device__ __forceinline__ static uint32_t splat(int value) {
        return (uint32_t(value) & 0xffffu) * 0x10001u;
    }

    // SSV, ssvfilter.c with the J state removed: T = max(T_prev + (bias − cost), 0) in units
    // above the begin score. Its 8-bit form, subs_epi8 from a −128 floor, equals this until
    // T ≥ 127 − bias, and that is the point at which ssvfilter.c reports an overflow.
    __device__ __forceinline__ static uint32_t ssv(uint32_t previous, uint32_t gain, uint32_t) {
        return __viaddmax_s16x2(previous, gain, 0u);
    }

    // MSV, msvfilter.c: sat(sat(max(M_prev, xB) + bias) − cost). The inner saturation at 255
    // is dropped: M_prev ≤ xE_prev < 255 − bias, or the previous row overflowed; and
    // xB + bias < 255, because xB = max(base, xJ) − tjbm with xJ < 255 − bias − tec and
    // base + bias ≤ 255 (checked per model on the host, msv_supported()). The outer
    // saturation is the floor at 0 here; the cell cannot exceed 255 − 0 from below 255.
    __device__ __forceinline__ static uint32_t msv(uint32_t previous, uint32_t begin, uint32_t gain, uint32_t) {
        return __viaddmax_s16x2(__vmaxs2(previous, begin), gain, 0u);
    }

    __device__ __forceinline__ static uint32_t max(uint32_t a, uint32_t b) { return __vmaxs2(a, b); }
    __device__ __forceinline__ static uint32_t max3(uint32_t a, uint32_t b, uint32_t c) {
        return __vimax3_s16x2(a, b, c);
    }
    __device__ __forceinline__ static int horizontal_max(uint32_t v) {
        return ::max(int(int16_t(v & 0xffffu)), int(int16_t(v >> 16)));
    }
};

struct Lanes8 {
    static constexpr int W = 4;
    static constexpr int CELL_BYTES = 1;
    static constexpr int SHIFT = 8;

    __device__ __forceinline__ static uint32_t splat(int value) { return (uint32_t(value) & 0xffu) * 0x01010101u; }

    // HMMER's byte arithmetic as it is: adds_epu8 then subs_epu8 (SSV in unsigned form).
    __device__ __forceinline__ static uint32_t ssv(uint32_t previous, uint32_t cost, uint32_t bias) {
        return __vsubus4(__vaddus4(previous, bias), cost);
    }
    __device__ __forceinline__ static uint32_t msv(uint32_t previous, uint32_t begin, uint32_t cost, uint32_t bias) {
        return __vsubus4(__vaddus4(__vmaxu4(previous, begin), bias), cost);
    }
    __device__ __forceinline__ static uint32_t max(uint32_t a, uint32_t b) { return __vmaxu4(a, b); }
    __device__ __forceinline__ static uint32_t max3(uint32_t a, uint32_t b, uint32_t c) {
        return __vmaxu4(__vmaxu4(a, b), c);
    }
    __device__ __forceinline__ static int horizontal_max(uint32_t v) {
        v = __vmaxu4(v, v >> 16);
        v = __vmaxu4(v, v >> 8);
        return int(v & 0xffu);
    }
};

}  // namespace gpuhmm

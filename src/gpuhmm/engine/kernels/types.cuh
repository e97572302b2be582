// Fixed-width integer types for the kernels. NVRTC has no C++ standard library headers, so
// under NVRTC these are the widths the kernels rely on; nvcc (sass_counts.py) uses <cstdint>.
#pragma once

#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned int uint32_t;
#else
#include <cstdint>
#endif

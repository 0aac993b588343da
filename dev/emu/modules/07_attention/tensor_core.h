// modules/07_attention/tensor_core.h on the CPU emulator: the same functions, carried out on the
// host where the GPU build has inline PTX (Emulate.cmake puts this folder ahead of the module's).
// mma.sync and ldmatrix are warp-wide: each is one emu::warp_instruction, in which the last lane
// to arrive computes every lane's registers from the fragment tables of course/gemm_layout.h (the
// PTX ISA's, which common/tests/gemm_layout_test.cpp checks). cp.async copies at once: a copy that
// lands early is one of the orders a GPU allows, so a missing wait or barrier shows only there.
// A build emulating sm_75 (Emulate.cmake: COURSE_EMULATED_ARCH 75) has fp16 elements, and its mma
// is two emulated m16n8k8, each a warp instruction of its own, as on the GPU; mma_bf16 (bf16 in
// every build: modules 09 and 10) stops there as the GPU's trap would.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "course/gemm_layout.h"
#include "course/tensor_element.h"
#include "emu.h"

namespace tc {

using Element = course::TensorElement;
constexpr bool kAsyncCopies = !course::kFp16TensorCores;

namespace emulated {

inline float bf16_half(std::uint32_t pair, int half) {
    return __bfloat162float({static_cast<std::uint16_t>(half ? pair >> 16 : pair & 0xffffu)});
}
inline float fp16_half(std::uint32_t pair, int half) {
    return __half2float({static_cast<std::uint16_t>(half ? pair >> 16 : pair & 0xffffu)});
}

struct MmaOperands {
    const std::uint32_t* a;
    std::uint32_t b[2];
    float* c;
};

// D = A B + C for the warp: A and B gathered from the lanes' fragments, each lane's accumulators
// summed over k in double (the products of two bf16 are exact in float; the sum is rounded once).
inline void mma_bf16_warp(MmaOperands* const (&lanes)[32]) {
    float a[16][16], b[8][16];  // A (m, k); B as n, k
    for (int lane = 0; lane < 32; ++lane)
        for (int half = 0; half < 2; ++half) {
            for (int reg = 0; reg < 4; ++reg) {
                const course::Coord e = course::mma_a_element(lane, reg, half);
                a[e.row][e.col] = bf16_half(lanes[lane]->a[reg], half);
            }
            for (int reg = 0; reg < 2; ++reg) {
                const course::Coord e = course::mma_b_element(lane, reg, half);
                b[e.row][e.col] = bf16_half(lanes[lane]->b[reg], half);
            }
        }
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
            const course::Coord e = course::mma_c_element(lane, i);
            double sum = 0.0;
            for (int k = 0; k < 16; ++k) sum += double(a[e.row][k]) * b[e.col][k];
            lanes[lane]->c[i] += static_cast<float>(sum);
        }
}

struct MmaK8Operands {
    std::uint32_t a[2];
    std::uint32_t b;
    float* c;
};

// sm_75's mma.sync.m16n8k8 with fp16 inputs: A (16 x 8) and B (8 x 8) from the lanes' fragments
// (course::mma_k8_a_element, mma_k8_b_element), each accumulator summed over k in double.
inline void mma_k8_fp16_warp(MmaK8Operands* const (&lanes)[32]) {
    float a[16][8], b[8][8];  // A (m, k); B as n, k
    for (int lane = 0; lane < 32; ++lane)
        for (int half = 0; half < 2; ++half) {
            for (int reg = 0; reg < 2; ++reg) {
                const course::Coord e = course::mma_k8_a_element(lane, reg, half);
                a[e.row][e.col] = fp16_half(lanes[lane]->a[reg], half);
            }
            const course::Coord e = course::mma_k8_b_element(lane, half);
            b[e.row][e.col] = fp16_half(lanes[lane]->b, half);
        }
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
            const course::Coord e = course::mma_c_element(lane, i);
            double sum = 0.0;
            for (int k = 0; k < 8; ++k) sum += double(a[e.row][k]) * b[e.col][k];
            lanes[lane]->c[i] += static_cast<float>(sum);
        }
}

struct LdmatrixOperands {
    const std::uint16_t* row;  // the row of 8 elements this lane gives the address of
    std::uint32_t* r;
};

// Register j of each lane: elements ldmatrix_element(lane, half) of matrix j, whose row r lane
// 8j + r points at; with .trans, the element at (col, row) instead.
template <bool transposed>
void ldmatrix_x4_warp(LdmatrixOperands* const (&lanes)[32]) {
    for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 4; ++j) {
            std::uint32_t pair = 0;
            for (int half = 0; half < 2; ++half) {
                const course::Coord e = course::ldmatrix_element(lane, half);
                const std::uint16_t value = transposed ? lanes[8 * j + e.col]->row[e.row]
                                                       : lanes[8 * j + e.row]->row[e.col];
                pair |= static_cast<std::uint32_t>(value) << (16 * half);
            }
            lanes[lane]->r[j] = pair;
        }
}

}  // namespace emulated

// bf16 in every build, as on the GPU (modules 09 and 10's data): device code below sm_80 traps.
inline void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                     std::uint32_t b1) {
    if (__CUDA_ARCH__ < 800)
        emu::fail("mma_bf16: bf16 mma.sync in device code for sm_75 (a trap on a GPU)");
    emulated::MmaOperands mine{a, {b0, b1}, c};
    emu::warp_instruction(mine, emulated::mma_bf16_warp);
}

inline void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    if constexpr (course::kFp16TensorCores) {
        // sm_75: m16n8k8 twice, k 0-7 (A's registers 0, 1 and b0), then k 8-15 (2, 3 and b1).
        emulated::MmaK8Operands low{{a[0], a[1]}, b0, c};
        emu::warp_instruction(low, emulated::mma_k8_fp16_warp);
        emulated::MmaK8Operands high{{a[2], a[3]}, b1, c};
        emu::warp_instruction(high, emulated::mma_k8_fp16_warp);
    } else {
        mma_bf16(c, a, b0, b1);
    }
}

template <bool transposed = false>
void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address) {
    if (reinterpret_cast<std::uintptr_t>(row_address) % 16 != 0)
        emu::fail("ldmatrix: a row address that is not a multiple of 16 bytes");
    emulated::LdmatrixOperands mine{static_cast<const std::uint16_t*>(row_address), r};
    emu::warp_instruction(mine, emulated::ldmatrix_x4_warp<transposed>);
}

inline std::uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    std::uint32_t bits;
    std::memcpy(&bits, &pair, 4);
    return bits;
}

inline std::uint32_t pack(float lo, float hi) {
    if constexpr (course::kFp16TensorCores) {
        const __half2 pair = __floats2half2_rn(lo, hi);
        std::uint32_t bits;
        std::memcpy(&bits, &pair, 4);
        return bits;
    } else {
        return pack_bf16(lo, hi);
    }
}

inline float to_float(Element x) {
#if defined(COURSE_FP16_TENSOR_CORES)
    return __half2float(x);
#else
    return __bfloat162float(x);
#endif
}

inline void cp_async_16(void* shared, const void* global, bool valid) {
    if (valid)
        std::memcpy(shared, global, 16);
    else
        std::memset(shared, 0, 16);
}
inline void cp_async_4(void* shared, const void* global, bool valid) {
    if (valid)
        std::memcpy(shared, global, 4);
    else
        std::memset(shared, 0, 4);
}
inline void cp_async_commit() {}
template <int pending>
void cp_async_wait() {}

inline float exp2_ftz(float x) { return std::exp2(x); }

template <int kRowElems>
int swizzled(int row, int col) {
    return row * kRowElems + course::swizzle_128b(row, col / 8) * 8 + col % 8;
}

}  // namespace tc

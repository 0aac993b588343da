// The tensor-core instructions of module 07 (flash_tc, flash_backward), one small wrapper each,
// with the fragment layouts they assume written beside them. Read-only for the learner: the
// exercises are about what to do with these, not about inline PTX. Module 05 teaches the same
// layouts (notes/07_attention.md, "Fragments").
//
// The element type is the contracts' course::TensorElement: bf16 (sm_80 and newer), or fp16 in a
// build for a GPU without bf16 tensor cores (sm_75: a T4; course/tensor_element.h). Such a build
// has sm_75's instructions only: mma.sync.m16n8k8 (mma below is two of them) and no cp.async
// (kAsyncCopies is false: the exercises then stage the next tile in registers). Exercises whose
// data is bf16 in every build (modules 09 and 10 include this header) call mma_bf16 and pack_bf16,
// bf16 whatever the build, never mma and pack, which would take their bf16 bits for fp16 on a T4.
//
// mma.sync.aligned.m16n8k16, bf16 (fp16) inputs, float32 accumulators. A warp's lanes form 8
// groups of 4: g = lane / 4 picks a row, t = lane % 4 a pair of columns.
//   A (16 x 16, row-major): a[0] = (row g, cols 2t, 2t+1)      a[1] = (row g + 8, cols 2t, 2t+1)
//                           a[2] = (row g, cols 2t+8, 2t+9)    a[3] = (row g + 8, cols 2t+8, 2t+9)
//   B (16 x 8, k x n):      b[0] = (k 2t, 2t+1; col g)         b[1] = (k 2t+8, 2t+9; col g)
//   C (16 x 8, float):      c[0], c[1] = (row g, cols 2t, 2t+1)
//                           c[2], c[3] = (row g + 8, cols 2t, 2t+1)
// Each 32-bit register of A and B holds two 16-bit elements, the lower column (or k) in the low
// half. course/gemm_layout.h has the same tables as functions (mma_*_element; mma_k8_* for sm_75's
// m16n8k8, whose A is a[0], a[1] or a[2], a[3] and whose B is b[0] or b[1]), and the lanes' row
// addresses for ldmatrix: ldmatrix_a_source (A, and with .trans a B stored k-major: V, dO, Q, K
// in the products that reduce over keys or queries) and ldmatrix_b_source (B stored n-major: K
// in Q K^T, and with .trans an A stored transposed: dS^T).
// bf16 tensor cores and cp.async need sm_80: device code below it compiles them to a trap
// (mma_bf16, the cp.async wrappers, and mma in a bf16 build: the trainer's, which never calls them
// there; modules 09 and 10's launchers refuse to run such code, and their checkers skip).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "course/gemm_layout.h"
#include "course/tensor_element.h"

namespace tc {

using Element = course::TensorElement;  // bf16, or fp16 in a build for sm_75

// Whether this build's device code has cp.async (sm_80 and newer): not in fp16, which is the
// build for sm_75. Host code asks too (the shared memory a kernel needs depends on it).
constexpr bool kAsyncCopies = !course::kFp16TensorCores;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TC_SM80(body) __trap()
#else
#define TC_SM80(body) body
#endif

// D = A B + D on one 16 x 8 x 16 tile of bf16, in every build (a trap in device code below sm_80).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
    TC_SM80(asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)));
}

// D = A B + D on one 16 x 8 x 16 tile of Elements.
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
#if defined(COURSE_FP16_TENSOR_CORES)
    // sm_75: m16n8k8 twice, k 0-7 (A's registers 0, 1 and b0), then k 8-15 (2, 3 and b1).
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[2]), "r"(a[3]), "r"(b1));
#else
    mma_bf16(c, a, b0, b1);
#endif
}

// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements from shared memory (sm_75 has it). Lanes 8m
// .. 8m+7 give the addresses of the 8 rows (16 bytes each) of matrix m; afterwards r[m] of lane l
// holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix m. With `transposed` (.trans),
// r[m] holds rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4 instead: what a B operand stored
// k-major needs.
template <bool transposed = false>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row_address));
    if constexpr (transposed)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address));
}

// Two floats as a bf16 pair, `lo` in the low half (the lower column of an A fragment).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
}

// Two floats as a pair of Elements, `lo` in the low half.
__device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
#if defined(COURSE_FP16_TENSOR_CORES)
    const __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
#else
    return pack_bf16(lo, hi);
#endif
}

// An Element as a float.
__device__ __forceinline__ float to_float(Element x) {
#if defined(COURSE_FP16_TENSOR_CORES)
    return __half2float(x);
#else
    return __bfloat162float(x);
#endif
}

// cp.async of 16 bytes, global to shared, bypassing registers (and L1: .cg). With `valid` false
// nothing is read and the 16 bytes are zero-filled (a row past the end of the tensor).
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool valid) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(shared));
    TC_SM80(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
                         "l"(global), "r"(valid ? 16 : 0)));
}
// The same for 4 bytes, single floats (.ca: .cg copies 16 bytes only).
__device__ __forceinline__ void cp_async_4(void* shared, const void* global, bool valid) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(shared));
    TC_SM80(asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address),
                         "l"(global), "r"(valid ? 4 : 0)));
}
// Closes the group of the cp.asyncs issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
    TC_SM80(asm volatile("cp.async.commit_group;\n" ::));
}
// Waits until at most `pending` committed groups are still in flight (this thread's copies only:
// a __syncthreads() after it makes every thread's copies visible to the block).
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
    TC_SM80(asm volatile("cp.async.wait_group %0;\n" ::"n"(pending)));
}

// 2^x in one instruction (ex2.approx.ftz.f32: a relative error near 2^-22, results below 2^-126
// flushed to 0). exp2f compiles to the same instruction wrapped in a few more that keep such tiny
// results: worth saving where every score of a softmax takes one.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#undef TC_SM80

// The XOR swizzle of module 05 (course::swizzle_128b) on shared tiles of rows of `kRowElems`
// 16-bit elements (64 or 128: 128 or 256 bytes): 16-byte chunk c of row r is stored at chunk c ^ (r
// % 8). The 8 rows one ldmatrix reads at the same logical chunk then sit in 8 different chunks,
// i.e. 8 different groups of 4 banks: no bank conflict, where the plain layout puts all 8 in the
// same banks. (Rows of 256 bytes: the XOR permutes each half's 8 chunks.) Returns the element
// offset.
template <int kRowElems>
__device__ __forceinline__ int swizzled(int row, int col) {
    return row * kRowElems + course::swizzle_128b(row, col / 8) * 8 + col % 8;
}

}  // namespace tc

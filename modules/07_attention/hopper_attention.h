// The Hopper instructions of 07_attention/flash_wgmma and flash_wgmma_backward beyond module 05's
// hopper.h (which this header includes: mbarriers, TMA, the wgmma fences and groups, setmaxnreg,
// the tensor map): wgmma of the two shapes attention needs, B read K-major (K in S = Q K^T) or
// N-major (V in O += P V), A K-major or M-major (dS^T in the backward's dQ = dS K), and the proxy
// fence a tile written by the threads needs before wgmma reads it (the barrier of one warpgroup is
// hopper.h's); at the end, the 3D tensor maps of the fast references' packed layouts. Read-only,
// like the contract; notes/07_attention.md explains each. sm_90a only: call them from code
// compiled only there (#if defined(__CUDA_ARCH_FEAT_SM90_ALL)).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../05_gemm_advanced/hopper.h"

namespace hopper {

// Orders this thread's earlier writes to shared memory (st.shared: the "generic proxy") before
// later reads of the "async proxy" (wgmma's operands, TMA). A tile the threads wrote themselves
// needs it before wgmma reads it; a tile TMA wrote is ordered by the mbarrier instead.
__device__ inline void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// hopper.h's fence_accumulators for accumulator arrays of any size.
template <int kCount>
__device__ inline void fence_accumulators(float (&d)[kCount]) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The operands after the descriptors, as in hopper.h: scale-d (accumulate), the scales of A and B
// (1), the transpose of A (kTransposeA: 0 K-major, stored M x K; 1 M-major, stored K x M, as the
// backward's dS^T tile is [key][query] when dQ = dS K reads it) and of B (kTransposeB: 0 K-major,
// stored N x K; 1 N-major, stored K x N, as V is [key][d]).
// d (+)= A B for a 64 x 16 A (K-major, or M-major with kTransposeA) and a 16 x 64 B (K-major, or
// N-major with kTransposeB), both bf16 in shared memory, described by their descriptors, into this
// warpgroup's 64 x 64 float32 accumulators, 32 per thread (course::wgmma_d_element says which).
template <int kTransposeB, int kTransposeA = 0>
__device__ inline void wgmma_m64n64k16(float (&d)[32], std::uint64_t a_descriptor,
                                       std::uint64_t b_descriptor, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred accumulate;\n"
        "setp.ne.b32 accumulate, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, accumulate, 1, 1, %36, %35;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate ? 1 : 0), "n"(kTransposeB),
          "n"(kTransposeA));
}

// d (+)= A B for a 64 x 16 A (K-major, or M-major with kTransposeA) and a 16 x 128 B (K-major, or
// N-major with kTransposeB), both bf16 in shared memory, described by their descriptors, into this
// warpgroup's 64 x 128 float32 accumulators, 64 per thread (course::wgmma_d_element says which).
template <int kTransposeB, int kTransposeA = 0>
__device__ inline void wgmma_m64n128k16(float (&d)[64], std::uint64_t a_descriptor,
                                        std::uint64_t b_descriptor, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred accumulate;\n"
        "setp.ne.b32 accumulate, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, accumulate, 1, 1, %68, %67;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate ? 1 : 0), "n"(kTransposeB),
          "n"(kTransposeA));
}

// ---- 3D tensor maps: the fast references' packed layouts ----------------------------------------
//
// The GPT trainer's q, k, v lie in rows of 3C (each token's q, k, v of every head side by side):
// flash_wgmma_packed.h's entry points read them there through maps of three dimensions, (column,
// row, sequence), whose boxes stay in one sequence (zeros past T) and, 64 columns wide, in one
// head. The readable solutions need neither.

// Copies the box of `map` whose first element is (col, row, sequence) into shared memory at
// `destination` (as tma_load_2d, one dimension more).
__device__ inline void tma_load_3d(void* destination, const CUtensorMap* map, int col, int row,
                                   int sequence, std::uint64_t* barrier) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(shared_address(destination)),
        "l"(reinterpret_cast<std::uint64_t>(map)), "r"(col), "r"(row), "r"(sequence),
        "r"(shared_address(barrier))
        : "memory");
}

// The tensor map of `sequences` sequences of T rows of `cols` bf16 columns, rows `row_stride`
// elements apart, sequences T row_stride apart, copied in boxes of box_cols x box_rows of one
// sequence with the 128-byte swizzle; zeros where a box leaves its sequence or the columns.
inline CUtensorMap tensor_map_3d(const void* tensor, int cols, int T, int sequences,
                                 long long row_stride, int box_rows, int box_cols) {
    // TMA's rules: a start on 16 bytes, strides in multiples of 16 bytes.
    if (reinterpret_cast<std::uintptr_t>(tensor) % 16 != 0 || row_stride % 8 != 0)
        throw std::runtime_error(
            "no tensor map: a tensor must start on a 16-byte boundary, its rows a multiple of 8 "
            "elements apart (TMA)");
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(T),
                                static_cast<cuuint64_t>(sequences)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_stride) * 2,
                                   static_cast<cuuint64_t>(T) * row_stride * 2};
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows),
                               1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    CUtensorMap map{};
    const CUresult result = course::tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(tensor), dims, strides, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS)
        throw std::runtime_error("cuTensorMapEncodeTiled failed, error " + std::to_string(result));
    return map;
}

}  // namespace hopper

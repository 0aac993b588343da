// The Hopper instructions of 05_gemm_advanced/wgmma_gemm, each wrapped once, and the tensor map
// of a matrix. Read-only, like the contract: the exercise is to use them (which barrier, which
// parity, which descriptor, who waits for what), not to type their operands; notes/05 explains
// each. They exist in sm_90a's instruction set only (wgmma, setmaxnreg: cmake/Course.cmake builds
// this exercise for it on a Hopper GPU); call them from code compiled only there
// (#if defined(__CUDA_ARCH_FEAT_SM90_ALL)).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: the harness reaches the driver)
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/check.h"
#include "course/gemm_layout.h"
#include "course/tensor_element.h"
#include "course/tensor_map.h"

namespace hopper {

__device__ inline std::uint32_t shared_address(const void* pointer) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

// ---- mbarriers ----------------------------------------------------------------------------------
// A barrier in shared memory that completes a phase when `arrivals` threads have arrived and the
// transactions it expects (bytes of copies) have landed; then the next phase begins. A wait names
// the parity of the phase it waits for.

__device__ inline void mbarrier_init(std::uint64_t* barrier, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)),
                 "r"(arrivals)
                 : "memory");
}

// Makes the initialized barriers visible to the copy engine, which works outside the threads'
// view of memory (the "async proxy").
__device__ inline void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives, and adds `bytes` to the transactions the current phase waits for.
__device__ inline void mbarrier_arrive_expect_tx(std::uint64_t* barrier, int bytes) {
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)),
        "r"(bytes)
        : "memory");
}

__device__ inline void mbarrier_arrive(std::uint64_t* barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(barrier))
                 : "memory");
}

// Returns once the phase of parity `parity` has completed. (try_wait itself waits a while in the
// hardware before it answers false.)
__device__ inline void mbarrier_wait(std::uint64_t* barrier, int parity) {
    std::uint32_t complete = 0;
    while (!complete) {
        asm volatile(
            "{\n"
            ".reg .pred complete;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
            "selp.u32 %0, 1, 0, complete;\n"
            "}\n"
            : "=r"(complete)
            : "r"(shared_address(barrier)), "r"(parity)
            : "memory");
    }
}

// ---- TMA ----------------------------------------------------------------------------------------

// Copies the box of `map` whose first element is (row, col) of the matrix into shared memory at
// `destination` (as the map's swizzle lays it out; zeros where the box leaves the matrix), and
// counts its bytes as transactions of `barrier`. Coordinates are innermost first.
__device__ inline void tma_load_2d(void* destination, const CUtensorMap* map, int col, int row,
                                   std::uint64_t* barrier) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(shared_address(destination)),
        "l"(reinterpret_cast<std::uint64_t>(map)), "r"(col), "r"(row), "r"(shared_address(barrier))
        : "memory");
}

// ---- wgmma --------------------------------------------------------------------------------------

// Orders this warpgroup's earlier accesses to the registers wgmma uses (the accumulators) before
// the wgmma that follow. Registers only: wgmma reads shared memory through the async proxy, so a
// tile the threads wrote themselves needs fence.proxy.async before it (PTX ISA, wgmma.fence); the
// tiles here come from TMA, ordered by the mbarrier the consumers wait on.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Closes the group of this warpgroup's wgmma issued since the last commit.
__device__ inline void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending of this warpgroup's committed groups are still running.
template <int kPending>
__device__ inline void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The accumulators are written by wgmma in the background: keep the compiler from moving them
// between registers while it runs (an empty instruction that "reads and writes" each of them).
__device__ inline void fence_accumulators(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A B^T for a 64 x 16 A and a 256 x 16 B (both K-major bf16 in shared memory, described by
// their descriptors) into this warpgroup's 64 x 256 float32 accumulators, 128 per thread
// (course::wgmma_d_element says which). The operands after the descriptors: scale-d (accumulate
// into d, or overwrite it), scale of A and of B (1: not negated), transpose of A and of B (0:
// K-major, as they are; 1, kTransposeA or kTransposeB: that operand MN-major, m or n contiguous,
// which wgmma reads for 16-bit types only: wgmma_gemm's fast reference, for the trainer).
template <int kTransposeA = 0, int kTransposeB = 0>
__device__ inline void wgmma_m64n256k16(float (&d)[128], std::uint64_t a_descriptor,
                                        std::uint64_t b_descriptor, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred accumulate;\n"
        "setp.ne.b32 accumulate, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, accumulate, 1, 1, %131, %132;\n"
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
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate ? 1 : 0), "n"(kTransposeA),
          "n"(kTransposeB));
}

// Warp specialization: the registers of each thread of this warpgroup, raised or lowered.
template <int kRegisters>
__device__ inline void set_registers_increase() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ inline void set_registers_decrease() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// A barrier of the `threads` threads (a multiple of 32) that use barrier `id` (1 to 15; 0 is
// __syncthreads()'s): one warpgroup waits for its own warps, not for the whole block.
__device__ inline void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Its other half: this warpgroup counts itself in at barrier `id` and goes on without waiting; the
// barrier completes when `threads` have arrived or synced (a turn handed to the warpgroup that
// waits there with named_barrier_sync).
__device__ inline void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- The tensor map (host) ----------------------------------------------------------------------

// The tensor map of a rows x K row-major bf16 matrix, copied in boxes of box_rows x kBK with the
// 128-byte swizzle; zeros where a box leaves the matrix. (The contract's course::TensorElement,
// which is bf16 wherever wgmma_gemm runs: a build for sm_75 makes it fp16, and there it refuses.)
inline CUtensorMap tensor_map(const course::TensorElement* matrix, int rows, int K, int box_rows,
                              int box_cols) {
    const course::TensorMap2d shape = course::tensor_map_2d_bf16(rows, K, box_rows, box_cols);
    if (const char* problem = course::tensor_map_2d_bf16_problem(matrix, shape))
        throw std::runtime_error(std::string("no tensor map: ") + problem);
    const cuuint64_t dims[2] = {shape.dims[0], shape.dims[1]};
    const cuuint64_t strides[1] = {shape.row_stride_bytes};
    const cuuint32_t box[2] = {shape.box[0], shape.box[1]};
    const cuuint32_t element_strides[2] = {1, 1};
    CUtensorMap map{};
    const CUresult result = course::tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<course::TensorElement*>(matrix), dims,
        strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS)
        throw std::runtime_error("cuTensorMapEncodeTiled failed, error " + std::to_string(result));
    return map;
}

}  // namespace hopper

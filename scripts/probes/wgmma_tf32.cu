// wgmma_tf32.cu -- a probe, not a product kernel: checks the recipe for Hopper's wgmma with TF32
// operands (A in registers, B in shared memory, no swizzle, K-major) and measures its rate against
// mma.sync m16n8k8 TF32. Run with scripts/probes/wgmma_tf32.py on an sm_90 GPU (built for sm_90a).
//
// Recipe (checked by `check` against a float64 matmul):
//   * B (N x K, K contiguous: nn.Conv2d's weight layout is already this) is staged per k8-step as
//     core matrices of 8 N-rows x 16 bytes (4 TF32): [n_group][k_core (2)][8 rows][4].
//   * Descriptor: start address >> 4 in bits 0-13, LBO >> 4 in bits 16-29, SBO >> 4 in bits 32-45,
//     no swizzle. LBO is the step between the two K core matrices (128 B here), SBO the step between
//     8-row N groups (256 B). Swapping them gives garbage.
//   * A's register fragment per warp (rows 16w..16w+15 of the m64 block) is mma.m16n8k8's A
//     fragment: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4), g = lane / 4, t = lane % 4.
//     The m64n64 accumulators per warp are mma's n8-tile fragments, 8 of them in order.
//   * Shared-memory writes made by threads need `fence.proxy.async.shared::cta` before wgmma reads
//     them; `wgmma.fence` before the first wgmma that reads registers written since.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

__device__ __forceinline__ uint64_t desc_of(const void* smem_ptr, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
    uint64_t d = (a & 0x3ffff) >> 4;
    d |= static_cast<uint64_t>((lbo & 0x3ffff) >> 4) << 16;
    d |= static_cast<uint64_t>((sbo & 0x3ffff) >> 4) << 32;
    return d;  // base offset 0, no swizzle
}

#define ACC32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

__device__ __forceinline__ void wgmma_64x64x8(float (&d)[32], const uint32_t (&a)[4], uint64_t bdesc) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
        "{%32,%33,%34,%35}, %36, 1, 1, 1;\n"
        : ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc));
}

// A: (64, K) row-major fp32 (TF32 values), B: (64, K) (N rows, K contiguous); D = A B^T (64 x 64).
// One warpgroup. B staged in smem as [kstep][n_grp 8][k_core 2][8 rows][4].
__global__ void wg_check(const float* A, const float* B, float* D, int K, int lbo_sel) {
    extern __shared__ __align__(128) float bs[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int ks = K / 8;
    for (int i = tid; i < 64 * K; i += 128) {
        const int n = i / K, k = i % K;
        const int s = k / 8, kc = (k % 8) / 4, kk = k % 4, ng = n / 8, r = n % 8;
        bs[s * 512 + ((ng * 2 + kc) * 8 + r) * 4 + kk] = B[i];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    for (int s = 0; s < ks; ++s) {
        const int r0 = warp * 16 + g;
        uint32_t a[4] = {__float_as_uint(A[r0 * K + s * 8 + t]), __float_as_uint(A[(r0 + 8) * K + s * 8 + t]),
                         __float_as_uint(A[r0 * K + s * 8 + t + 4]), __float_as_uint(A[(r0 + 8) * K + s * 8 + t + 4])};
        const uint64_t bd = lbo_sel ? desc_of(bs + s * 512, 256, 128) : desc_of(bs + s * 512, 128, 256);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        wgmma_64x64x8(d, a, bd);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    for (int j = 0; j < 8; ++j) {
        const int r0 = warp * 16 + g, c0 = j * 8 + 2 * t;
        D[r0 * 64 + c0] = d[4 * j];
        D[r0 * 64 + c0 + 1] = d[4 * j + 1];
        D[(r0 + 8) * 64 + c0] = d[4 * j + 2];
        D[(r0 + 8) * 64 + c0 + 1] = d[4 * j + 3];
    }
}

// Throughput: each warpgroup issues `iters` x 9 wgmma m64n64k8 (TF32) back to back on fixed operands.
__global__ void wg_rate(float* out, int iters) {
    __shared__ __align__(128) float bs[9 * 512];
    for (int i = threadIdx.x; i < 9 * 512; i += blockDim.x) bs[i] = 1.0f / (1 + i % 7);
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    uint32_t a[4] = {__float_as_uint(0.5f), __float_as_uint(0.25f), __float_as_uint(0.125f), __float_as_uint(1.f)};
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < 9; ++s) wgmma_64x64x8(d, a, desc_of(bs + s * 512, 128, 256));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    float s = 0.f;
    for (int i = 0; i < 32; ++i) s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// The same kind of work with mma.sync m16n8k8: each warp 2 m16 x 8 n8 independent tiles per k-step.
__global__ void mma_rate(float* out, int iters) {
    const int lane = threadIdx.x & 31;
    float d[2][8][4] = {};
    uint32_t a[4] = {__float_as_uint(0.5f), __float_as_uint(0.25f), __float_as_uint(0.125f), __float_as_uint(1.f)};
    uint32_t b0 = __float_as_uint(0.5f + lane), b1 = __float_as_uint(0.25f);
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int s = 0; s < 9; ++s)
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                        : "+f"(d[i][j][0]), "+f"(d[i][j][1]), "+f"(d[i][j][2]), "+f"(d[i][j][3])
                        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    float s = 0.f;
    for (int i = 0; i < 2; ++i) for (int j = 0; j < 8; ++j) for (int e = 0; e < 4; ++e) s += d[i][j][e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

torch::Tensor check(torch::Tensor A, torch::Tensor B, int64_t lbo_sel) {
    auto D = torch::empty({64, 64}, A.options());
    const int K = A.size(1);
    cudaFuncSetAttribute(wg_check, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * K * 4);
    wg_check<<<1, 128, 64 * K * 4, c10::cuda::getCurrentCUDAStream()>>>(A.data_ptr<float>(), B.data_ptr<float>(), D.data_ptr<float>(), K, lbo_sel);
    return D;
}
void rate(torch::Tensor out, int64_t blocks, int64_t threads, int64_t iters, bool wg) {
    if (wg) wg_rate<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(), iters);
    else mma_rate<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(), iters);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("check", &check);
    m.def("rate", &rate);
}

// Probe (not a test): how fast does a chain of accumulating wgmma m64n128k8 TF32 products run on one SM?
//
//     nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_chain scripts/probes/wgmma_chain.cu
//     /tmp/wgmma_chain
//
// Model B's by-phase kernel (kernels/model_b_v3_fused_conv_groupnorm_pool.cu) gives each of its 4 warpgroups one
// chain per tile: 9 wgmma.m64n128k8 (A = weights, B = the relaid box, both from shared memory) into the same
// accumulators, then commit and wait. This probe times that pattern alone: one CTA of 512 threads per SM on every
// SM, 1, 2 or 4 of its warpgroups issuing rounds of {fence; STEPS products; commit; wait 0}, with zeros in shared
// memory. It prints the cycles per round (clock64, averaged over warpgroups and SMs) against the tensor cores' peak
// (1024 TF32 multiply-adds per cycle per SM: 64 cycles per m64n128k8), for STEPS = 9, 4, 1, and the same work as
// two independent m64n64k8 chains per warpgroup.
//
// On an H100 (results/model_b/NOTES.md, 2026-11-27): a 9-step chain takes about 634 cycles with one warpgroup (91 %
// of peak) and 2 302 with four (100 %): the chain's own latency is not what holds the kernel's GEMM phase.
#include <cstdint>
#include <cstdio>

namespace {

constexpr int kThreads = 512;
constexpr int kWeightFloats = 9 * 512;   // 9 k-steps of A (64 x 8)
constexpr int kBoxFloats = 4 * 8192;     // per warpgroup, room for B's 128 positions x 8 k and its k-half offset
constexpr int kSmemBytes = (kWeightFloats + kBoxFloats) * 4;

#include "wgmma_probe.cuh"

// d[HALF * 8 .. HALF * 8 + 7] += A * B, m64n64k8.
template <int HALF>
__device__ __forceinline__ void mma_n64(float (&d)[16][4], uint32_t a_low, uint32_t b_low) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, 1, 0;\n"
        "mov.b64 ad, {%32, %34};\nmov.b64 bd, {%33, %35};\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, ad, bd, p, 1, 1;\n}\n"
        : ACC32(d, HALF * 8)
        : "r"(a_low), "r"(b_low), "n"(256 >> 4), "n"(128 >> 4));
}

// TWO_CHAINS: each k-step as two independent m64n64k8 (positions 0..63 and 64..127) instead of one m64n128k8.
template <bool TWO_CHAINS, int STEPS>
__global__ void __launch_bounds__(kThreads, 1) chain_rounds(long long* cycles, int rounds, int active_warpgroups) {
    extern __shared__ __align__(128) float smem[];
    for (int i = threadIdx.x; i < kWeightFloats + kBoxFloats; i += kThreads) smem[i] = 0.f;
    __syncthreads();
    const int wg = threadIdx.x / 128;
    if (wg >= active_warpgroups) return;
    const uint32_t a_low = ((smem_address(smem) & 0x3ffff) >> 4) | ((128 >> 4) << 16);
    const uint32_t b_low = ((smem_address(smem + kWeightFloats + wg * 4096) & 0x3ffff) >> 4) | (1024u << 16);
    float acc[16][4] = {};
    const long long start = clock64();
    for (int r = 0; r < rounds; ++r) {
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < STEPS; ++s) {
            if constexpr (TWO_CHAINS) {
                mma_n64<0>(acc, a_low + s * 128, b_low + s * 2);
                mma_n64<1>(acc, a_low + s * 128, b_low + 64 + s * 2);  // positions 64..127: 64 16-byte words on
            } else {
                mma_n128(acc, a_low + s * 128, b_low + s * 2);
            }
        }
        wgmma_commit();
        wgmma_wait_all();
    }
    const long long stop = clock64();
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 4; ++j) sum += acc[i][j];
    if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 4 + wg] = stop - start;
    if (sum == 12345.f) cycles[0] = -1;  // keeps the products alive
}

}  // namespace

int main() {
    const int sms = print_device();
    long long* cycles = nullptr;
    cudaMalloc(&cycles, sms * 4 * sizeof(long long));
    long long* host = new long long[sms * 4];
    using Kernel = void (*)(long long*, int, int);
    const Kernel kernels[2][3] = {{chain_rounds<false, 9>, chain_rounds<false, 4>, chain_rounds<false, 1>},
                                  {chain_rounds<true, 9>, chain_rounds<true, 4>, chain_rounds<true, 1>}};
    const int steps[3] = {9, 4, 1};
    const int rounds = 2000;
    for (int two = 0; two < 2; ++two)
        for (int si = 0; si < 3; ++si) {
            cudaFuncSetAttribute(kernels[two][si], cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
            for (int wgs : {1, 2, 4}) {
                for (int rep = 0; rep < 2; ++rep) kernels[two][si]<<<sms, kThreads, kSmemBytes>>>(cycles, rounds, wgs);
                const cudaError_t err = cudaDeviceSynchronize();
                if (err != cudaSuccess) {
                    printf("CUDA error: %s\n", cudaGetErrorString(err));
                    return 1;
                }
                cudaMemcpy(host, cycles, sms * 4 * sizeof(long long), cudaMemcpyDeviceToHost);
                double total = 0.0;
                for (int b = 0; b < sms; ++b)
                    for (int w = 0; w < wgs; ++w) total += static_cast<double>(host[b * 4 + w]);
                const double per_round = total / (sms * wgs) / rounds;
                const double ideal = 64.0 * wgs * steps[si];  // cycles at the peak
                printf("%-18s %d steps, %d warpgroup(s): %5.0f cycles per round, peak %5.0f: %3.0f %% of peak\n",
                       two ? "2 x m64n64k8" : "1 x m64n128k8", steps[si], wgs, per_round, ideal,
                       100.0 * ideal / per_round);
            }
        }
    delete[] host;
    cudaFree(cycles);
    return 0;
}

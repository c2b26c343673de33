// Probe (not a test): does a warp's epilogue work run slower while other warpgroups of its SM issue wgmma products?
//
//     nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/alu_beside_wgmma scripts/probes/alu_beside_wgmma.cu
//     /tmp/alu_beside_wgmma
//
// Model B's by-phase kernel (kernels/model_b_v3_fused_conv_groupnorm_pool.cu) runs each tile as about 3 000 cycles of
// wgmma products and then about 3 700 cycles of per-warp epilogue, with the tensor cores idle. Forms that overlapped
// one warpgroup's epilogue with another's products ran no faster (results/model_b/NOTES.md), and the traces had the
// epilogue slower beside the products. This probe measures that directly. One CTA of 512 threads per SM, on every
// SM; warpgroup 3 (one warp per scheduler) runs an epilogue-like loop for a fixed number of iterations, while 0 to 3
// other warpgroups issue rounds of {fence; 9 accumulating wgmma.m64n128k8 TF32 products from shared memory; commit;
// wait} until it is done. It prints warpgroup 3's cycles per iteration (clock64, averaged over its warps and the
// SMs) and the products' rate meanwhile, for each of:
//   "statistics": 64 values per lane, each d = v - c, then s += d and q = fma(d, d, q) in two chains each (the
//                 kernel's shifted sums: registers only, about 200 FP instructions per iteration);
//   "pooling":    16 shared loads and 12 max per lane and one 16-byte shared store (the x pooling's shape: shared
//                 memory, as the products' operands are);
//   "nothing":    warpgroup 3 sleeps (__nanosleep) for about 400 us: the products' rate without other work, measured
//                 the same way (the flag test costs two named barriers per round);
//   "max-min":    the statistics' shape with float max and min instead (FMNMX: about 190 per iteration);
//   "integer":    the same with integer xor, shift and add (about 140 LOP3 and IADD3 per iteration).
//
// On an H100 80GB HBM3 (results/model_b/NOTES.md, 2026-11-27; the same to 1 % in a second run in the same process):
//
//   warpgroups issuing products        0       1       2       3
//   statistics, cycles per iteration   297     335     382     419
//     tensor cores busy meanwhile      -       19 %    35 %    46 %
//   pooling, cycles per iteration      124     264     343     343
//     tensor cores busy meanwhile      -       73 %    98 %    98 %
//   nothing: tensor cores busy         -       76 %    100 %   100 %
//   max-min, cycles per iteration      410     706     886     889
//     tensor cores busy meanwhile      -       75 %    102 %   102 %
//   integer, cycles per iteration      269     460     577     583
//     tensor cores busy meanwhile      -       75 %    101 %   102 %
//
// (Over 100 % is the rounds that end after warpgroup 3's loop.) So one warp per scheduler doing float adds and
// multiply-adds costs the products more than half their rate, and is itself 13-41 % slower; shared-memory, float
// max-min and integer work leave the products their rate and run 1.7-2.8 times slower.
#include <cstdint>
#include <cstdio>

namespace {

constexpr int kThreads = 512;
constexpr int kWeightFloats = 9 * 512;  // 9 k-steps of A (64 x 8)
constexpr int kBoxFloats = 4 * 8192;    // per warpgroup, room for B's 128 positions x 8 k and its k-half offset
constexpr int kStageFloats = 4 * 1024;  // the pooling loop's own shared memory (per warp of warpgroup 3: 1 024)
constexpr int kSmemBytes = (kWeightFloats + kBoxFloats + kStageFloats) * 4;

#include "wgmma_probe.cuh"

// KIND 0: the statistics loop, 1: the pooling loop, 2: none (warpgroup 3 sleeps `iters` microseconds: the products'
// rate alone, measured the same way), 3: float max and min in registers, 4: integer logic and adds in registers. Warpgroups 0 .. products - 1 issue products until warpgroup 3's 4 warps are
// done; warpgroup 3 times `iters` iterations of its loop.
template <int KIND>
__global__ void __launch_bounds__(kThreads, 1) epilogue_beside_products(long long* cycles, long long* rounds_done,
                                                                          float* sink, int iters, int products) {
    extern __shared__ __align__(128) float smem[];
    __shared__ int done;          // warps of warpgroup 3 finished
    __shared__ int stop_seen[3];  // per product warpgroup: the flag as its thread 0 read it this round
    for (int i = threadIdx.x; i < kWeightFloats + kBoxFloats + kStageFloats; i += kThreads) smem[i] = 0.f;
    if (threadIdx.x == 0) done = 0;
    __syncthreads();
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (wg < products) {
        const uint32_t a_low = ((smem_address(smem) & 0x3ffff) >> 4) | ((128 >> 4) << 16);
        const uint32_t b_low = ((smem_address(smem + kWeightFloats + wg * 4096) & 0x3ffff) >> 4) | (1024u << 16);
        float acc[16][4] = {};
        long long rounds = 0;
        // one thread reads the flag per round and the warpgroup acts on that one reading (wgmma is warpgroup-wide:
        // warps that stopped on different readings would leave the others' next wgmma short of warps)
        while (true) {
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 9; ++s) mma_n128(acc, a_low + s * 128, b_low + s * 2);
            wgmma_commit();
            wgmma_wait_all();
            ++rounds;
            if (threadIdx.x % 128 == 0) stop_seen[wg] = *reinterpret_cast<volatile int*>(&done);
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
            const int d = stop_seen[wg];
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // all have read before the next write
            if (d == 4) break;
        }
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 4; ++j) sum += acc[i][j];
        if (threadIdx.x % 128 == 0) rounds_done[blockIdx.x * 4 + wg] = rounds;
        if (sum == 12345.f) sink[0] = sum;  // keeps the products alive
        return;
    }
    if (wg != 3) return;
    float result = 0.f;
    const long long start = clock64();
    if constexpr (KIND == 2) {
        for (int us = 0; us < iters; ++us) __nanosleep(1000);
    } else if constexpr (KIND == 1) {
        float* mine = smem + kWeightFloats + kBoxFloats + (warp - 12) * 1024;
        for (int it = 0; it < iters; ++it) {
            float m[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float* e = mine + 32 * k + lane + (it & 1) * 512;
                m[k] = fmaxf(fmaxf(e[0], e[128]), fmaxf(e[256], e[384]));
            }
            *reinterpret_cast<float4*>(mine + 4 * lane + ((it + 1) & 1) * 512) = make_float4(m[0], m[1], m[2], m[3]);
            result += m[0] + m[3];
            __syncwarp();  // the next iteration reads what other lanes stored
        }
    } else if constexpr (KIND == 3) {  // float max and min in registers (FMNMX), as the y pooling
        float v[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(lane + i) * 0.01f;
        float c = 0.5f;
        for (int it = 0; it < iters; ++it) {
            float hi_a = -1e30f, lo_a = 1e30f, hi_b = -1e30f, lo_b = 1e30f;
#pragma unroll
            for (int i = 0; i < 64; ++i) {
                const float x = fmaxf(v[i], c);
                if (i & 1) { hi_a = fmaxf(hi_a, x); lo_a = fminf(lo_a, x); }
                else { hi_b = fmaxf(hi_b, x); lo_b = fminf(lo_b, x); }
            }
            c = (fmaxf(hi_a, hi_b) - fminf(lo_a, lo_b)) * 0.5f;  // the next iteration depends on this one
        }
        result = c;
    } else if constexpr (KIND == 4) {  // integer logic and adds in registers
        unsigned u[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) u[i] = static_cast<unsigned>(lane) * 2654435761u + static_cast<unsigned>(i) * 40503u;
        unsigned c = 12345u;
        for (int it = 0; it < iters; ++it) {
            unsigned s_a = 0u, x_a = 0u, s_b = 0u, x_b = 0u;
#pragma unroll
            for (int i = 0; i < 64; ++i) {
                const unsigned x = u[i] ^ c;
                if (i & 1) { s_a += x; x_a ^= x >> 3; }
                else { s_b += x; x_b ^= x >> 3; }
            }
            c = s_a + s_b + (x_a ^ x_b);  // the next iteration depends on this one
        }
        result = static_cast<float>(c);
    } else {
        float v[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(lane + i) * 0.01f;
        float c = 0.5f;
        for (int it = 0; it < iters; ++it) {
            float s1a = 0.f, s1b = 0.f, s2a = 0.f, s2b = 0.f;
#pragma unroll
            for (int i = 0; i < 64; ++i) {
                const float d = v[i] - c;
                if (i & 1) { s1a += d; s2a = fmaf(d, d, s2a); }
                else { s1b += d; s2b = fmaf(d, d, s2b); }
            }
            c = (s1a + s1b) * 1e-3f + (s2a + s2b) * 1e-6f;  // the next iteration depends on this one
        }
        result = c;
    }
    const long long stop = clock64();
    cycles[blockIdx.x * 4 + (warp - 12)] = stop - start;
    if (result == 12345.f) sink[1] = result;
    __syncwarp();
    if (lane == 0) atomicAdd(&done, 1);
}

}  // namespace

int main() {
    const int sms = print_device();
    long long *cycles = nullptr, *rounds = nullptr;
    float* sink = nullptr;
    cudaMalloc(&cycles, sms * 4 * sizeof(long long));
    cudaMalloc(&rounds, sms * 4 * sizeof(long long));
    cudaMalloc(&sink, 2 * sizeof(float));
    long long* host_cycles = new long long[sms * 4];
    long long* host_rounds = new long long[sms * 4];
    using Kernel = void (*)(long long*, long long*, float*, int, int);
    const Kernel kernels[5] = {epilogue_beside_products<0>, epilogue_beside_products<1>, epilogue_beside_products<2>,
                               epilogue_beside_products<3>, epilogue_beside_products<4>};
    const char* names[5] = {"statistics", "pooling", "nothing", "max-min", "integer"};
    const int iters[5] = {2000, 8000, 400, 2000, 2000};
    for (int kind = 0; kind < 5; ++kind) {
        cudaFuncSetAttribute(kernels[kind], cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        for (int products = kind == 2 ? 1 : 0; products <= 3; ++products) {
            for (int rep = 0; rep < 2; ++rep)
                kernels[kind]<<<sms, kThreads, kSmemBytes>>>(cycles, rounds, sink, iters[kind], products);
            const cudaError_t err = cudaDeviceSynchronize();
            if (err != cudaSuccess) {
                printf("CUDA error: %s\n", cudaGetErrorString(err));
                return 1;
            }
            cudaMemcpy(host_cycles, cycles, sms * 4 * sizeof(long long), cudaMemcpyDeviceToHost);
            cudaMemcpy(host_rounds, rounds, sms * 4 * sizeof(long long), cudaMemcpyDeviceToHost);
            double total = 0.0, round_total = 0.0;
            for (int b = 0; b < sms; ++b) {
                for (int w = 0; w < 4; ++w) total += static_cast<double>(host_cycles[b * 4 + w]);
                for (int w = 0; w < products; ++w) round_total += static_cast<double>(host_rounds[b * 4 + w]);
            }
            const double per_iter = total / (sms * 4) / iters[kind];
            const double elapsed = total / (sms * 4);  // cycles warpgroup 3 ran: the products ran about as long
            // products' rate while it ran: 9 m64n128k8 per round, 64 cycles each at the peak
            const double busy = products ? 100.0 * round_total / sms * 9 * 64 / elapsed : 0.0;
            printf("%-10s beside %d warpgroup(s) issuing products: %7.1f cycles per iteration; tensor cores %3.0f %% busy\n",
                   names[kind], products, per_iter, busy);
        }
    }
    delete[] host_cycles;
    delete[] host_rounds;
    cudaFree(cycles);
    cudaFree(rounds);
    cudaFree(sink);
    return 0;
}

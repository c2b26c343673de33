// mma_sync_rate.cu -- a probe, not a product kernel: the throughput of mma.sync on this GPU for the shapes the
// kernels use, m16n8k8 TF32 and m16n8k16 FP16 / BF16 (fp32 accumulation). Run with scripts/probes/mma_sync_rate.py.
//
// Every warp of every SM runs `chains` independent accumulator chains for `iters` steps on fixed operands, so the
// tensor cores, not the loads or the dependencies, set the pace (more chains or warps no longer raise the rate).
// On an H100 80GB HBM3 (2026-11-24): 311 TFLOP/s TF32 and 625 TFLOP/s FP16 / BF16, 3.45 ns per mma per warp
// scheduler for either shape: the tensor cores take an m16n8k16 FP16 in the time of an m16n8k8 TF32.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

// One mma of kind KIND (0: m16n8k8 TF32, 1: m16n8k16 FP16, 2: m16n8k16 BF16) into d. volatile: the probe must
// not be optimised away, and the chains are independent anyway.
template <int KIND>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (KIND == 0)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else if constexpr (KIND == 1)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int KIND, int CHAINS>
__global__ void mma_chains(float* out, int iters) {
    float acc[CHAINS][4] = {};
    uint32_t a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u + threadIdx.x + i;  // any finite bits
    for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u + i;
    for (int it = 0; it < iters; ++it)
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) mma<KIND>(acc[c], a, b);
    float s = 0.f;
    for (int c = 0; c < CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the chains live
}

// Launches blocks x (warps * 32) threads of `kind` with 4 or 8 chains on the current stream.
void run(torch::Tensor out, int64_t kind, int64_t chains, int64_t blocks, int64_t warps, int64_t iters) {
    TORCH_CHECK(out.is_cuda() && out.scalar_type() == torch::kFloat32 && out.numel() >= blocks * warps * 32,
                "run: out must be a float32 CUDA tensor of at least blocks * warps * 32 elements");
    TORCH_CHECK(kind >= 0 && kind <= 2 && (chains == 4 || chains == 8), "run: kind 0..2 and chains 4 or 8");
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const dim3 grid(static_cast<unsigned>(blocks)), block(static_cast<unsigned>(warps * 32));
    float* o = out.data_ptr<float>();
    const int n = static_cast<int>(iters);
    if (kind == 0) chains == 4 ? mma_chains<0, 4><<<grid, block, 0, stream>>>(o, n) : mma_chains<0, 8><<<grid, block, 0, stream>>>(o, n);
    if (kind == 1) chains == 4 ? mma_chains<1, 4><<<grid, block, 0, stream>>>(o, n) : mma_chains<1, 8><<<grid, block, 0, stream>>>(o, n);
    if (kind == 2) chains == 4 ? mma_chains<2, 4><<<grid, block, 0, stream>>>(o, n) : mma_chains<2, 8><<<grid, block, 0, stream>>>(o, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }

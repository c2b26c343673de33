// model_a_v1_fused_tail.cu -- KernelBench L2-79, version 1: everything after the Conv3d, in two passes.
//
// What it computes
//   The reference model (kernels/model_a_conv3d_instnorm_clamp_max.py) is
//       y = conv3d(x);  z = y * m;  z = instance_norm(z);  z = clamp(z, lo, hi);  z = z * m;
//       out = z.max(dim=1)
//   with one multiplier m_c per output channel (any sign, zero allowed). This file takes the
//   conv output y (PyTorch's cuDNN conv) and computes `out` from it without writing any
//   intermediate tensor of y's size.
//
// The math
//   InstanceNorm of z = m_c * y over the S = D*H*W positions of one (n, c) plane needs
//       mean(z) = m_c * mu,   var(z) = m_c^2 * var,   mu, var = mean and biased variance of y,
//   so the first "* m" is never materialised:
//       norm = (m_c * y - m_c * mu) / sqrt(m_c^2 var + eps) = (y - mu) * a,
//       a    = m_c / sqrt(m_c^2 var + eps)                      (a = 0 when m_c = 0, as in PyTorch)
//       out[n, s] = max_c  m_c * clamp((y[n, c, s] - mu) * a, lo, hi)
//   NaN propagates through the max like torch.max. InstanceNorm removes any per-channel constant,
//   so the conv bias cannot change `out`: the caller may pass the conv output without its bias
//   (ModelNew does, and saves PyTorch's separate bias-add pass over y).
//   y - mu is evaluated as (y - K) - (mu - K), K the plane's first element: y - K is exact for
//   values near K and mu - K keeps full precision, so a large common offset costs nothing.
//
// Two passes over y (the floor for a kernel that starts from y in device memory):
//   1. plane_stats_kernel: one block per chunk of an (n, c) plane. Sums d = y - K and d^2 in
//      float64, where K is the plane's first element. The shift removes the common offset
//      (inputs shifted by +100 lose nothing) and float64 sums keep E[d^2] - E[d]^2 exact to far
//      below float32 rounding, so this is as robust as Welford and cheaper per element.
//      Writes one double2 (sum d, sum d^2) per chunk.
//   2. normalize_clamp_max_kernel: one block per (n, tile of positions). Its prologue merges
//      the chunk sums of sample n into (K, mu - K, a, m) per channel in shared memory; then each thread
//      reads y[n, :, s] for 4 positions (float4 loads when aligned), applies the formula and
//      writes out[n, s] once.
//   Pass 1 walks the planes last-to-first and pass 2 first-to-last: the conv's last-written
//   planes are still in L2 when pass 1 starts, and pass 1's last-read planes are still there
//   when pass 2 starts.
//
// Shapes and layouts
//   y    : (N, C, D, H, W) float32, contiguous (NCDHW), CUDA
//   m    : C float32 values, contiguous (the model's (C, 1, 1, 1) parameter is accepted as is)
//   out  : (N, D, H, W) float32, contiguous, on y's device; every element is written
//
// Envelope (checked; anything outside raises a RuntimeError naming the argument)
//   N >= 0 (N = 0 returns at once), 1 <= C <= 8192, any D, H, W, eps > 0, any lo, hi
//   (lo > hi behaves like torch.clamp: the result is hi). Sizes up to 2^62 elements.
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_a_v1", cpp_sources="",
//       cuda_sources=open("model_a_v1_fused_tail.cu").read(),
//       extra_cuda_cflags=["-O3", "-lineinfo"])
//   then  ext.fused_tail(y, m, clamp_min, clamp_max, eps, out)  ->  out
//   (helpers.load_kernel("model_a_v1_fused_tail") does this with a build cache.)

#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <string>

namespace model_a_v1 {

constexpr int kStatsThreads = 256;
constexpr int kStatsUnroll = 4;                        // float4 loads in flight per thread, pass 1
constexpr int64_t kStatsBlocksPerSm = 16;              // pass 1 splits planes below this many blocks
constexpr int kTailThreads = 256;
constexpr int kTailPerThread = 4;                      // positions per thread in pass 2
constexpr int kTailPositionsPerBlock = kTailThreads * kTailPerThread;
constexpr int64_t kMinChunk = 4096;                    // smallest plane chunk of pass 1
constexpr int kMaxChannels = 8192;                     // 16 B per channel in shared memory (128 KB)

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void accumulate(float v, float shift, double& s1, double& s2) {
    const double d = static_cast<double>(v - shift);
    s1 += d;
    s2 = fma(d, d, s2);
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One output contribution: m * clamp(((y - K) - (mu - K)) * a, lo, hi), coef = (K, mu - K, a, m).
__device__ __forceinline__ float channel_value(float y, float4 coef, float lo, float hi) {
    return coef.w * fminf(fmaxf(((y - coef.x) - coef.y) * coef.z, lo), hi);
}

// max that propagates NaN (torch.max does; fmaxf would drop it).
__device__ __forceinline__ float nan_max(float best, float v) {
    return (v > best || v != v) ? v : best;
}

// ---------------------------------------------------------------------------------------------
// Pass 1: shifted float64 sums per chunk of each (n, c) plane
// ---------------------------------------------------------------------------------------------
// grid.x = planes * chunks_per_plane, walked from the last plane to the first.
// partial[plane * chunks_per_plane + chunk] = (sum (y - K), sum (y - K)^2), K = y[plane, 0].
__global__ void __launch_bounds__(kStatsThreads)
plane_stats_kernel(const float* __restrict__ y, double2* __restrict__ partial,
                   int64_t plane_size, int64_t chunk_size, int chunks_per_plane) {
    const int64_t work = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
    const int64_t plane = work / chunks_per_plane;
    const int64_t chunk = work % chunks_per_plane;

    const float* plane_ptr = y + plane * plane_size;
    const float shift = __ldg(plane_ptr);
    const int64_t begin = chunk * chunk_size;
    const int64_t end = min(begin + chunk_size, plane_size);

    // Split [begin, end) into a scalar head up to a 16-byte boundary, a float4 body and a tail.
    const float* p = plane_ptr + begin;
    const int64_t n = end - begin;
    const int64_t misalign = (reinterpret_cast<uintptr_t>(p) >> 2) & 3;
    const int64_t head = min(n, (4 - misalign) & 3);
    const int64_t body4 = (n - head) >> 2;
    const float4* body = reinterpret_cast<const float4*>(p + head);

    double s1 = 0.0, s2 = 0.0;
    if (threadIdx.x < head) accumulate(__ldg(p + threadIdx.x), shift, s1, s2);

    // kStatsUnroll independent 16-byte loads in flight per thread before any arithmetic.
    int64_t i = threadIdx.x;
    for (; i + (kStatsUnroll - 1) * kStatsThreads < body4; i += kStatsUnroll * kStatsThreads) {
        float4 v[kStatsUnroll];
#pragma unroll
        for (int u = 0; u < kStatsUnroll; ++u) v[u] = __ldg(body + i + u * kStatsThreads);
#pragma unroll
        for (int u = 0; u < kStatsUnroll; ++u) {
            accumulate(v[u].x, shift, s1, s2);
            accumulate(v[u].y, shift, s1, s2);
            accumulate(v[u].z, shift, s1, s2);
            accumulate(v[u].w, shift, s1, s2);
        }
    }
    for (; i < body4; i += kStatsThreads) {
        const float4 v = __ldg(body + i);
        accumulate(v.x, shift, s1, s2);
        accumulate(v.y, shift, s1, s2);
        accumulate(v.z, shift, s1, s2);
        accumulate(v.w, shift, s1, s2);
    }
    const int64_t tail_begin = head + 4 * body4;
    if (tail_begin + threadIdx.x < n) accumulate(__ldg(p + tail_begin + threadIdx.x), shift, s1, s2);

    // Block reduction: warp shuffles, then the first warp over the per-warp sums.
    __shared__ double warp_s1[kStatsThreads / 32];
    __shared__ double warp_s2[kStatsThreads / 32];
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { warp_s1[warp] = s1; warp_s2[warp] = s2; }
    __syncthreads();
    if (warp == 0) {
        s1 = lane < kStatsThreads / 32 ? warp_s1[lane] : 0.0;
        s2 = lane < kStatsThreads / 32 ? warp_s2[lane] : 0.0;
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        if (lane == 0) partial[work] = make_double2(s1, s2);
    }
}

// ---------------------------------------------------------------------------------------------
// Pass 2: normalise -> clamp -> * m -> max over channels
// ---------------------------------------------------------------------------------------------
// grid.x = N * tiles_per_sample (sample-major, first sample first); dynamic shared memory holds
// (K, mu - K, a, m) for the C channels of this block's sample. VEC4: S % 4 == 0 and y, out 16-byte aligned.
template <bool VEC4>
__global__ void __launch_bounds__(kTailThreads)
normalize_clamp_max_kernel(const float* __restrict__ y, const double2* __restrict__ partial,
                           const float* __restrict__ multiplier, float* __restrict__ out,
                           int channels, int64_t plane_size, int chunks_per_plane,
                           int64_t tiles_per_sample, float eps, float lo, float hi) {
    extern __shared__ float4 coef[];  // coef[c] = (K, mu - K, a, m)
    const int64_t sample = blockIdx.x / tiles_per_sample;
    const int64_t tile = blockIdx.x % tiles_per_sample;

    // Prologue: merge pass 1's chunk sums of this sample's planes into (K, mu - K, a, m).
    for (int c = threadIdx.x; c < channels; c += kTailThreads) {
        const int64_t plane = sample * channels + c;
        double s1 = 0.0, s2 = 0.0;
        for (int k = 0; k < chunks_per_plane; ++k) {
            const double2 s = partial[plane * chunks_per_plane + k];
            s1 += s.x;
            s2 += s.y;
        }
        const double count = static_cast<double>(plane_size);
        const double mean_d = s1 / count;                        // mu - K
        const double var = fmax(s2 / count - mean_d * mean_d, 0.0);
        const float m = __ldg(multiplier + c);
        const double a = m / sqrt(static_cast<double>(m) * m * var + static_cast<double>(eps));
        coef[c] = make_float4(__ldg(y + plane * plane_size), static_cast<float>(mean_d),
                              static_cast<float>(a), m);
    }
    __syncthreads();

    const int64_t s0 = tile * kTailPositionsPerBlock;
    const float* y_sample = y + sample * channels * plane_size;
    float* out_sample = out + sample * plane_size;

    if constexpr (VEC4) {
        const int64_t s = s0 + 4 * static_cast<int64_t>(threadIdx.x);
        if (s >= plane_size) return;
        float4 best = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        int c = 0;
        // Eight channels' loads in flight before the arithmetic that uses them.
        for (; c + 8 <= channels; c += 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u)
                v[u] = __ldcs(reinterpret_cast<const float4*>(y_sample + (c + u) * plane_size + s));
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const float4 k = coef[c + u];
                best.x = nan_max(best.x, channel_value(v[u].x, k, lo, hi));
                best.y = nan_max(best.y, channel_value(v[u].y, k, lo, hi));
                best.z = nan_max(best.z, channel_value(v[u].z, k, lo, hi));
                best.w = nan_max(best.w, channel_value(v[u].w, k, lo, hi));
            }
        }
        for (; c < channels; ++c) {
            const float4 v = __ldcs(reinterpret_cast<const float4*>(y_sample + c * plane_size + s));
            const float4 k = coef[c];
            best.x = nan_max(best.x, channel_value(v.x, k, lo, hi));
            best.y = nan_max(best.y, channel_value(v.y, k, lo, hi));
            best.z = nan_max(best.z, channel_value(v.z, k, lo, hi));
            best.w = nan_max(best.w, channel_value(v.w, k, lo, hi));
        }
        *reinterpret_cast<float4*>(out_sample + s) = best;
    } else {
        // Scalar path for any S: thread t owns positions s0 + t + j * kTailThreads, j < 4.
        float best[kTailPerThread];
        bool valid[kTailPerThread];
#pragma unroll
        for (int j = 0; j < kTailPerThread; ++j) {
            best[j] = -INFINITY;
            valid[j] = s0 + threadIdx.x + j * kTailThreads < plane_size;
        }
        for (int c = 0; c < channels; ++c) {
            const float4 k = coef[c];
            const float* plane_ptr = y_sample + c * plane_size + s0 + threadIdx.x;
            float v[kTailPerThread];
#pragma unroll
            for (int j = 0; j < kTailPerThread; ++j) v[j] = valid[j] ? __ldcs(plane_ptr + j * kTailThreads) : 0.f;
#pragma unroll
            for (int j = 0; j < kTailPerThread; ++j) best[j] = nan_max(best[j], channel_value(v[j], k, lo, hi));
        }
#pragma unroll
        for (int j = 0; j < kTailPerThread; ++j)
            if (valid[j]) out_sample[s0 + threadIdx.x + j * kTailThreads] = best[j];
    }
}

// ---------------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------------

// "(2, 3, 4)": a shape for an error message, built without iostreams.
inline std::string str_of(c10::IntArrayRef sizes) {
    std::string text = "(";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + ")";
}


torch::Tensor fused_tail(const torch::Tensor& y, const torch::Tensor& multiplier, double clamp_min,
                         double clamp_max, double eps, torch::Tensor out) {
    // Messages get numbers, shapes and devices as std::string (see str_of): streaming numbers
    // into TORCH_CHECK from nvcc-compiled host code crashed one GPU host instead of raising.
    TORCH_CHECK(y.is_cuda(), "fused_tail: y (the conv output) must be a CUDA tensor, got one on ",
                y.device().str());
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "fused_tail: y must be float32, got ",
                c10::toString(y.scalar_type()));
    TORCH_CHECK(y.dim() == 5, "fused_tail: y must be 5-D (N, C, D, H, W), got shape ", str_of(y.sizes()));
    TORCH_CHECK(y.is_contiguous(), "fused_tail: y must be contiguous (NCDHW)");
    const int64_t N = y.size(0), C = y.size(1);
    const int64_t S = y.size(2) * y.size(3) * y.size(4);
    TORCH_CHECK(C >= 1 && C <= kMaxChannels, "fused_tail: y has ", std::to_string(C),
                " channels; supported: 1 to ", std::to_string(kMaxChannels));
    TORCH_CHECK(multiplier.device() == y.device(), "fused_tail: multiplier must be on ", y.device().str(),
                ", got ", multiplier.device().str());
    TORCH_CHECK(multiplier.scalar_type() == torch::kFloat32, "fused_tail: multiplier must be float32, got ",
                c10::toString(multiplier.scalar_type()));
    TORCH_CHECK(multiplier.is_contiguous(), "fused_tail: multiplier must be contiguous");
    TORCH_CHECK(multiplier.numel() == C, "fused_tail: multiplier must hold one value per channel (",
                std::to_string(C), "), got shape ", str_of(multiplier.sizes()));
    TORCH_CHECK(out.device() == y.device(), "fused_tail: out must be on ", y.device().str(), ", got ",
                out.device().str());
    TORCH_CHECK(out.scalar_type() == torch::kFloat32, "fused_tail: out must be float32, got ",
                c10::toString(out.scalar_type()));
    TORCH_CHECK(out.is_contiguous(), "fused_tail: out must be contiguous");
    TORCH_CHECK(out.dim() == 4 && out.size(0) == N && out.size(1) == y.size(2) && out.size(2) == y.size(3) &&
                    out.size(3) == y.size(4),
                "fused_tail: out must have shape (N, D, H, W) of y ", str_of(y.sizes()), ", got ",
                str_of(out.sizes()));
    TORCH_CHECK(eps > 0.0, "fused_tail: eps must be > 0, got ", std::to_string(eps));
    if (out.numel() == 0) return out;

    const c10::cuda::CUDAGuard device_guard(y.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int num_sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, y.get_device()));

    // Pass 1 grid: one block per plane, or more chunks per plane when there are too few planes
    // to fill the GPU (about 8 resident blocks of 256 threads per SM, two waves).
    const int64_t planes = N * C;
    const int64_t target_blocks = kStatsBlocksPerSm * num_sms;
    int64_t chunks = 1;
    if (planes < target_blocks) {
        const int64_t max_chunks = std::max<int64_t>(1, (S + kMinChunk - 1) / kMinChunk);
        chunks = std::min(max_chunks, (target_blocks + planes - 1) / planes);
    }
    const int64_t chunk_size = (S + chunks - 1) / chunks;
    chunks = (S + chunk_size - 1) / chunk_size;  // no empty chunk
    TORCH_CHECK(planes * chunks < (1LL << 31), "fused_tail: too many planes: ", std::to_string(planes));

    auto partial = torch::empty({planes * chunks, 2}, y.options().dtype(torch::kFloat64));
    auto* partial_ptr = reinterpret_cast<double2*>(partial.data_ptr<double>());
    plane_stats_kernel<<<static_cast<unsigned>(planes * chunks), kStatsThreads, 0, stream>>>(
        y.data_ptr<float>(), partial_ptr, S, chunk_size, static_cast<int>(chunks));
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t tiles = (S + kTailPositionsPerBlock - 1) / kTailPositionsPerBlock;
    TORCH_CHECK(N * tiles < (1LL << 31), "fused_tail: output too large: ", std::to_string(N * tiles),
                " blocks");
    const size_t smem = static_cast<size_t>(C) * sizeof(float4);
    const bool vec4 = S % 4 == 0 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
    const auto launch = [&](auto kernel) {
        if (smem > 48 * 1024)
            C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
        kernel<<<static_cast<unsigned>(N * tiles), kTailThreads, smem, stream>>>(
            y.data_ptr<float>(), partial_ptr, multiplier.data_ptr<float>(), out.data_ptr<float>(),
            static_cast<int>(C), S, static_cast<int>(chunks), tiles, static_cast<float>(eps),
            static_cast<float>(clamp_min), static_cast<float>(clamp_max));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (vec4) launch(normalize_clamp_max_kernel<true>);
    else launch(normalize_clamp_max_kernel<false>);
    return out;
}

}  // namespace model_a_v1

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-79 v1: fused InstanceNorm(m*y) -> clamp -> *m -> max over channels";
    m.def("fused_tail", &model_a_v1::fused_tail, "out[n,s] = max_c m_c*clamp(instnorm(m_c*y)[n,c,s], lo, hi)",
          py::arg("y"), py::arg("multiplier"), py::arg("clamp_min"), py::arg("clamp_max"), py::arg("eps"),
          py::arg("out"));
}

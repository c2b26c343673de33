// model_b_v1_v2_groupnorm_pool.cu -- KernelBench L2-85, versions 1 and 2: everything after the Conv2d.
//
// What it computes
//   The reference model (kernels/model_b_conv2d_groupnorm_pool.py) is
//       y = conv2d(x) + bias;  z = group_norm(y; G groups, gamma, beta, eps);  z = z * scale;
//       z = max_pool2d(z, P) (stride P, floor mode);  out = clamp(z, lo, hi)
//   This file takes the conv output WITHOUT its bias (cuDNN adds a bias in a separate pass over
//   the whole conv output; here it is added on the fly) and computes `out`, writing nothing of
//   the conv output's size.
//
// The math
//   Per (n, c), GroupNorm then x scale is an affine map  v = a * (y + bias_c) + b  with
//       a = gamma_c * scale_c * rstd(n, g),   b = (beta_c - gamma_c * mu(n, g) * rstd(n, g)) * scale_c,
//   mu and rstd = 1 / sqrt(var + eps) taken over the group's C/G planes of y + bias, all H x W
//   positions (also the last rows/columns that fall in no pooling window).
//   v1: out = clamp(max over the P x P window of v)                  (P*P affine evaluations)
//   v2: max-pooling commutes with a non-decreasing map and turns into min-pooling under a
//       non-increasing one; the sign of a is the sign of gamma_c * scale_c (rstd > 0), known
//       before any statistic. So  out = clamp(a * Q + b), Q = max-pool of y + bias where a >= 0
//       and its min-pool where a < 0                                 (one affine evaluation)
//   y + bias - mu is evaluated as ((y - K) + bias_c) - (mu - K), K the group's first conv value:
//   a large common offset (inputs shifted by +100) costs no precision.
//
// Two passes over y
//   1. plane_stats_kernel: one block per chunk of an (n, c) plane; float64 sums of
//      d = (y - K) + bias_c and d^2 (as robust as Welford, cheaper per element).
//   2. affine_pool_clamp_kernel<POOL_FIRST>: one thread per pooled output; its block's prologue
//      merges the plane sums of the group into (K, mu - K, rstd); then v1 or v2 as above.
//
// Shapes and layouts
//   y      : (N, C, H, W) float32, contiguous (NCHW), CUDA -- the conv output without bias
//   bias, gamma, beta, scale : C float32 values each, contiguous, on y's device
//   out    : (N, C, H / P, W / P) float32, contiguous, on y's device; every element is written
//
// Envelope (checked; anything outside raises a RuntimeError naming the argument)
//   N >= 0 (N = 0 returns at once), C >= 1, groups >= 1 dividing C, 1 <= P <= min(H, W)
//   (PyTorch raises for a window larger than the input too), P <= 16, eps > 0, any lo, hi.
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_b_v1_v2", cpp_sources="",
//       cuda_sources=open("model_b_v1_v2_groupnorm_pool.cu").read(), extra_cuda_cflags=["-O3"])
//   ext.fused_tail(y, bias, gamma, beta, scale, groups, pool, clamp_min, clamp_max, eps,
//                  pool_first, out) -> out          (pool_first=False: v1, True: v2)

#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <string>

namespace model_b {

constexpr int kStatsThreads = 256;
constexpr int kStatsUnroll = 4;            // float4 loads in flight per thread, pass 1
constexpr int64_t kStatsBlocksPerSm = 16;  // pass 1 splits planes below this many blocks
constexpr int64_t kMinChunk = 4096;        // smallest plane chunk of pass 1
constexpr int kPoolThreads = 256;
constexpr int kMaxPool = 16;

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void accumulate(float v, float shift, float bias, double& s1, double& s2) {
    const double d = static_cast<double>((v - shift) + bias);
    s1 += d;
    s2 = fma(d, d, s2);
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Pass 1: shifted float64 sums per chunk of each (n, c) plane, bias included
// ---------------------------------------------------------------------------------------------
// grid.x = N * C * chunks_per_plane, walked from the last plane to the first (the conv wrote the
// last planes last: some are still in L2). partial[plane * chunks + chunk] = (sum d, sum d^2),
// d = (y - K) + bias_c, K = y[n, first channel of c's group, 0, 0].
__global__ void __launch_bounds__(kStatsThreads)
plane_stats_kernel(const float* __restrict__ y, const float* __restrict__ bias, double2* __restrict__ partial,
                   int channels, int channels_per_group, int64_t plane_size, int64_t chunk_size,
                   int chunks_per_plane) {
    const int64_t work = static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x;
    const int64_t plane = work / chunks_per_plane;
    const int64_t chunk = work % chunks_per_plane;
    const int c = static_cast<int>(plane % channels);
    const int64_t group_first_plane = plane - c % channels_per_group;

    const float shift = __ldg(y + group_first_plane * plane_size);
    const float b = __ldg(bias + c);
    const int64_t begin = chunk * chunk_size;
    const int64_t end = min(begin + chunk_size, plane_size);

    // Scalar head up to a 16-byte boundary, float4 body, scalar tail.
    const float* p = y + plane * plane_size + begin;
    const int64_t n = end - begin;
    const int64_t misalign = (reinterpret_cast<uintptr_t>(p) >> 2) & 3;
    const int64_t head = min(n, (4 - misalign) & 3);
    const int64_t body4 = (n - head) >> 2;
    const float4* body = reinterpret_cast<const float4*>(p + head);

    double s1 = 0.0, s2 = 0.0;
    if (threadIdx.x < head) accumulate(__ldg(p + threadIdx.x), shift, b, s1, s2);
    int64_t i = threadIdx.x;
    for (; i + (kStatsUnroll - 1) * kStatsThreads < body4; i += kStatsUnroll * kStatsThreads) {
        float4 v[kStatsUnroll];
#pragma unroll
        for (int u = 0; u < kStatsUnroll; ++u) v[u] = __ldg(body + i + u * kStatsThreads);
#pragma unroll
        for (int u = 0; u < kStatsUnroll; ++u) {
            accumulate(v[u].x, shift, b, s1, s2);
            accumulate(v[u].y, shift, b, s1, s2);
            accumulate(v[u].z, shift, b, s1, s2);
            accumulate(v[u].w, shift, b, s1, s2);
        }
    }
    for (; i < body4; i += kStatsThreads) {
        const float4 v = __ldg(body + i);
        accumulate(v.x, shift, b, s1, s2);
        accumulate(v.y, shift, b, s1, s2);
        accumulate(v.z, shift, b, s1, s2);
        accumulate(v.w, shift, b, s1, s2);
    }
    const int64_t tail_begin = head + 4 * body4;
    if (tail_begin + threadIdx.x < n) accumulate(__ldg(p + tail_begin + threadIdx.x), shift, b, s1, s2);

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
// Pass 2: affine -> pool -> clamp (v1) or sign-selected pool -> affine -> clamp (v2)
// ---------------------------------------------------------------------------------------------
// grid.x = N * C * tiles_per_plane (plane-major, first plane first); each thread one pooled output.
template <bool POOL_FIRST>
__global__ void __launch_bounds__(kPoolThreads)
affine_pool_clamp_kernel(const float* __restrict__ y, const double2* __restrict__ partial,
                         const float* __restrict__ bias, const float* __restrict__ gamma,
                         const float* __restrict__ beta, const float* __restrict__ scale,
                         float* __restrict__ out, int channels, int channels_per_group, int height,
                         int width, int pool, int chunks_per_plane, int64_t tiles_per_plane, float eps,
                         float lo, float hi) {
    const int64_t plane = blockIdx.x / tiles_per_plane;
    const int64_t tile = blockIdx.x % tiles_per_plane;
    const int c = static_cast<int>(plane % channels);
    const int64_t group_first_plane = plane - c % channels_per_group;
    const int64_t plane_size = static_cast<int64_t>(height) * width;

    // Prologue: the group's statistics from pass 1's sums (every thread of the block needs them).
    __shared__ float4 coef;  // (K, mu - K, a, b') with v = a * (((y - K) + bias) - (mu - K)) + b'
    if (threadIdx.x == 0) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t q = 0; q < static_cast<int64_t>(channels_per_group) * chunks_per_plane; ++q) {
            const double2 s = partial[group_first_plane * chunks_per_plane + q];
            s1 += s.x;
            s2 += s.y;
        }
        const double count = static_cast<double>(plane_size) * channels_per_group;
        const double mean_d = s1 / count;
        const double var = fmax(s2 / count - mean_d * mean_d, 0.0);
        const double rstd = 1.0 / sqrt(var + static_cast<double>(eps));
        const double gs = static_cast<double>(__ldg(gamma + c)) * __ldg(scale + c);
        coef = make_float4(__ldg(y + group_first_plane * plane_size), static_cast<float>(mean_d),
                           static_cast<float>(gs * rstd),
                           static_cast<float>(static_cast<double>(__ldg(beta + c)) * __ldg(scale + c)));
    }
    __syncthreads();

    const int pooled_w = width / pool, pooled_h = height / pool;
    const int64_t index = tile * kPoolThreads + threadIdx.x;
    if (index >= static_cast<int64_t>(pooled_h) * pooled_w) return;
    const int ph = static_cast<int>(index / pooled_w), pw = static_cast<int>(index % pooled_w);
    const float* window = y + plane * plane_size + static_cast<int64_t>(ph) * pool * width + pw * pool;
    const float b = __ldg(bias + c);
    const float4 k = coef;

    float result;
    if constexpr (POOL_FIRST) {
        // v2: max-pool where a >= 0, min-pool where a < 0 (a = 0: any value gives b').
        const bool take_max = k.z >= 0.f;
        float q = take_max ? -INFINITY : INFINITY;
        for (int r = 0; r < pool; ++r)
            for (int s = 0; s < pool; ++s) {
                const float v = __ldg(window + r * width + s);
                q = take_max ? fmaxf(q, v) : fminf(q, v);
            }
        result = fmaf(k.z, ((q - k.x) + b) - k.y, k.w);
    } else {
        // v1: the affine map on every element of the window, then the max.
        result = -INFINITY;
        for (int r = 0; r < pool; ++r)
            for (int s = 0; s < pool; ++s) {
                const float v = __ldg(window + r * width + s);
                result = fmaxf(result, fmaf(k.z, ((v - k.x) + b) - k.y, k.w));
            }
    }
    out[plane * pooled_h * pooled_w + index] = fminf(fmaxf(result, lo), hi);
}

// ---------------------------------------------------------------------------------------------
// Host launcher
// ---------------------------------------------------------------------------------------------

// "(2, 3, 4)": a shape for an error message, built without iostreams (see kernels/README.md).
inline std::string str_of(c10::IntArrayRef sizes) {
    std::string text = "(";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + ")";
}

void check_per_channel(const torch::Tensor& t, const char* name, const torch::Tensor& y, int64_t C) {
    TORCH_CHECK(t.device() == y.device(), "fused_tail: ", name, " must be on ", y.device().str(), ", got ",
                t.device().str());
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, "fused_tail: ", name, " must be float32, got ",
                c10::toString(t.scalar_type()));
    TORCH_CHECK(t.is_contiguous(), "fused_tail: ", name, " must be contiguous");
    TORCH_CHECK(t.numel() == C, "fused_tail: ", name, " must hold one value per channel (", std::to_string(C),
                "), got shape ", str_of(t.sizes()));
}

torch::Tensor fused_tail(const torch::Tensor& y, const torch::Tensor& bias, const torch::Tensor& gamma,
                         const torch::Tensor& beta, const torch::Tensor& scale, int64_t groups, int64_t pool,
                         double clamp_min, double clamp_max, double eps, bool pool_first,
                         const torch::Tensor& out) {
    TORCH_CHECK(y.is_cuda(), "fused_tail: y (the conv output) must be a CUDA tensor, got one on ",
                y.device().str());
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "fused_tail: y must be float32, got ",
                c10::toString(y.scalar_type()));
    TORCH_CHECK(y.dim() == 4, "fused_tail: y must be 4-D (N, C, H, W), got shape ", str_of(y.sizes()));
    TORCH_CHECK(y.is_contiguous(), "fused_tail: y must be contiguous (NCHW)");
    const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
    TORCH_CHECK(C >= 1 && groups >= 1 && C % groups == 0, "fused_tail: groups (", std::to_string(groups),
                ") must divide the channel count (", std::to_string(C), ")");
    TORCH_CHECK(pool >= 1 && pool <= kMaxPool, "fused_tail: pool must be in [1, ", std::to_string(kMaxPool),
                "], got ", std::to_string(pool));
    TORCH_CHECK(pool <= H && pool <= W, "fused_tail: pool (", std::to_string(pool),
                ") is larger than the conv output ", str_of(y.sizes()));
    TORCH_CHECK(H * W < (1LL << 31), "fused_tail: planes larger than 2^31 elements are not supported");
    check_per_channel(bias, "bias", y, C);
    check_per_channel(gamma, "gamma", y, C);
    check_per_channel(beta, "beta", y, C);
    check_per_channel(scale, "scale", y, C);
    TORCH_CHECK(out.device() == y.device(), "fused_tail: out must be on ", y.device().str(), ", got ",
                out.device().str());
    TORCH_CHECK(out.scalar_type() == torch::kFloat32, "fused_tail: out must be float32, got ",
                c10::toString(out.scalar_type()));
    TORCH_CHECK(out.is_contiguous(), "fused_tail: out must be contiguous");
    TORCH_CHECK(out.dim() == 4 && out.size(0) == N && out.size(1) == C && out.size(2) == H / pool &&
                    out.size(3) == W / pool,
                "fused_tail: out must have shape (N, C, H / pool, W / pool) for y ", str_of(y.sizes()),
                " and pool ", std::to_string(pool), ", got ", str_of(out.sizes()));
    TORCH_CHECK(eps > 0.0, "fused_tail: eps must be > 0, got ", std::to_string(eps));
    if (out.numel() == 0) return out;

    const c10::cuda::CUDAGuard device_guard(y.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int num_sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, y.get_device()));

    const int64_t S = H * W, planes = N * C;
    const int64_t target_blocks = kStatsBlocksPerSm * num_sms;
    int64_t chunks = 1;
    if (planes < target_blocks) {
        const int64_t max_chunks = std::max<int64_t>(1, (S + kMinChunk - 1) / kMinChunk);
        chunks = std::min(max_chunks, (target_blocks + planes - 1) / planes);
    }
    const int64_t chunk_size = (S + chunks - 1) / chunks;
    chunks = (S + chunk_size - 1) / chunk_size;
    TORCH_CHECK(planes * chunks < (1LL << 31), "fused_tail: too many planes: ", std::to_string(planes));

    auto partial = torch::empty({planes * chunks, 2}, y.options().dtype(torch::kFloat64));
    auto* partial_ptr = reinterpret_cast<double2*>(partial.data_ptr<double>());
    plane_stats_kernel<<<static_cast<unsigned>(planes * chunks), kStatsThreads, 0, stream>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), partial_ptr, static_cast<int>(C),
        static_cast<int>(C / groups), S, chunk_size, static_cast<int>(chunks));
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t pooled = (H / pool) * (W / pool);
    const int64_t tiles = (pooled + kPoolThreads - 1) / kPoolThreads;
    TORCH_CHECK(planes * tiles < (1LL << 31), "fused_tail: output too large: ", std::to_string(planes * tiles),
                " blocks");
    const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(planes * tiles), kPoolThreads, 0, stream>>>(
            y.data_ptr<float>(), partial_ptr, bias.data_ptr<float>(), gamma.data_ptr<float>(),
            beta.data_ptr<float>(), scale.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(C),
            static_cast<int>(C / groups), static_cast<int>(H), static_cast<int>(W), static_cast<int>(pool),
            static_cast<int>(chunks), tiles, static_cast<float>(eps), static_cast<float>(clamp_min),
            static_cast<float>(clamp_max));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (pool_first) launch(affine_pool_clamp_kernel<true>);
    else launch(affine_pool_clamp_kernel<false>);
    return out;
}

}  // namespace model_b

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-85 v1/v2: fused GroupNorm -> *scale -> MaxPool2d -> clamp after the conv";
    m.def("fused_tail", &model_b::fused_tail,
          "out = clamp(maxpool(scale * groupnorm(y + bias))); pool_first selects v2 (sign-selected pool)",
          py::arg("y"), py::arg("bias"), py::arg("gamma"), py::arg("beta"), py::arg("scale"), py::arg("groups"),
          py::arg("pool"), py::arg("clamp_min"), py::arg("clamp_max"), py::arg("eps"), py::arg("pool_first"),
          py::arg("out"));
}

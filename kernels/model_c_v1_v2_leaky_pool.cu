// model_c_v1_v2_leaky_pool.cu -- KernelBench L2-74, versions 1 and 2: everything after the ConvTranspose3d.
//
// What it computes
//   The reference model (kernels/model_c_convtranspose3d_leaky_pool.py) is
//       y = conv_transpose3d(x) + bias;  z = leaky(y);  z = z * m;  z = leaky(z);  out = max_pool3d(z, P)
//   with one multiplier m_c per output channel (any sign, zero allowed) and leaky(v) = v if v >= 0
//   else slope * v. This file takes the conv output WITHOUT its bias (added on the fly) and writes
//   only the pooled output: one pass, one read of y, nothing of y's size written.
//
// The math
//   f_c(v) = leaky(m_c * leaky(v + bias_c)).
//   v1: out = max over the P x P x P window of f_c(y)                     (P^3 evaluations of f)
//   v2: for slope >= 0, leaky is non-decreasing, so f_c is non-decreasing when m_c >= 0 and
//       non-increasing when m_c < 0. A max over a window commutes with a non-decreasing map and
//       turns into a min under a non-increasing one:
//           out = f_c(max-pool of y)  where m_c >= 0,   f_c(min-pool of y)  where m_c < 0
//       (one evaluation of f). With slope < 0 leaky is not monotone: v2 falls back to v1.
//   NaN: like PyTorch's max_pool3d, a NaN in the window gives NaN.
//
// Shapes and layouts
//   y          : (N, C, D, H, W) float32, contiguous (NCDHW), CUDA -- the conv output without bias
//   bias, m    : C float32 values each, contiguous, on y's device
//   out        : (N, C, D / P, H / P, W / P) float32, contiguous; every element is written
//
// Envelope (checked; anything outside raises a RuntimeError naming the argument)
//   N >= 0 (N = 0 returns at once), C >= 1, 1 <= P <= min(D, H, W), P <= 8, any slope, fewer
//   than 2^31 pooled outputs per (n, c) plane. P = 2 with W % 4 == 0 takes a float4 path (two
//   outputs per thread); any other case a scalar path.
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_c_v1_v2", cpp_sources="",
//       cuda_sources=open("model_c_v1_v2_leaky_pool.cu").read(), extra_cuda_cflags=["-O3"])
//   ext.fused_tail(y, bias, m, slope, pool, pool_first, out) -> out   (pool_first: v2)

#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <string>

namespace model_c {

constexpr int kThreads = 256;
constexpr int kMaxPool = 8;

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float leaky(float v, float slope) { return v >= 0.f ? v : v * slope; }

// f(v) = leaky(m * leaky(v + bias)).
__device__ __forceinline__ float tail_map(float v, float bias, float m, float slope) {
    return leaky(m * leaky(v + bias, slope), slope);
}

// max / min that propagate NaN (PyTorch's pooling does; fmaxf/fminf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }
__device__ __forceinline__ float nan_min(float a, float b) { return (b < a || b != b) ? b : a; }

// One window's result from its values: v2 pools then applies f once, v1 applies f to each value.
template <bool POOL_FIRST, int COUNT>
__device__ __forceinline__ float window_result(const float (&v)[COUNT], float b, float m, float slope) {
    if (POOL_FIRST && slope >= 0.f) {
        float q = v[0];
        if (m >= 0.f) {
#pragma unroll
            for (int i = 1; i < COUNT; ++i) q = nan_max(q, v[i]);
        } else {
#pragma unroll
            for (int i = 1; i < COUNT; ++i) q = nan_min(q, v[i]);
        }
        return tail_map(q, b, m, slope);
    }
    float r = tail_map(v[0], b, m, slope);
#pragma unroll
    for (int i = 1; i < COUNT; ++i) r = nan_max(r, tail_map(v[i], b, m, slope));
    return r;
}

// ---------------------------------------------------------------------------------------------
// Kernels. grid = (tiles of one plane's pooled outputs, planes); blockIdx.y strides over the
// N * C planes so any count fits; in-plane indices are 32-bit (checked on the host).
// ---------------------------------------------------------------------------------------------

// P = 2, W % 4 == 0, 16-byte aligned: each thread makes two adjacent outputs from four float4
// loads (2 depths x 2 rows x 4 columns) and writes them as one float2.
template <bool POOL_FIRST>
__global__ void __launch_bounds__(kThreads)
pool2_vec_kernel(const float* __restrict__ y, const float* __restrict__ bias, const float* __restrict__ multiplier,
                 float* __restrict__ out, int channels, int64_t planes, int depth, int height, int width,
                 float slope) {
    const int pw_pairs = width / 4, ph_count = height / 2, pd_count = depth / 2;
    const int pairs_per_plane = pd_count * ph_count * pw_pairs;
    const int pair = blockIdx.x * kThreads + threadIdx.x;
    if (pair >= pairs_per_plane) return;
    const int pq = pair % pw_pairs, ph = (pair / pw_pairs) % ph_count, pd = pair / (pw_pairs * ph_count);
    for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const int c = static_cast<int>(plane % channels);
        const float b = __ldg(bias + c), m = __ldg(multiplier + c);
        const float* base = y + plane * depth * height * width +
                            (static_cast<int64_t>(2 * pd) * height + 2 * ph) * width + 4 * pq;
        float4 v[4];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                v[2 * t + r] = __ldg(reinterpret_cast<const float4*>(base + (static_cast<int64_t>(t) * height + r) * width));
        const float left[8] = {v[0].x, v[0].y, v[1].x, v[1].y, v[2].x, v[2].y, v[3].x, v[3].y};
        const float right[8] = {v[0].z, v[0].w, v[1].z, v[1].w, v[2].z, v[2].w, v[3].z, v[3].w};
        const float2 result = make_float2(window_result<POOL_FIRST>(left, b, m, slope),
                                          window_result<POOL_FIRST>(right, b, m, slope));
        *reinterpret_cast<float2*>(out + plane * (2LL * pairs_per_plane) + 2LL * pair) = result;
    }
}

// Any P: one thread per pooled output, scalar loads.
template <bool POOL_FIRST>
__global__ void __launch_bounds__(kThreads)
pool_any_kernel(const float* __restrict__ y, const float* __restrict__ bias, const float* __restrict__ multiplier,
                float* __restrict__ out, int channels, int64_t planes, int depth, int height, int width, int pool,
                float slope) {
    const int pw_count = width / pool, ph_count = height / pool, pd_count = depth / pool;
    const int per_plane = pd_count * ph_count * pw_count;
    const int index = blockIdx.x * kThreads + threadIdx.x;
    if (index >= per_plane) return;
    const int pw = index % pw_count, ph = (index / pw_count) % ph_count, pd = index / (pw_count * ph_count);
    for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const int c = static_cast<int>(plane % channels);
        const float b = __ldg(bias + c), m = __ldg(multiplier + c);
        const float* window = y + plane * depth * height * width +
                              (static_cast<int64_t>(pd) * pool * height + ph * pool) * width + pw * pool;
        float result;
        if (POOL_FIRST && slope >= 0.f) {
            // v2: one pool (max where f is non-decreasing, min where non-increasing), one f.
            const bool take_max = m >= 0.f;
            float q = take_max ? -INFINITY : INFINITY;
            for (int t = 0; t < pool; ++t)
                for (int r = 0; r < pool; ++r)
                    for (int s = 0; s < pool; ++s) {
                        const float v = __ldg(window + (static_cast<int64_t>(t) * height + r) * width + s);
                        q = take_max ? nan_max(q, v) : nan_min(q, v);
                    }
            result = tail_map(q, b, m, slope);
        } else {
            // v1 (and v2 with a negative slope): f on every element, then the max.
            result = -INFINITY;
            for (int t = 0; t < pool; ++t)
                for (int r = 0; r < pool; ++r)
                    for (int s = 0; s < pool; ++s) {
                        const float v = __ldg(window + (static_cast<int64_t>(t) * height + r) * width + s);
                        result = nan_max(result, tail_map(v, b, m, slope));
                    }
        }
        out[plane * per_plane + index] = result;
    }
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

torch::Tensor fused_tail(const torch::Tensor& y, const torch::Tensor& bias, const torch::Tensor& multiplier,
                         double slope, int64_t pool, bool pool_first, const torch::Tensor& out) {
    TORCH_CHECK(y.is_cuda(), "fused_tail: y (the conv output) must be a CUDA tensor, got one on ",
                y.device().str());
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "fused_tail: y must be float32, got ",
                c10::toString(y.scalar_type()));
    TORCH_CHECK(y.dim() == 5, "fused_tail: y must be 5-D (N, C, D, H, W), got shape ", str_of(y.sizes()));
    TORCH_CHECK(y.is_contiguous(), "fused_tail: y must be contiguous (NCDHW)");
    const int64_t N = y.size(0), C = y.size(1), D = y.size(2), H = y.size(3), W = y.size(4);
    TORCH_CHECK(C >= 1, "fused_tail: y has no channels");
    TORCH_CHECK(pool >= 1 && pool <= kMaxPool, "fused_tail: pool must be in [1, ", std::to_string(kMaxPool),
                "], got ", std::to_string(pool));
    TORCH_CHECK(pool <= D && pool <= H && pool <= W, "fused_tail: pool (", std::to_string(pool),
                ") is larger than the conv output ", str_of(y.sizes()));
    TORCH_CHECK(D * H * W < (1LL << 31), "fused_tail: volumes larger than 2^31 elements are not supported");
    check_per_channel(bias, "bias", y, C);
    check_per_channel(multiplier, "multiplier", y, C);
    TORCH_CHECK(out.device() == y.device(), "fused_tail: out must be on ", y.device().str(), ", got ",
                out.device().str());
    TORCH_CHECK(out.scalar_type() == torch::kFloat32, "fused_tail: out must be float32, got ",
                c10::toString(out.scalar_type()));
    TORCH_CHECK(out.is_contiguous(), "fused_tail: out must be contiguous");
    TORCH_CHECK(out.dim() == 5 && out.size(0) == N && out.size(1) == C && out.size(2) == D / pool &&
                    out.size(3) == H / pool && out.size(4) == W / pool,
                "fused_tail: out must have shape (N, C, D / pool, H / pool, W / pool) for y ", str_of(y.sizes()),
                " and pool ", std::to_string(pool), ", got ", str_of(out.sizes()));
    const int64_t total = out.numel();
    if (total == 0) return out;

    const c10::cuda::CUDAGuard device_guard(y.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t per_plane = total / (N * C);
    TORCH_CHECK(per_plane < (1LL << 31), "fused_tail: more than 2^31 pooled outputs per plane: ",
                std::to_string(per_plane));
    const int64_t planes = N * C;
    const unsigned grid_y = static_cast<unsigned>(std::min<int64_t>(planes, 65535));
    const bool vec = pool == 2 && W % 4 == 0 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(out.data_ptr()) % 8 == 0;
    if (vec) {
        const dim3 grid(static_cast<unsigned>((per_plane / 2 + kThreads - 1) / kThreads), grid_y);
        const auto kernel = pool_first ? pool2_vec_kernel<true> : pool2_vec_kernel<false>;
        kernel<<<grid, kThreads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
                                             multiplier.data_ptr<float>(), out.data_ptr<float>(),
                                             static_cast<int>(C), planes, static_cast<int>(D), static_cast<int>(H),
                                             static_cast<int>(W), static_cast<float>(slope));
    } else {
        const dim3 grid(static_cast<unsigned>((per_plane + kThreads - 1) / kThreads), grid_y);
        const auto kernel = pool_first ? pool_any_kernel<true> : pool_any_kernel<false>;
        kernel<<<grid, kThreads, 0, stream>>>(y.data_ptr<float>(), bias.data_ptr<float>(),
                                             multiplier.data_ptr<float>(), out.data_ptr<float>(),
                                             static_cast<int>(C), planes, static_cast<int>(D), static_cast<int>(H),
                                             static_cast<int>(W), static_cast<int>(pool), static_cast<float>(slope));
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

}  // namespace model_c

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-74 v1/v2: fused leaky -> *m -> leaky -> MaxPool3d after the transposed conv";
    m.def("fused_tail", &model_c::fused_tail,
          "out = maxpool3d(leaky(m * leaky(y + bias))); pool_first selects v2 (sign-selected pool)",
          py::arg("y"), py::arg("bias"), py::arg("multiplier"), py::arg("slope"), py::arg("pool"),
          py::arg("pool_first"), py::arg("out"));
}

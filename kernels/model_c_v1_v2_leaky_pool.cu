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
//   N >= 0 (N = 0 returns at once), C >= 1, 1 <= P <= min(D, H, W), P <= 8, any slope.
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

// ---------------------------------------------------------------------------------------------
// The kernel: one thread per pooled output, outputs in NCDHW order (coalesced along W)
// ---------------------------------------------------------------------------------------------
template <bool POOL_FIRST>
__global__ void __launch_bounds__(kThreads)
leaky_mul_leaky_pool_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                            const float* __restrict__ multiplier, float* __restrict__ out, int channels,
                            int depth, int height, int width, int pool, float slope, int64_t total) {
    const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (index >= total) return;
    const int pw_count = width / pool, ph_count = height / pool, pd_count = depth / pool;
    const int pw = static_cast<int>(index % pw_count);
    const int ph = static_cast<int>((index / pw_count) % ph_count);
    const int pd = static_cast<int>((index / (static_cast<int64_t>(pw_count) * ph_count)) % pd_count);
    const int64_t plane = index / (static_cast<int64_t>(pw_count) * ph_count * pd_count);  // n * C + c
    const int c = static_cast<int>(plane % channels);
    const float b = __ldg(bias + c), m = __ldg(multiplier + c);

    const float* window = y + plane * depth * height * width +
                          (static_cast<int64_t>(pd) * pool * height + static_cast<int64_t>(ph) * pool) * width +
                          static_cast<int64_t>(pw) * pool;
    float result;
    if (POOL_FIRST && slope >= 0.f) {
        // v2: one pool (max where f is non-decreasing, min where non-increasing), one f.
        const bool take_max = m >= 0.f;
        float q = take_max ? -INFINITY : INFINITY;
        for (int r = 0; r < pool; ++r)
            for (int s = 0; s < pool; ++s)
                for (int t = 0; t < pool; ++t) {
                    const float v = __ldg(window + (static_cast<int64_t>(r) * height + s) * width + t);
                    q = take_max ? nan_max(q, v) : nan_min(q, v);
                }
        result = tail_map(q, b, m, slope);
    } else {
        // v1 (and v2 with a negative slope): f on every element, then the max.
        result = -INFINITY;
        for (int r = 0; r < pool; ++r)
            for (int s = 0; s < pool; ++s)
                for (int t = 0; t < pool; ++t) {
                    const float v = __ldg(window + (static_cast<int64_t>(r) * height + s) * width + t);
                    result = nan_max(result, tail_map(v, b, m, slope));
                }
    }
    out[index] = result;
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
    const int64_t blocks = (total + kThreads - 1) / kThreads;
    TORCH_CHECK(blocks < (1LL << 31), "fused_tail: output too large: ", std::to_string(total), " elements");
    const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            y.data_ptr<float>(), bias.data_ptr<float>(), multiplier.data_ptr<float>(), out.data_ptr<float>(),
            static_cast<int>(C), static_cast<int>(D), static_cast<int>(H), static_cast<int>(W),
            static_cast<int>(pool), static_cast<float>(slope), total);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (pool_first) launch(leaky_mul_leaky_pool_kernel<true>);
    else launch(leaky_mul_leaky_pool_kernel<false>);
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

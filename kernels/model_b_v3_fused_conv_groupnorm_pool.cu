// model_b_v3_fused_conv_groupnorm_pool.cu -- KernelBench L2-85, version 3: the conv inside the kernel.
//
// What it computes
//   The reference model (kernels/model_b_conv2d_groupnorm_pool.py) is
//       y = conv2d(x, weight) + bias;  z = group_norm(y; G groups, gamma, beta, eps);  z = z * scale;
//       z = max_pool2d(z, P) (stride P, floor mode);  out = clamp(z, lo, hi)
//   Two launches. The first computes the conv on tensor cores tile by tile, reduces each tile to
//   per-channel statistics and to its P x P max- or min-pooled values, and writes only those: the conv
//   output (64 x 126 x 126 floats, 4 MB per sample at the KernelBench size) never reaches device
//   memory. The second (small) pass merges the statistics per (sample, group) and applies the affine
//   map and the clamp to the pooled values, in place in `out`.
//
// The math
//   Per (n, c), GroupNorm then x scale is an affine map of y:  v = a_c * (y - mu) + beta_c * scale_c,
//   a_c = gamma_c * scale_c * rstd(n, g), rstd = 1 / sqrt(var + eps) > 0, mu and var over the C/G planes
//   of the group and all Ho x Wo positions (also the rows and columns that fall in no pooling window).
//   The sign of a_c is the sign of gamma_c * scale_c, known before any statistic. Max-pooling commutes
//   with a non-decreasing map and turns into min-pooling under a non-increasing one, and clamp is
//   non-decreasing, so  out = clamp(a_c * (Q - mu) + beta_c * scale_c, lo, hi)  with Q the max-pool of
//   y where gamma_c * scale_c >= 0 and its min-pool where it is negative (a_c = 0: either gives the
//   same). Kernel 1 only max-pools: it negates the weights of the channels where gamma_c * scale_c < 0,
//   so it pools and takes the statistics of sign_c * y (min-pool = -max-pool of -y), and kernel 2 undoes
//   the sign exactly. The conv bias is a per-channel constant: it is added to the statistics and to Q in
//   pass 2.
//   Flat implicit GEMM: with stride 1 and no padding, conv output (oy, ox) of a tile whose input box
//   starts at (y0, x0) reads box element m + off(ci, ky, kx), m = (oy - y0) * BS + (ox - x0), off =
//   ci * pitch + ky * BS + kx, BS the box's row stride. So a tile's GEMM rows are the flat box positions
//   m (those whose column is past the tile's last output column are computed and dropped: (kw - 1) of
//   every BS at the KernelBench size, 1.6 %), K = C_in * kh * kw taps (padded to a multiple of 8 with
//   zero weights), N = output channels. A row's input address is its index plus a per-tap constant.
//   Tensor cores: TF32 products, fp32 accumulation, on Hopper's warpgroup instruction wgmma (m64n32k8) when
//   built for sm_90a and the plan allows it (32-channel chunks, BS % 4 == 0, at most 128 k-steps with C_in
//   padded to 8: the KernelBench size), else on mma.sync m16n8k8. For wgmma each tile's box is relaid once
//   into channel quads split by phase, which is wgmma's A operand as it stands (relay_box); at C_in <= 4, where a
//   k8 slice's second quad would be zeros, a slice takes two taps' first quads instead (Params::paired_taps, and
//   the TF32 by-phase kernel's Params::phase_b). The fp32-accurate
//   default splits each operand v = hi + lo into two TF32 numbers and adds lo*hi + hi*lo, then hi*hi, into a
//   partial sum started from zero (per k-step on mma.sync, per three k-steps on wgmma), then adds that to the
//   accumulator in fp32 ("3xTF32"; the dropped lo*lo is below fp32's rounding); the TF32 mode (allow_tf32)
//   does hi*hi only, like cuDNN with allow_tf32.
//   Statistics: each warp sums (y - c) and (y - c)^2 of a channel's valid values from registers, without
//   a barrier, in one pass shifted by c = the CTA's previous tile mean of that channel; where c is more
//   than a standard deviation from these values (or the sums are not finite), a second pass centres on
//   the values' own mean. After the tile's one barrier, warp 0 merges the 8 warps relative to warp 0's
//   centre (float, no division but one) and stores (mean, M2) in float64 per (sample, tile, channel).
//   Pass 2 of the model merges the tiles per group in float64 (Chan et al.'s merge as two warp sums)
//   and evaluates Q - mu as (Q - s_hi) - s_lo with s = mu - bias = s_hi + s_lo two floats: inputs
//   shifted by +100 cost no accuracy.
//   The fp32 mode convolves x - r(n, ci) instead of x, r a value of the plane itself where the plane sits at an
//   offset (input_shift: the median of three central samples of a 4 x 4 interior grid where at least 12 of the 16
//   samples agree with it to half its magnitude, else 0): the relay (wgmma) or shift_box (mma.sync) subtracts it
//   before the split. The conv is linear and valid (every output reads every tap), so kernel 1's values then lack
//   the per-channel constant d_c = sum_ci r(n, ci) sum_taps w(c, ci, taps); pass 2 computes d_c in float64 and adds
//   it with the bias (bias + d in place of the bias above), and kernel 1 moves its statistics' shift by the change
//   of d from one unit to the next. What it buys is accuracy under a common offset: the split represents each
//   operand to about 2^-22 of itself, and with inputs at +100 that is 2^-22 of 100 per element for x, but of about 1
//   for x - r. Without it the fuzz found the fp32 mode over its bar (4x the float32 yardstick's error) at +100 on
//   about 1 in 2 500 configurations with few taps (results/model_b/NOTES.md).
//   The TF32 mode does not shift (like cuDNN's TF32, it is not promised at +100).
//   The by-phase kernel's fp32 mode (below) splits into FP16 hi + lo instead of TF32: the same 11-bit significand,
//   so the same accuracy, but a k16 FP16 product takes the tensor cores the time of a k8 TF32 one. Each operand
//   group is scaled by a power of two (exact) that brings its largest finite magnitude into [2^14, 2^15), so that
//   FP16's 5-bit exponent neither overflows nor underflows: the input box per tile (after the shift r), the weights
//   per output channel; the products are scaled back before the statistics and the pooling. The small products of
//   all k-steps are added first and hi*hi last, so that only 5 products add to the running sum at its full
//   magnitude (accumulating all three in the tensor cores at once would lose accuracy, results/model_b/NOTES.md).
//
// Tiling
//   A unit of work is one tile of one sample for 8 * NT output channels (NT = 1, 2, 4: C_out <= 8, 16, or
//   more in chunks of 32): 8 warps, each 4 m16 tiles x NT n8 tiles, 512 GEMM rows. A tile is R = P * PR
//   conv rows by TX conv columns. When P * W <= 512 a tile spans whole input rows (BS = W, TX = Wo; at the
//   KernelBench size R = 4, 512 rows exactly, 32 tiles per sample); otherwise TX = P * PX columns with
//   BS = TX + kw - 1. Tiles start at multiples of P, so every pooling window lies in one tile.
//   Where P is 2, 4, 8 or 16 the stride BS is a multiple of P (rounded up when tiles do not span whole
//   rows). The grid is persistent (as many CTAs as fit at once): each CTA serves one channel chunk, sets
//   up its weight fragments once and walks its units, copying the next unit's input box while it computes.
//   GEMM rows are assigned so that a lane holds 4 consecutive positions twice (m = 64 warp + 32 h + 4 g +
//   i): windows pool along x in registers when P in {2, 4, 8, 16} divides BS (plus one or two shuffles
//   for P = 8, 16), then along y through shared memory, all channels behind one barrier per tile; other
//   P pool through shared memory 8 channels at a time.
//   Shared memory per CTA: the weight fragments, pre-split into TF32 hi (and lo); the fp32 mode's r(n, ci) of
//   two units and its weight sums per (channel, input channel) (input_shift); the per-k-step tap
//   offsets (for wgmma, they are kernel parameters instead: Params::wgmma_taps); two input boxes (C_in x
//   (R + kh - 1) x BS floats; A fragments are split into TF32 hi and lo in registers), or, for wgmma, one
//   input box and its relaid copy (C_in padded to 8); the boxes are copied by TMA bulk copies (one per
//   channel, sm_90, whole input rows, W % 4 = 0, x 16-byte aligned) or else by cp.async with zeros outside
//   the input; the stage (x-pooled values of all channels, or 8 raw channels).
//   The KernelBench size takes 83 KB (fp32 mode); two CTAs share an SM.
//   The by-phase plan (both modes, the KernelBench shape family: sm_90a, P = 4, W = 128, 3 x 3 taps over
//   C_in <= 8, 33 <= C_out <= 64; conv_stats_pool_by_phase_kernel) transposes the GEMM: M = the 64 output
//   channels (the weights), N = the 128 positions of one phase (column mod 4) of a 4-row tile, one warpgroup per
//   phase, a CTA of 4 warpgroups per tile and SM. One copy and relay of each box feeds all channels; a window's 4
//   rows are in a lane's registers and its 4 columns are the 4 phases, which meet in shared memory.
//
// Shapes and layouts
//   x       : (N, C_in, H, W) float32, contiguous (NCHW), CUDA
//   weight  : (C_out, C_in, kh, kw) float32, contiguous (nn.Conv2d's layout)
//   bias, gamma, beta, scale : C_out float32 values each, contiguous (scale's (C_out, 1, 1) as is)
//   out     : (N, C_out, Ho / P, Wo / P) float32, contiguous, Ho = H - kh + 1; every element written
//   The statistics workspace, (N, tiles, C_out) x (mean, M2) float64 (4.2 MB at the KernelBench size),
//   is the only allocation.
//
// Envelope (checked; `unsupported_reason` says why a configuration is outside it, and the Python
//   wrapper then runs v2 -- cuDNN's conv + the two-pass tail -- instead)
//   Compute capability 8.0 or newer (mma.sync TF32); kernel 1..7 each side, stride 1, no padding,
//   dilation 1, groups 1 (the Python wrapper checks those); pool 1..16 and no larger than the conv
//   output; any N >= 0, C_in >= 1, C_out >= 1 divisible by G, H, W; C_in * H * W < 2^31; the input
//   boxes, weight fragments and stage within the GPU's shared memory (227 KB on an H100): at W = 128,
//   C_in <= 24 with k = 3 and C_in <= 14 with k = 5 (C_in 32 with k = 3 is outside and runs v2).
//   Not in `unsupported_reason` (which does not see the group count) and so raised by forward instead: a
//   (sample, group) piece of the finishing launch within 48 KB of shared memory, 24 bytes per channel of the group
//   and in the fp32 mode 68 more per input channel (about 2 000 channels per group).
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_b_v3", cpp_sources="",
//       cuda_sources=open("model_b_v3_fused_conv_groupnorm_pool.cu").read(),
//       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"])
//   (sm_90a: the wgmma code, runs on an H100 only; for other GPUs of compute capability 8.0 or newer build
//   for their own arch, e.g. compute_80/sm_80, which uses mma.sync)
//   ext.unsupported_reason(h, w, batch, c_in, c_out, kh, kw, pool, device) -> "" when v3 applies
//   ext.forward(x, weight, bias, gamma, beta, scale, groups, pool, clamp_min, clamp_max, eps,
//               allow_tf32, out, wgmma=True, by_phase=True) -> out   (wgmma=False keeps mma.sync, by_phase=False
//               the 32-channel chunks, for comparison)
//   ext.plan_info(h, w, batch, c_in, c_out, kh, kw, pool, allow_tf32, device, wgmma=True, by_phase=True) -> the
//       tiling forward uses, whether its GEMM runs on wgmma, and whether it is the by-phase plan
//   ext.shift_samples(rows, cols) -> the flat offsets of input_shift's 16 samples in a plane; and
//   ext.input_shift_rule(samples) -> the r those samples give (the fp32 mode's rule, run on the host)

#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace model_b_v3 {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = 4;                            // m16 tiles per warp
constexpr int kRows = kWarps * kMTiles * 16;          // GEMM rows per CTA: 512
constexpr int kStageStride = kRows + 4;               // floats per staged channel, general pooling (+4: banks)
constexpr int kMaxKernel = 7;
constexpr int kMaxPool = 16;
constexpr int kStaticSmemReserve = 5120;              // static shared memory (< 4.5 KB) comes off the opt-in limit
constexpr int kFinalThreads = 256;
constexpr int kMaxWgmmaSteps = 128;                   // k-steps of a wgmma plan (their tap offsets are parameters)
constexpr int kPhaseMaxSteps = 9;                    // by-phase plan: k-steps at most (3 x 3 taps x one k8 slice)
constexpr int kPhaseMaxBlocks = 10;                  // by-phase plan: 2 KB weight blocks at most (see Params::phase_a)
constexpr int kShiftSamples = 16;                     // fp32 mode: input_shift's samples per plane, and
constexpr int kShiftMajority = 12;                    // how many must agree with its candidate

struct Params {
    const float* x;
    const float* weight;
    const float* gamma;
    const float* scale;
    float* out;               // receives sign * the sign-selected pooled conv values (pass 2 finishes them in place)
    double2* stats;           // [N][tiles][C_out]: (mean, M2) of the conv (no bias) over a tile's positions
    int c_in, c_out, kh, kw;
    int h, w, ho, wo, hp, wp, pool;
    int tile_rows;            // R: conv rows per tile (a multiple of P)
    int tile_cols;            // TX: conv columns per tile (a multiple of P unless one tile spans Wo)
    int box_stride;           // BS: floats between two rows of the box (= GEMM rows per conv row)
    int box_pitch;            // floats between two channels of the box
    int tiles_y, tiles_x;     // tiles per sample: tiles_y * tiles_x
    int pooled_tile_rows;     // R / P: pooled rows per tile
    int pooled_tile_cols;     // TX / P (TX a multiple of P wherever tiles_x > 1): pooled columns per tile
    int step_n, step_ty, step_tx;  // the stride between a CTA's units (grid.x / chunks) as (samples, tile rows,
                                   // tile columns), set by forward with the grid
    int chunks;               // channel chunks of 8 * NT
    int ksteps;               // ceil(C_in * kh * kw / 8)
    int batch;                // N
    int whole_rows;           // 1: a box row is a whole input row (BS = W, one tile across)
    int pool_in_registers;    // 1: windows pooled along x in registers (P in {2, 4, 8, 16} dividing BS)
    int bulk_copy;            // 1: boxes copied by TMA bulk copies (sm_90, whole rows, W % 4 = 0, x 16-byte aligned)
    int stage_stride;         // floats per channel in the stage: kRows / P + 4 (x-pooled) or kStageStride
    // The GEMM on wgmma (wgmma plans; see relay_box): the box relaid as channel quads,
    // [quad][phase 0..3][quad_plane_units 16-byte words], quad_groups quads (C_in padded to 8).
    int quad_groups;
    int quad_plane_units;
    // Per k-step s = (tap (ky, kx), channels 8 q .. 8 q + 7), q fastest, and phase v: the offset of A's first word
    // in the relaid box (16-byte units): channel quad 2 q, phase (v + kx) % 4, word ky BS / 4 + (v + kx) / 4. In the
    // (grid-constant) parameters, the warps load them as uniform values: from shared memory they cost a shuffle each
    // to reach the uniform registers that wgmma's descriptors come from. Each entry also holds, << 16, the offset from
    // the k8 slice's first channel quad to its second (4 phase planes, the next quad): the TF32 mode's LBO, and with
    // paired_taps the fp32 mode's second A loads (unpaired, they add the 4 planes themselves: 0 there).
    // paired_taps (C_in <= 4, where quad 1 is all zeros): k-step s instead pairs the quad 0 of taps
    // (2 j, kx) and (2 j + 1, kx), kx = s / ceil(kh / 2), j = s % ceil(kh / 2) (LBO one box row; where 2 j + 1 = kh,
    // the first tap's zero quad 1): kw ceil(kh / 2) k-steps instead of kh kw.
    int4 wgmma_taps[kMaxWgmmaSteps];
    int paired_taps;
    // The by-phase plan's k-steps (conv_stats_pool_by_phase_kernel). A k8 slice is two channel quads (k halves) of
    // the relaid box, each a (tap, quad): at C_in <= 4 two taps' quad 0 (5 k-steps for 3 x 3 taps, where the
    // chunks' layout takes 9 with quad 1 all zeros), else one tap's two quads. Per k-step s and phase v:
    // phase_b = the first half's word in the relaid box (16-byte units) | the LBO to the second half << 16 (the
    // lower address first); phase_a = the offset of its weight block (16-byte units, 128 per 2 KB block). Per
    // weight block, phase_halves = the (tap * 2 + quad) of its two k halves in order, -1 for zeros.
    int4 phase_b[kPhaseMaxSteps];
    int4 phase_a[kPhaseMaxSteps];
    int2 phase_halves[kPhaseMaxBlocks];
    int phase_blocks;
};

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

// max / min that propagate NaN, as max_pool2d and torch.clamp do (fmaxf / fminf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float nan_min(float a, float b) {
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// The pooling fold: max, propagating NaN. Channels that pool by min (gamma * scale < 0) have their
// weights negated in kernel 1, so their min-pool is the max-pool of the negated conv (see The math).
__device__ __forceinline__ float pool_fold(float a, float b) { return nan_max(a, b); }

// Asynchronous global -> shared copies. `bytes` < the copy size zero-fills the rest (0: src not read).
__device__ __forceinline__ void cp_async_16(float* dst, const float* src, int bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, int bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

// Bulk copies (TMA, sm_90) and the mbarriers they complete on. `bytes` is a multiple of 16 and both
// addresses are 16-byte aligned. Compiled to nothing below sm_90, where the kernel never takes that path.
__device__ __forceinline__ uint32_t smem_address(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar) {  // one arrival per phase
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_address(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {  // until that phase completes
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_address(bar)), "r"(parity) : "memory");
#endif
}
// The input is read once (and its overlap rows soon after): its lines are marked evict-first in L2, so that the
// pooled values kernel 1 writes tend to stay there for kernel 2.
__device__ __forceinline__ void bulk_copy(float* dst, const float* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n"
        ::"r"(smem_address(dst)), "l"(src), "r"(bytes), "r"(smem_address(bar)), "l"(policy) : "memory");
#endif
}
// The pooled values kernel 1 writes are read again by kernel 2: their lines are marked evict-last in L2;
// kernel 2's final stores mark theirs evict-first.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void store_with_policy(float* dst, float v, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(dst), "f"(v), "l"(policy) : "memory");
}
__device__ __forceinline__ void store_with_policy(float4* dst, float4 v, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(dst), "f"(v.x), "f"(v.y),
                 "f"(v.z), "f"(v.w), "l"(policy) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {  // generic-proxy writes before async-proxy ones
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// TF32 operands. The tensor cores read the top 19 bits of a .tf32 operand (sign, exponent, 10 mantissa
// bits) and ignore the low 13, so v plus half a TF32 ulp is v rounded to nearest (ties away) for them.
// tf32_round adds it in float, v + 2^(e - 11) with 2^e the binade of v: NaN stays NaN and infinities stay
// infinite. An integer add of 2^12 would carry a NaN whose payload fills the top mantissa bits (0x7fffffff,
// the NaN CUDA's arithmetic produces) into the sign bit and hand the tensor cores -0: a finite output where
// PyTorch's is NaN. Two instructions (cvt.rna.tf32.f32 compiles to three on sm_90).
__device__ __forceinline__ float tf32_round(float v) {  // low 13 bits left as they fall: for mma operands
    const float binade = __uint_as_float(__float_as_uint(v) & 0xff800000u);  // +-2^e; +-inf for NaN and inf
    return fmaf(binade, 0x1p-11f, v);
}
// v rounded to TF32 with the low 13 bits cleared: a TF32 value, for the TF32 mode's weight fragments.
__device__ __forceinline__ float tf32_value(float v) {
    return __uint_as_float(__float_as_uint(tf32_round(v)) & 0xffffe000u);
}
// The hi part of the 3xTF32 split v = hi + lo: an integer add and mask (two instructions). A NaN v may
// come out as -0 here, as above, but lo = v - hi is then NaN and carries it into the products.
__device__ __forceinline__ float tf32_hi(float v) {
    return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

// The by-phase kernel's fp32 mode splits its operands into FP16 hi + lo instead (FP16 has TF32's 11-bit significand,
// and a k16 FP16 product takes the tensor cores the time of a k8 TF32 one). FP16's 5-bit exponent needs a scale:
// each operand group is multiplied by a power of two (exact) that brings its largest finite |v| into
// [2^14, 2^15), so that hi never overflows and lo (about 2^-11 hi) stays normal down to 2^-17 of that largest value.
// Two floats as FP16, rounded to nearest, in one word: `first` in the low half (the lower address).
__device__ __forceinline__ uint32_t pack_half2(float first, float second) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));  // the first operand goes high
    return r;
}
__device__ __forceinline__ float2 unpack_half2(uint32_t h) {
    float2 f;
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}" : "=f"(f.x), "=f"(f.y)
        : "r"(h));
    return f;
}
// (a, b) = hi + lo, each pair packed as pack_half2 packs it; exact to about 2^-22 of each value, as 3xTF32's split.
__device__ __forceinline__ uint2 split_half2(float a, float b) {
    const uint32_t hi = pack_half2(a, b);
    const float2 back = unpack_half2(hi);
    return make_uint2(hi, pack_half2(a - back.x, b - back.y));
}
// |v|'s bits where v is finite, else 0: as unsigned integers these order as the magnitudes do.
__device__ __forceinline__ uint32_t finite_abs_bits(float v) {
    const uint32_t a = __float_as_uint(v) & 0x7fffffffu;
    return a < 0x7f800000u ? a : 0u;
}
// e such that 2^e times the largest finite magnitude (its bits: finite_abs_bits) lies in [2^14, 2^15); 0 for 0.
// Clamped to [-126, 126], so that 2^e and 2^-e are normal floats (only a largest magnitude below 2^-112, or
// none, meets the clamp: those values stay below 2^14 after scaling).
__device__ __forceinline__ int fp16_scale_exponent(uint32_t max_bits) {
    if (max_bits == 0u) return 0;
    const int binade = static_cast<int>(max_bits >> 23) - 127;  // subnormals: -127
    const int e = 14 - binade;
    return e < -126 ? -126 : (e > 126 ? 126 : e);
}
// 2^e as a float, for -126 <= e <= 127.
__device__ __forceinline__ float exp2_int(int e) { return __uint_as_float(static_cast<uint32_t>(127 + e) << 23); }
// A barrier among the first `threads` threads of the block (a multiple of 32) only: barrier 1 (0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int threads) {
    asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}

// d += a * b for one 16x8x8 tile. Fragments (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
//   a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4);   b0 (k=t, n=g)  b1 (k=t+4, n=g);
//   d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm(  // not volatile: no side effects, so the compiler may interleave independent chains
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Hopper's warpgroup MMA (sm_90a), for the wgmma plans: the four warps of a warpgroup (128 threads,
// warpgroup-aligned) issue one m64 x n32 x k8 product together, B (and, in the TF32 mode, A) from shared
// memory through descriptors, D (fp32) in registers: per warp, mma.m16n8k8's D fragments of its 16 rows for the 4
// n8 tiles in order (acc[i] of the mma.sync path). Asynchronous: wgmma_fence() orders register writes before
// the products, wgmma_commit() closes a group, wgmma_wait<0>() waits for all groups. A descriptor (64 bits,
// no swizzle, K-major) packs the start address, the leading byte offset (LBO: the step between the two
// k halves of a k8 slice) and the stride byte offset (SBO: the step between 8-row groups), all >> 4; only
// the low word (address, LBO) varies here, and adding to it never carries into LBO (shared memory ends
// below 2^18 bytes). The same recipe is checked against a matmul in scripts/probes/wgmma_tf32.cu.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MODEL_B_WGMMA 1
constexpr uint32_t kQuadDescHigh = 128 >> 4;    // A: SBO = 8 rows x 16 bytes (a core matrix)
constexpr uint32_t kWeightDescHigh = 256 >> 4;  // B: SBO = 8 channels x both k halves
// Low word of the weights' descriptor at `smem`: LBO = 128 bytes (the k halves are adjacent core matrices).
__device__ __forceinline__ uint32_t weight_descriptor_low(const float* smem) {
    return ((smem_address(smem) & 0x3ffff) >> 4) | ((128 >> 4) << 16);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// d = a * b (ACCUMULATE false: scale-d = 0, d is only written) or d += a * b for the warpgroup's m64 x n32 x k8
// tile.
template <bool ACCUMULATE>
__device__ __forceinline__ void wgmma_tf32_ss(float (&d)[4][4], uint32_t a_desc_low, uint32_t b_desc_low) {
    if constexpr (ACCUMULATE) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, 1, 0;\n"
            "mov.b64 ad, {%16, %18};\nmov.b64 bd, {%17, %19};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, ad, bd, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
              "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
              "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
              "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
            : "r"(a_desc_low), "r"(b_desc_low), "n"(kQuadDescHigh), "n"(kWeightDescHigh));
    } else {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, 0, 0;\n"
            "mov.b64 ad, {%16, %18};\nmov.b64 bd, {%17, %19};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, ad, bd, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]),
              "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]),
              "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]),
              "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3])
            : "r"(a_desc_low), "r"(b_desc_low), "n"(kQuadDescHigh), "n"(kWeightDescHigh));
    }
}

// The same product with A from registers (per warp, mma.m16n8k8's A fragment of its 16 rows), for the
// fp32-accurate mode, whose A is split into TF32 hi and lo in registers. d is read and written even with
// ACCUMULATE false (scale-d = 0 ignores what it reads): the product lands in d's own registers, which keeps
// ptxas from giving every partial sum registers of its own (model C's kernels spilled that way).
template <bool ACCUMULATE>
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[4][4], const uint32_t (&a)[4], uint32_t b_desc_low) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 bd;\nsetp.ne.b32 p, %22, 0;\nmov.b64 bd, {%20, %21};\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, bd, p, 1, 1;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
          "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
          "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kWeightDescHigh),
          "n"(ACCUMULATE ? 1 : 0));
}

// The by-phase kernel's product: D[64 channels][128 positions] (+)= A[64][K] * B[K][128], A the weights (descriptor
// as the chunked kernel's B: LBO 128 bytes, SBO 256), B the relaid box (as its A: SBO 128 bytes). Per warp, d[j][0..3]
// are rows (16 warp + g, 16 warp + g + 8) x columns (8 j + 2 t, 8 j + 2 t + 1), as mma.m16n8k8's D. F16 = false: K = 8
// TF32 values (two core matrices of 4); F16 = true: K = 16 FP16 values (two core matrices of 8, both K-major), in the
// same time on the tensor cores and with the same descriptors (a core matrix is 8 rows x 16 bytes either way).
#define MODEL_B_ACC128(d)                                                                                       \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),     \
    "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),     \
    "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),     \
    "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),     \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),     \
    "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),   \
    "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),              \
    "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),              \
    "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),              \
    "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
#define MODEL_B_ACC128_LIST                                                                                     \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                   \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                          \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                          \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
template <bool ACCUMULATE, bool F16 = false>
__device__ __forceinline__ void wgmma_m64n128_ss(float (&d)[16][4], uint32_t a_desc_low, uint32_t b_desc_low) {
    if constexpr (F16) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %68, 0;\n"
            "mov.b64 ad, {%64, %66};\nmov.b64 bd, {%65, %67};\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " MODEL_B_ACC128_LIST ", ad, bd, p, 1, 1, 0, 0;\n}\n"
            : MODEL_B_ACC128(d)
            : "r"(a_desc_low), "r"(b_desc_low), "n"(kWeightDescHigh), "n"(kQuadDescHigh), "n"(ACCUMULATE ? 1 : 0));
    } else {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %68, 0;\n"
            "mov.b64 ad, {%64, %66};\nmov.b64 bd, {%65, %67};\n"
            "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " MODEL_B_ACC128_LIST ", ad, bd, p, 1, 1;\n}\n"
            : MODEL_B_ACC128(d)
            : "r"(a_desc_low), "r"(b_desc_low), "n"(kWeightDescHigh), "n"(kQuadDescHigh), "n"(ACCUMULATE ? 1 : 0));
    }
}
#undef MODEL_B_ACC128
#undef MODEL_B_ACC128_LIST

// x as a warp-uniform value, so that the descriptors computed from it may live in uniform registers (the
// warp must be converged).
__device__ __forceinline__ uint32_t warp_uniform(uint32_t x) { return __shfl_sync(0xffffffffu, x, 0); }
#endif

// Whether the loaded binary has the wgmma code (sm_90a), for the host to pick the kernel: this kernel, never
// launched, declares a different launch bound in the sm_90a device pass, read with cudaFuncGetAttributes.
#if defined(MODEL_B_WGMMA)
constexpr int kWgmmaProbeThreads = 128;
#else
constexpr int kWgmmaProbeThreads = 64;
#endif
__global__ void __launch_bounds__(kWgmmaProbeThreads) wgmma_build_probe() {}

// Sum over the 8 lanes of a quad column (same t, g = 0..7): the rows of an mma fragment.
__device__ __forceinline__ float sum_over_rows(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

// Shared-memory layout of the main kernel (dynamic part), in this order, each part 16-byte aligned. For the
// GEMM on wgmma (relaid), the weights are the k8 chunks of wgmma's core matrices (the same bytes as the
// mma.sync fragments), there is no tap table (Params::wgmma_taps), and the boxes are one raw box (the copies
// land there) and the relaid box of channel quads the GEMM reads (`quad_floats`).
struct SmemLayout {
    int nt;       // n8 tiles
    bool split3;  // 3xTF32: hi and lo weight fragments
    bool relaid;  // the GEMM on wgmma, from the relaid box
    __host__ __device__ size_t weight_bytes(int ksteps) const {  // per lane per (k-step, n-tile): b0, b1 (hi, lo)
        return static_cast<size_t>(ksteps) * nt * 32 * (split3 ? 4 : 2) * sizeof(float);
    }
    __host__ __device__ size_t tap_bytes(int ksteps) const {
        return relaid ? 0 : static_cast<size_t>(ksteps) * 4 * sizeof(int2);
    }
    // fp32 mode: r(n, ci) of two units (input_shift), the next unit's kShiftSamples elements per input channel,
    // and per channel of the chunk the sums of its weights over the taps of each input channel (to follow the
    // statistics' shift from one unit to the next).
    __host__ __device__ size_t shift_bytes(int c_in) const {
        return split3 ? ((2 + kShiftSamples + 8 * static_cast<size_t>(nt)) * c_in * sizeof(float) + 15) / 16 * 16 : 0;
    }
    // Two input boxes (this unit's and the next), or the raw box and the relaid one.
    __host__ __device__ size_t box_bytes(int c_in, int pitch, int quad_floats) const {
        return (relaid ? static_cast<size_t>(c_in) * pitch + quad_floats : static_cast<size_t>(2) * c_in * pitch) *
               sizeof(float);
    }
    // The stage holds all 8 * NT channels of a tile pooled along x (x-pooled: stride kRows / P + 4), or
    // 8 raw channels at a time (general pooling: stride kStageStride).
    __host__ __device__ size_t stage_bytes(bool x_pooled, int stride) const {
        return static_cast<size_t>(x_pooled ? 8 * nt : 8) * stride * sizeof(float);
    }
    __host__ __device__ size_t total(int ksteps, int c_in, int pitch, int quad_floats, bool x_pooled, int stride) const {
        return weight_bytes(ksteps) + tap_bytes(ksteps) + shift_bytes(c_in) + box_bytes(c_in, pitch, quad_floats) +
               stage_bytes(x_pooled, stride);
    }
};

// +1, or -1 where channel c pools by min (gamma_c * scale_c < 0). Kernel 1 negates that channel's weights
// and so max-pools (and takes the statistics of) -y; kernel 2 undoes the sign. Both evaluate this product.
__device__ __forceinline__ float pooling_sign(const Params& p, int c) {
    return __ldg(p.gamma + c) * __ldg(p.scale + c) < 0.f ? -1.f : 1.f;
}

// fp32 mode: the reference value r(n, ci) subtracted from plane (n, ci) of the input before the split (see "The
// math"). It looks at kShiftSamples = 16 elements of the plane on a 4 x 4 grid, rows and columns (2a + 1) / 8 and
// (2b + 1) / 8 of the way across (a, b = 0..3: interior, so a frame or letterbox is missed; spread in both
// directions, so no row-aligned stride lands them on one edge). The candidate m is the median of three central
// samples, (1, 1), (1, 2) and (2, 1); r = m where all 16 are finite and at least 12 of them lie within |m| / 2 of
// m (the plane sits mostly at an offset large against its spread, e.g. inputs + 100), else 0 (inputs about 0, a
// wide spread, no majority at one offset, a NaN or infinity among the samples, which then propagates as before).
// Why 16 and a majority: r taken from the plane's first, middle and last elements (the rule before) was their
// value wherever those three sat far from the rest, e.g. under a constant frame (the middle element of a 128 x
// 128 plane is on its left edge), and the split's error grows with |x - r|: 2.4x PARITY.md's fp32 bar at three
// elements of 10 over [0, 1) data (results/model_b/NOTES.md). With 12 of 16 spread samples near r, most of the
// plane is within [r/2, 3r/2], where |x - r| <= |x|; the rest can be anywhere, as the samples cannot see it.
// Both kernels compute it from the same samples.
// In two parts: the samples, and r from them (kernel 1 copies the next unit's into shared memory with cp.async
// during this unit's GEMM, so that no warp waits on their loads: request_shift_elements).
__host__ __device__ __forceinline__ int shift_sample_offset(int j, int rows, int cols) {
    const int a = j >> 2, b = j & 3;  // 64-bit products: 7 * cols may pass 2^31 where the plane does not
    return static_cast<int>((2 * a + 1) * int64_t{rows} / 8 * cols + (2 * b + 1) * int64_t{cols} / 8);
}
__device__ __forceinline__ const float* input_plane(const Params& p, int64_t n, int ci) {
    return p.x + (n * p.c_in + ci) * static_cast<int64_t>(p.h) * p.w;  // C_in H W < 2^31
}
// The rule over samples sample(0..15): the candidate from three, then one pass for finiteness and agreement.
// Unrolled, so that from global memory all 16 loads are in flight at once (results/model_b/NOTES.md).
template <class Sample>
__host__ __device__ __forceinline__ float input_shift_from(Sample sample) {
    const float a = sample(5), b = sample(6), c = sample(9);
    const float m = fmaxf(fminf(a, b), fminf(fmaxf(a, b), c));
    const float half = 0.5f * fabsf(m);
    bool finite = true;
    int agree = 0;
#pragma unroll
    for (int j = 0; j < kShiftSamples; ++j) {
        const float v = sample(j);
        finite = finite && isfinite(v);
        agree += fabsf(v - m) <= half ? 1 : 0;  // inf - overflow: disagrees
    }
    return finite && agree >= kShiftMajority ? m : 0.f;
}
__host__ __device__ __forceinline__ float input_shift_of(const float* e) {  // e[kShiftSamples]: shared memory,
    return input_shift_from([e](int j) { return e[j]; });                    // or the host (input_shift_rule)
}
__device__ __forceinline__ float input_shift(const Params& p, int64_t n, int ci) {
    const float* plane = input_plane(p, n, ci);
    const int rows = p.h, cols = p.w;
    return input_shift_from([=](int j) { return __ldg(plane + shift_sample_offset(j, rows, cols)); });
}

// Conv rows / columns of tile (ty, tx) inside the conv output (the last tiles may be partial).
__host__ __device__ __forceinline__ int tile_rows_valid(const Params& p, int ty) {
    return min(p.tile_rows, p.ho - ty * p.tile_rows);
}
__host__ __device__ __forceinline__ int tile_cols_valid(const Params& p, int tx) {
    return min(p.tile_cols, p.wo - tx * p.tile_cols);
}

// ---------------------------------------------------------------------------------------------
// Kernel 1: conv tile on tensor cores -> per-channel tile statistics + sign-selected pooled values
// ---------------------------------------------------------------------------------------------
// Copies the input box of (sample n, tile ty, tx) into `box` with cp.async (not waited on): element
// (ci, r, j) at ci * pitch + r * BS + j is x[n, ci, y0 + r, x0 + j]; zeros outside the input and past the
// box (those only feed dropped rows).
__device__ __forceinline__ void load_box(const Params& p, float* box, int64_t n, int ty, int tx) {
    const int y0 = ty * p.tile_rows, x0 = tx * p.tile_cols;
    const int box_rows = p.tile_rows + p.kh - 1;
    const int box_cols = p.whole_rows ? p.w : p.tile_cols + p.kw - 1;  // input columns a box row holds
    const int64_t hw = static_cast<int64_t>(p.h) * p.w;
    const float* xs = p.x + n * p.c_in * hw;
    if (p.whole_rows && p.w % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0) {
        // The box of a channel is one contiguous span of the input: 16-byte copies, walked as one flat
        // range of (channel, vector) pairs with the channel advanced incrementally (no division per copy).
        const int span = (min(p.h, y0 + box_rows) - y0) * p.w;
        const int vecs = p.box_pitch / 4;  // 16-byte vectors per channel of the box
        int ci = threadIdx.x / vecs, v = threadIdx.x - ci * vecs;
        const float* src = xs + ci * hw + static_cast<int64_t>(y0) * p.w;
        float* dst = box + ci * p.box_pitch;
        while (ci < p.c_in) {
            const int e = 4 * v;
            const int bytes = max(0, min(16, 4 * (span - e)));
            cp_async_16(dst + e, bytes > 0 ? src + e : xs, bytes);
            v += kThreads;
            while (v >= vecs) {
                v -= vecs;
                ++ci;
                src += hw;
                dst += p.box_pitch;
            }
        }
    } else {
        for (int i = threadIdx.x; i < p.c_in * p.box_pitch; i += kThreads) {
            const int ci = i / p.box_pitch, e = i - ci * p.box_pitch;
            const int r = e / p.box_stride, j = e - r * p.box_stride;
            const int yy = y0 + r, xx = x0 + j;
            const bool inside = r < box_rows && j < box_cols && yy < p.h && xx < p.w;
            cp_async_4(box + i, inside ? xs + ci * hw + static_cast<int64_t>(yy) * p.w + xx : xs, inside ? 4 : 0);
        }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// The bulk-copy form of load_box (bulk_copy plans): a channel's box is one contiguous span of input rows,
// copied by one bulk copy that completes on `bar`; warp `issuer` issues them (its lane 0 arrives with the byte
// count). The rest of the box is not written (it feeds only dropped positions; the kernel zeroes both boxes once).
// Issuing takes the warp a while (about 1 600 cycles for 8 copies of 3 KB on an H100, results/model_b/NOTES.md).
__device__ __forceinline__ void load_box_bulk(const Params& p, float* box, uint64_t* bar, int64_t n, int ty,
                                              int issuer = 0) {
    if (static_cast<int>(threadIdx.x >> 5) != issuer) return;
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int y0 = ty * p.tile_rows;
    const uint32_t bytes = static_cast<uint32_t>((min(p.h, y0 + p.tile_rows + p.kh - 1) - y0) * p.w) * sizeof(float);
    const int64_t hw = static_cast<int64_t>(p.h) * p.w;
    const float* src = p.x + n * p.c_in * hw + static_cast<int64_t>(y0) * p.w;
    if (lane == 0) mbarrier_arrive_expect_bytes(bar, bytes * static_cast<uint32_t>(p.c_in));
    __syncwarp();
    for (int ci = lane; ci < p.c_in; ci += 32) bulk_copy(box + ci * p.box_pitch, src + ci * hw, bytes, bar);
}

// A unit of work as (sample, tile row, tile column): unit u is sample u / tiles, tile u % tiles = ty * tiles_x + tx.
struct UnitPos {
    unsigned n;  // <= N + step_n < 2^32 (N < 2^31 and step_n < the grid): no overflow past the last unit
    int ty, tx;
};
__device__ __forceinline__ UnitPos unit_position(const Params& p, int u) {
    const int tiles = p.tiles_y * p.tiles_x;
    const int tile = u % tiles;
    return {static_cast<unsigned>(u / tiles), tile / p.tiles_x, tile % p.tiles_x};
}
// The CTA's unit after u: u + grid.x / chunks, added digit by digit with carries (no division per tile).
__device__ __forceinline__ UnitPos advance(const Params& p, UnitPos u) {
    u.n += static_cast<unsigned>(p.step_n);
    u.ty += p.step_ty;
    u.tx += p.step_tx;
    if (u.tx >= p.tiles_x) {
        u.tx -= p.tiles_x;
        ++u.ty;
    }
    if (u.ty >= p.tiles_y) {
        u.ty -= p.tiles_y;
        ++u.n;
    }
    return u;
}

// Starts copying the box of unit u into box buffer b (0 or 1).
__device__ __forceinline__ void start_box(const Params& p, float* boxes, uint64_t* landed, bool bulk, int b,
                                          const UnitPos& u) {
    float* box = boxes + b * p.c_in * p.box_pitch;
    if (bulk) load_box_bulk(p, box, landed + b, u.n, u.ty);
    else load_box(p, box, u.n, u.ty, u.tx);
}

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Max of a P x P window whose rows are `stride` floats apart, propagating NaN; rows read `vec` (4, 2 or 1)
// floats at a time (the caller checks P and the stride allow it).
__device__ __forceinline__ float pool_window(const float* win, int pool, int stride, int vec) {
    const auto fold = [](float q, float v) { return pool_fold(q, v); };
    float q = -INFINITY;
    for (int dy = 0; dy < pool; ++dy) {
        const float* row = win + dy * stride;
        if (vec == 4) {
            for (int dx = 0; dx < pool; dx += 4) {
                const float4 v = *reinterpret_cast<const float4*>(row + dx);
                q = fold(fold(fold(fold(q, v.x), v.y), v.z), v.w);
            }
        } else if (vec == 2) {
            for (int dx = 0; dx < pool; dx += 2) {
                const float2 v = *reinterpret_cast<const float2*>(row + dx);
                q = fold(fold(q, v.x), v.y);
            }
        } else {
            for (int dx = 0; dx < pool; ++dx) q = fold(q, row[dx]);
        }
    }
    return q;
}

// Which of a lane's 8 positions (bit 2 i + h: position m = 64 warp + 32 h + 4 g + i) lie inside a tile
// whose part of the conv output is rows_valid x cols_valid, with the warp's count of such positions in
// bits 8 and up. Divides by BS: called once per CTA for a full tile, and per tile only for partial ones.
__device__ __forceinline__ uint32_t valid_positions(const Params& p, int rows_valid, int cols_valid, int warp, int g) {
    uint32_t valid = 0;
    int count = 0;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = warp * kMTiles * 16 + 32 * h + 4 * g + i;
            const int r = m / p.box_stride, col = m - r * p.box_stride;
            const bool inside = r < rows_valid && col < cols_valid;
            valid |= static_cast<uint32_t>(inside) << (2 * i + h);
            count += __popc(__ballot_sync(0xffffffffu, inside));
        }
    return valid | static_cast<uint32_t>(count / 4) << 8;  // the 4 lanes of a quad hold the same positions
}

// Sums of (y - c) and (y - c)^2 over the lane's positions in `valid` (bit 2 i + h) of one channel value (j, e).
template <int NT>
__device__ __forceinline__ float2 lane_shifted_sums(const float (&acc)[kMTiles][NT][4], uint32_t valid, int j, int e,
                                                    float c) {
    float d1 = 0.f, d2 = 0.f;
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            if (valid >> (2 * i + h) & 1u) {
                const float d = acc[i][j][2 * h + e] - c;
                d1 += d;
                d2 = fmaf(d, d, d2);
            }
    return make_float2(d1, d2);
}

// The same sums reduced over the warp's 8 rows of lanes (every lane gets the channel's warp sums).
template <int NT>
__device__ __forceinline__ float2 shifted_sums(const float (&acc)[kMTiles][NT][4], uint32_t valid, int j, int e,
                                               float c) {
    const float2 lane = lane_shifted_sums(acc, valid, j, e, c);
    return make_float2(sum_over_rows(lane.x), sum_over_rows(lane.y));
}

// Step 3 of the kernel for one warp: per channel of the lane (8 j + 2 t + e), the sums of (y - c) and
// (y - c)^2 over the positions in `valid` (the warp's count in bits 8 and up), and (c, mean - c, M2,
// count) pushed to `out` by the lanes with g = 0. One pass, shifted by c = shift[channel] (the CTA's
// previous tile mean of the channel). Where that shift is far from these values (the mean more than a
// standard deviation from c: d1^2 > n d2 / 2, more than one bit of M2 = d2 - d1^2 / n would cancel; or
// d2 not finite), the pass is repeated about the values' own mean, from a sum and three shuffles (not
// about c + d1 / n, which rounding ruins when c is huge). Either way a centre near the data keeps
// (y - c)^2 from cancelling (inputs shifted by +100).
template <int NT>
__device__ __forceinline__ void warp_statistics(const float (&acc)[kMTiles][NT][4], uint32_t valid,
                                                const float* shift, float4* out, int g, int t) {
    const int count = static_cast<int>(valid >> 8);
    const float inv_count = count > 0 ? 1.f / static_cast<float>(count) : 0.f;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float c = shift[j * 8 + 2 * t + e];
            float2 sums = shifted_sums(acc, valid, j, e, c);
            const bool far = !(2.f * sums.x * sums.x <= static_cast<float>(count) * sums.y) || !isfinite(sums.y);
            if (__any_sync(0xffffffffu, far)) {  // uniform across the warp: the second pass (rare)
                float sum = 0.f;
#pragma unroll
                for (int i = 0; i < kMTiles; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        if (valid >> (2 * i + h) & 1u) sum += acc[i][j][2 * h + e];
                c = sum_over_rows(sum) * inv_count;
                sums = shifted_sums(acc, valid, j, e, c);
            }
            if (g == 0) {
                const float m1 = sums.x * inv_count;
                out[j * 8 + 2 * t + e] = make_float4(c, m1, fmaf(-sums.x, m1, sums.y), static_cast<float>(count));
            }
        }
}

// One level of a transposed reduction: lanes whose LANE_BIT is set keep v[HALF, 2 HALF), the others
// v[0, HALF); each adds its partner's (lane ^ LANE_BIT) value of the half it keeps, into v[0, HALF).
template <int HALF, int LANE_BIT>
__device__ __forceinline__ void halve_across_lanes(float (&v)[16], int g) {
    const bool upper = (g << 2) & LANE_BIT;
#pragma unroll
    for (int k = 0; k < HALF; ++k) {
        const float keep = upper ? v[k + HALF] : v[k], send = upper ? v[k] : v[k + HALF];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, LANE_BIT);
    }
}

// warp_statistics for NT = 4 with the reduction over the warp's 8 rows of lanes transposed: the lane's 16
// per-row sums (8 channels x (y - c, (y - c)^2)) are halved at each of the three shuffle levels (each lane
// keeps the half its row bit selects and adds its partner's): 14 shuffles instead of 48, and lane (g, t)
// ends with the two warp sums of one channel, q = 4 g0 + 2 g1 + g2 (g's bits reversed; j = q / 2, e = q % 2),
// so the shift check and the store run once per lane, not once per channel. The levels go in
// sum_over_rows's order (lane bits 2, 3, 4) and each sum is own + partner's: the same float results.
// Where any channel's shift is far from its values, warp_statistics redoes the warp with the second pass.
__device__ __forceinline__ void warp_statistics_transposed(const float (&acc)[kMTiles][4][4], uint32_t valid,
                                                           const float* shift, float4* out, int g, int t) {
    float v[16];  // v[2 q + s], q = 2 j + e the lane's channel, s = 0: sum of (y - c), 1: of (y - c)^2
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float2 sums = lane_shifted_sums(acc, valid, j, e, shift[j * 8 + 2 * t + e]);
            v[2 * (2 * j + e)] = sums.x;
            v[2 * (2 * j + e) + 1] = sums.y;
        }
    halve_across_lanes<8, 4>(v, g);  // lane bits 2, 3, 4 (g bits 0, 1, 2) select the upper halves
    halve_across_lanes<4, 8>(v, g);
    halve_across_lanes<2, 16>(v, g);
    const int q = (g & 1) << 2 | (g & 2) | g >> 2;
    const int ch = (q >> 1) * 8 + 2 * t + (q & 1);
    const int count = static_cast<int>(valid >> 8);
    const bool far = !(2.f * v[0] * v[0] <= static_cast<float>(count) * v[1]) || !isfinite(v[1]);
    if (__any_sync(0xffffffffu, far)) {  // uniform across the warp: the second pass (rare)
        warp_statistics(acc, valid, shift, out, g, t);
        return;
    }
    const float m1 = v[0] * (count > 0 ? 1.f / static_cast<float>(count) : 0.f);
    out[ch] = make_float4(shift[ch], m1, fmaf(-v[0], m1, v[1]), static_cast<float>(count));
}

// Pooling along x in registers, for a compile-time P in {2, 4, 8, 16} (step 4a of the kernel): a lane's
// 4 consecutive positions hold two windows (P = 2), one (P = 4), or a half or quarter of one whose rest is
// in the next one or three lanes (P = 8, 16: one or two shuffles). Writes the x-pooled values to the stage
// at [channel][m / P].
template <int P, int NT>
__device__ __forceinline__ void pool_x_to_stage(const float (&acc)[kMTiles][NT][4], float* stage, int stage_stride,
                                                int warp, int g, int t) {
    static_assert(P == 2 || P == 4 || P == 8 || P == 16, "P in {2, 4, 8, 16}");
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int ch = j * 8 + 2 * t + e;
            float* plane = stage + ch * stage_stride;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m0 = warp * kMTiles * 16 + 32 * h + 4 * g;  // the lane's first position, a multiple of 4
                const float q01 = pool_fold(acc[0][j][2 * h + e], acc[1][j][2 * h + e]);
                const float q23 = pool_fold(acc[2][j][2 * h + e], acc[3][j][2 * h + e]);
                if constexpr (P == 2) {
                    *reinterpret_cast<float2*>(plane + m0 / 2) = make_float2(q01, q23);
                } else {
                    float q = pool_fold(q01, q23);
                    if constexpr (P >= 8) q = pool_fold(q, __shfl_xor_sync(0xffffffffu, q, 4));
                    if constexpr (P == 16) q = pool_fold(q, __shfl_xor_sync(0xffffffffu, q, 8));
                    if ((m0 & (P - 1)) == 0) plane[m0 / P] = q;
                }
            }
        }
}

// Pooling along y from the stage of x-pooled values, and the store (step 4c): warp w finishes channels
// w, w + 8, ... of the chunk, its lanes consecutive windows of a pooled row. The channel loop is innermost and
// unrolled by 4, so a lane has the loads of 4 channels in flight (with the channels outermost, the loop
// control cost 3x the loads, pools and stores; ncu).
template <int P>
__device__ __forceinline__ void pool_y_and_store(const Params& p, const float* stage, int nch,
                                                 int co0, int64_t n, int py0, int px0, int npy, int npx, int warp,
                                                 int lane) {
    const int xs = p.box_stride / P;  // x-pooled values per conv row
    const int channels = min(nch, p.c_out - co0);
    const int64_t out_plane = static_cast<int64_t>(p.hp) * p.wp;
    float* out_c = p.out + ((n * p.c_out + co0 + warp) * p.hp + py0) * p.wp + px0;
    const float* plane = stage + warp * p.stage_stride;
    const uint64_t keep = l2_policy_evict_last();
    // Usually one pass of the row and column loops (a tile's pooled rows and columns fit the warp).
#pragma unroll 1
    for (int ly = 0; ly < npy; ++ly)
#pragma unroll 1
        for (int lx = lane; lx < npx; lx += 32) {
            const float* column = plane + ly * P * xs + lx;
            float* o = out_c + ly * p.wp + lx;
#pragma unroll 4
            for (int cl = warp; cl < channels; cl += kWarps) {
                float q = column[0];
#pragma unroll
                for (int dy = 1; dy < P; ++dy) q = pool_fold(q, column[dy * xs]);
                store_with_policy(o, q, keep);
                column += kWarps * p.stage_stride;
                o += kWarps * out_plane;
            }
        }
}

// Chan et al.'s merge of PARTS partial statistics (centre c_i, mean_i - c_i, M2_i, count_i), part i at
// part[i * stride], in float relative to the first part's centre, with one multiplication by 1 / (the parts' total
// count) and no division: returns (mean - part[0].x, M2). (c_i - c_0) + (mean_i - c_i) is part i's mean less c_0;
// a part without values has count 0 and weighs nothing. The chunked kernel merges its 8 warps, the by-phase kernel
// its 4 phases.
template <int PARTS>
__device__ __forceinline__ float2 merge_parts(const float4* part, int stride, float inv_total) {
    const float c0 = part[0].x;
    float moment = 0.f, m2 = 0.f;
#pragma unroll
    for (int i = 0; i < PARTS; ++i) {
        const float4 f = part[i * stride];
        moment = fmaf(f.w, (f.x - c0) + f.y, moment);
        m2 += f.z;
    }
    const float mean_delta = moment * inv_total;
#pragma unroll
    for (int i = 0; i < PARTS; ++i) {
        const float4 f = part[i * stride];
        const float d = ((f.x - c0) + f.y) - mean_delta;
        m2 = fmaf(f.w * d, d, m2);
    }
    return make_float2(mean_delta, m2);
}

// The GEMM on wgmma (wgmma plans: sm_90a, 32-channel chunks, BS % 4 == 0; both accuracy modes).
// wgmma reads A from shared memory as core matrices of 8 rows x 16 bytes (4 k values), rows 16 bytes apart.
// The raw box cannot be that (row m + 1 of a tap starts 4 bytes after row m), so each tile's box is relaid
// once into channel quads split by phase: element (ci, flat position e = 4 u + v) of the box goes to
//     quads[((ci / 4) * 4 + v) * quad_plane_units + u][ci % 4]        (16-byte words)
// Position m = 4 u + v of the GEMM (a warp's rows m = 64 warp + 32 h + 4 g + i: phase v = i, u = 16 warp +
// 8 h + g) reads, for tap (ky, kx) and channel ci, flat element m + ky BS + kx, which is word u + ky BS / 4 +
// (v + kx) / 4 of phase (v + kx) % 4: for a fixed (tap, phase) the 64 rows u of a warpgroup's m64 block are
// 64 consecutive words, 8 core matrices 128 bytes apart (SBO), and the two channel quads of a k8 slice are
// quad planes apart (LBO). So the warpgroup's m64 block i is the m16 tile i of its four warps, and the
// accumulators land where the mma.sync path puts them: the epilogue is shared.
//   TF32 mode: the relay rounds to TF32 (tf32_round, as the mma.sync path does per A fragment) and wgmma reads
// A from the relaid box. fp32-accurate mode: the relay copies; each lane loads its A fragments from the relaid
// box (32 consecutive floats per warp: no bank conflict) and splits them into hi and lo in registers, and the
// three products of a k-step go to a partial sum as on mma.sync. Either way the products are those of the
// mma.sync path, but the k sum runs tap-major, so the outputs differ in the last bits.
//
// One relay item: channel quad `quad`'s 4 positions at flat word f = r * BS / 4 + u of the box (BS = 4 units). The
// quad's word f in each channel is at raw + ci * pitch + 4 f, and its four phases land at quads[4 quad plane +
// v plane + f]. ROUND (TF32 mode): rounded to TF32; else (fp32 mode) x - r(n, ci), with r = shift[ci] (input_shift).
// Channels past C_in are written as zeros.
template <bool ROUND>
__device__ __forceinline__ void relay_item(const Params& p, const float* raw, float* quads, const float* shift,
                                           int quad, int f) {
    const int plane = p.quad_plane_units;
    const float* src = raw + 4 * quad * p.box_pitch + 4 * f;
    float4 c[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const bool real = 4 * quad + k < p.c_in;  // padded channels stay zero
        c[k] = real ? *reinterpret_cast<const float4*>(src + k * p.box_pitch) : make_float4(0.f, 0.f, 0.f, 0.f);
        if constexpr (ROUND) {
            c[k] = make_float4(tf32_round(c[k].x), tf32_round(c[k].y), tf32_round(c[k].z), tf32_round(c[k].w));
        } else {
            const float r = real ? shift[4 * quad + k] : 0.f;
            c[k] = make_float4(c[k].x - r, c[k].y - r, c[k].z - r, c[k].w - r);
        }
    }
    float4* dst = reinterpret_cast<float4*>(quads) + (4 * quad * plane + f);
    dst[0] = make_float4(c[0].x, c[1].x, c[2].x, c[3].x);
    dst[plane] = make_float4(c[0].y, c[1].y, c[2].y, c[3].y);
    dst[2 * plane] = make_float4(c[0].z, c[1].z, c[2].z, c[3].z);
    dst[3 * plane] = make_float4(c[0].w, c[1].w, c[2].w, c[3].w);
}

// The by-phase kernel's fp32-mode relay, one item: 16-byte word f of the box rows (4 positions) in channel quad q
// (C_in <= 8: 4 of the octet of FP16 values a position holds), x - r(n, ci) with r = shift[ci], scaled by the box's
// power of two and split into FP16 hi and lo (split_half2). The scale needs the largest |x - r| of the whole box, so it
// takes two steps. relay_split_gather loads the item into c (zeros past C_in and for threads without an item: only
// the first `items` threads have one) and reduces the relay warps' maximum through warp_max (16 words, 16-byte aligned,
// zero for warps past `threads`) behind a barrier of their own (the block's first `threads` threads), returning the
// box's exponent (fp16_scale_exponent). relay_split_store
// scales and splits c: position j of the word (phase j) lands in the 8-byte half q of word j * plane + f of the hi box
// and of the lo box `lo_offset` floats on. Non-finite values take part in the maximum: they make their whole sample
// NaN (GroupNorm), whatever the scale.
__device__ __forceinline__ int relay_split_gather(const Params& p, const float* raw, const float* shift,
                                                  uint32_t* warp_max, int q, int f, int items, int threads,
                                                  float4 (&c)[4]) {
    const bool mine = static_cast<int>(threadIdx.x) < items;
    uint32_t m = 0u;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int ci = 4 * q + k;
        const bool real = mine && ci < p.c_in;  // padded channels stay zero
        c[k] = real ? *reinterpret_cast<const float4*>(raw + ci * p.box_pitch + 4 * f) : make_float4(0.f, 0.f, 0.f, 0.f);
        const float r = real ? shift[ci] : 0.f;
        c[k] = make_float4(c[k].x - r, c[k].y - r, c[k].z - r, c[k].w - r);
        m = max(m, max(max(__float_as_uint(c[k].x) & 0x7fffffffu, __float_as_uint(c[k].y) & 0x7fffffffu),
                       max(__float_as_uint(c[k].z) & 0x7fffffffu, __float_as_uint(c[k].w) & 0x7fffffffu)));
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    named_barrier_sync(threads);
    // All 16 words (one per warp of the by-phase kernel, zero where a warp has no item) in 4 loads.
    const uint4* words = reinterpret_cast<const uint4*>(warp_max);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint4 q = words[i];
        m = max(max(m, max(q.x, q.y)), max(q.z, q.w));
    }
    return fp16_scale_exponent(m);
}
__device__ __forceinline__ void relay_split_store(const Params& p, const float4 (&c)[4], int e, float* octets,
                                                  int lo_offset, int q, int f) {
    const float sc = exp2_int(e);
    const int plane = p.quad_plane_units;
    uint2* hi = reinterpret_cast<uint2*>(octets) + 2 * f + q;
    uint2* lo = reinterpret_cast<uint2*>(octets + lo_offset) + 2 * f + q;
    const auto at = [](const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; };
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint2 h01 = split_half2(at(c[0], j) * sc, at(c[1], j) * sc);
        const uint2 h23 = split_half2(at(c[2], j) * sc, at(c[3], j) * sc);
        hi[2 * j * plane] = make_uint2(h01.x, h23.x);
        lo[2 * j * plane] = make_uint2(h01.y, h23.y);
    }
}

// Relays the box rows this tile reads, one relay_item per (quad, f), walked by the CTA's kThreads threads with f
// advanced by kThreads and carried into quad: no division per item (with two per item the relay was 18 % of the
// TF32 kernel's warp-instructions, ncu).
template <bool ROUND>
__device__ __forceinline__ void relay_box(const Params& p, const float* raw, float* quads, const float* shift) {
    const int words = (p.tile_rows + p.kh - 1) * (p.box_stride / 4);  // 16-byte words per channel the tile reads
    const int used_quads = (p.c_in + 3) / 4;
    const int quad_step = kThreads / words, word_step = kThreads - quad_step * words;
    int quad = threadIdx.x / words, f = threadIdx.x - quad * words;
    while (quad < used_quads) {
        relay_item<ROUND>(p, raw, quads, shift, quad, f);
        f += word_step;
        quad += quad_step;
        if (f >= words) {
            f -= words;
            ++quad;
        }
    }
}

// fp32 mode on mma.sync: the box's elements become x - r(n, ci) in place, r = shift[ci] (input_shift): the
// first `count` floats of each channel (what the copy wrote: a bulk copy leaves the rest zero, and it must stay
// so; cp.async rewrites the whole box, its zeros feed only dropped rows).
__device__ __forceinline__ void shift_box(const Params& p, float* box, const float* shift, int count) {
    for (int ci = 0; ci < p.c_in; ++ci) {
        const float r = shift[ci];
        float* channel = box + ci * p.box_pitch;
        for (int e = threadIdx.x; e < count; e += kThreads) channel[e] -= r;
    }
}

#if defined(MODEL_B_WGMMA)
// N k-steps of the warpgroup's GEMM, all products issued, then one wait (a runtime loop between a wgmma and
// its wait would make ptxas serialize them all, C7520). taps[s] (Params::wgmma_taps, in the grid-constant
// parameters: uniform loads straight into the descriptors' uniform registers) holds the A descriptor offsets
// of k-step s for the four phases; the weights of k-step s are the k8 chunk after those of s - 1. FRESH: the
// first k-step starts the accumulators.
template <int N, bool FRESH>
__device__ __forceinline__ void gemm_batch_ss(float (&acc)[kMTiles][4][4], const int4* taps, uint32_t a_low,
                                              uint32_t b_low) {
    constexpr uint32_t kChunkUnits = 8 * 32 * sizeof(float) >> 4;  // a k-step's weights, in 16-byte units
    uint32_t a[N][kMTiles];
#pragma unroll
    for (int e = 0; e < N; ++e) {
        const int4 off = taps[e];
        a[e][0] = a_low + static_cast<uint32_t>(off.x);
        a[e][1] = a_low + static_cast<uint32_t>(off.y);
        a[e][2] = a_low + static_cast<uint32_t>(off.z);
        a[e][3] = a_low + static_cast<uint32_t>(off.w);
    }
    wgmma_fence();
#pragma unroll
    for (int e = 0; e < N; ++e)
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
            if (FRESH && e == 0) wgmma_tf32_ss<false>(acc[i], a[e][i], b_low + e * kChunkUnits);
            else wgmma_tf32_ss<true>(acc[i], a[e][i], b_low + e * kChunkUnits);
        }
    wgmma_commit();
    wgmma_wait<0>();
}

// The warpgroup's whole GEMM over `ksteps` >= 1 k-steps, in batches of 8, 4, 2 and 1.
__device__ __forceinline__ void gemm_ss(float (&acc)[kMTiles][4][4], const int4* taps, int ksteps, uint32_t a_low,
                                        uint32_t b_low) {
    constexpr uint32_t kChunkUnits = 8 * 32 * sizeof(float) >> 4;
    int done;
    if (ksteps >= 8) {
        gemm_batch_ss<8, true>(acc, taps, a_low, b_low);
        done = 8;
    } else if (ksteps >= 4) {
        gemm_batch_ss<4, true>(acc, taps, a_low, b_low);
        done = 4;
    } else if (ksteps >= 2) {
        gemm_batch_ss<2, true>(acc, taps, a_low, b_low);
        done = 2;
    } else {
        gemm_batch_ss<1, true>(acc, taps, a_low, b_low);
        done = 1;
    }
    while (done < ksteps) {
        const int left = ksteps - done;
        const uint32_t b = b_low + done * kChunkUnits;
        if (left >= 8) {
            gemm_batch_ss<8, false>(acc, taps + done, a_low, b);
            done += 8;
        } else if (left >= 4) {
            gemm_batch_ss<4, false>(acc, taps + done, a_low, b);
            done += 4;
        } else if (left >= 2) {
            gemm_batch_ss<2, false>(acc, taps + done, a_low, b);
            done += 2;
        } else {
            gemm_batch_ss<1, false>(acc, taps + done, a_low, b);
            done += 1;
        }
    }
}

// The fp32-accurate GEMM of a warpgroup, for one phase and a group of STEPS k-steps: the lane's A fragments
// from the relaid box (`a_lane` = its first element: word 16 warp + g, float t; a1 is 8 words on, a2 and a3
// the k8 slice's second quad: quad_floats on, or PAIRED, at the offset in the tap entry's high half), split into
// TF32 hi and lo, and the products lo*hi and hi*lo of the group's k-steps, then
// their hi*hi (small terms first), into a partial sum started from zero, then one fp32 add to the
// accumulator: accumulating all k-steps straight into it measured 10 % over PARITY.md's fp32 limit at K = 300
// on mma.sync, since the tensor core truncates what it adds to a large running sum. Weights per k-step: the
// hi chunk, then the lo chunk. Each partial sum is waited for before its add (no wait across a branch: C7520).
template <int STEPS, bool PAIRED>
__device__ __forceinline__ void phase_products_3xtf32(float (&acc)[4][4], const float* a_lane, const int4* taps,
                                                      int phase, int quad_floats, uint32_t b_hi0) {
    constexpr uint32_t kChunkUnits = 8 * 32 * sizeof(float) >> 4;  // one chunk (hi or lo), in 16-byte units
    uint32_t hi[STEPS][4], lo[STEPS][4];
#pragma unroll
    for (int k = 0; k < STEPS; ++k) {
        const int entry = reinterpret_cast<const int*>(taps + k)[phase];  // PAIRED: first word | second's offset << 16
        float x[4];
        if constexpr (PAIRED) {
            const float* a = a_lane + 4 * (entry & 0xffff);
            const float* a2 = a + 4 * (entry >> 16);
            x[0] = a[0]; x[1] = a[32]; x[2] = a2[0]; x[3] = a2[32];
        } else {
            const float* a = a_lane + 4 * entry;
            x[0] = a[0]; x[1] = a[32]; x[2] = a[quad_floats]; x[3] = a[quad_floats + 32];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            hi[k][e] = __float_as_uint(tf32_hi(x[e]));
            lo[k][e] = __float_as_uint(x[e] - __uint_as_float(hi[k][e]));
        }
    }
    float part[4][4];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < STEPS; ++k) {
        const uint32_t b_hi = b_hi0 + 2 * k * kChunkUnits, b_lo = b_hi + kChunkUnits;
        if (k == 0) wgmma_tf32_rs<false>(part, lo[k], b_hi);
        else wgmma_tf32_rs<true>(part, lo[k], b_hi);
        wgmma_tf32_rs<true>(part, hi[k], b_lo);
    }
#pragma unroll
    for (int k = 0; k < STEPS; ++k) wgmma_tf32_rs<true>(part, hi[k], b_hi0 + 2 * k * kChunkUnits);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += part[j][e];
}

template <int STEPS, bool PAIRED>
__device__ __forceinline__ void step_group_3xtf32(float (&acc)[kMTiles][4][4], const int4* taps, const float* a_lane,
                                                  int quad_floats, uint32_t b_hi0) {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) phase_products_3xtf32<STEPS, PAIRED>(acc[i], a_lane, taps, i, quad_floats, b_hi0);
}

// k-steps per partial sum (STEPS above): each partial sum costs a wait. Measured on an H100 (KernelBench size,
// results/model_b/NOTES.md): 1, 2, 3, 4 took 0.373, 0.350, 0.339, 0.344 ms (4 spills), and the errors against
// float64 stayed within PARITY.md's fp32 limits with the same margins (a third of the limit at most, over 9
// configurations x 3 seeds x {+0, +100}; at K = 300 they are smaller than with one k-step per partial sum).
constexpr int kStepsPerPartial = 3;

template <bool PAIRED>
__device__ __forceinline__ void gemm_rs_3xtf32(float (&acc)[kMTiles][4][4], const int4* taps, int ksteps,
                                               const float* a_lane, int quad_floats, uint32_t b_low) {
    constexpr uint32_t kStepUnits = 2 * 8 * 32 * sizeof(float) >> 4;  // a k-step's hi and lo chunks
#pragma unroll
    for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    int s = 0;
    for (; s + kStepsPerPartial <= ksteps; s += kStepsPerPartial)
        step_group_3xtf32<kStepsPerPartial, PAIRED>(acc, taps + s, a_lane, quad_floats, b_low + s * kStepUnits);
    const int left = ksteps - s;  // the last, partial group
    if (kStepsPerPartial > 3 && left == 3)
        step_group_3xtf32<3, PAIRED>(acc, taps + s, a_lane, quad_floats, b_low + s * kStepUnits);
    if (kStepsPerPartial > 2 && left == 2)
        step_group_3xtf32<2, PAIRED>(acc, taps + s, a_lane, quad_floats, b_low + s * kStepUnits);
    if (left == 1) step_group_3xtf32<1, PAIRED>(acc, taps + s, a_lane, quad_floats, b_low + s * kStepUnits);
}
#endif

// Persistent: grid.x = chunks * G. CTA b serves channel chunk b % chunks and walks the (sample, tile)
// units u = b / chunks, + G, + 2G, ... (the CTAs of the chunks of one unit are neighbours: L2 hits on the
// box). The weight fragments are set up once; the next unit's box is copied while this one computes.
// WGMMA (NT = 4, sm_90a): the GEMM on wgmma from the relaid box (relay_box); one raw box, whose next copy
// starts once this tile's box is relaid.
template <int NT, bool SPLIT3, bool WGMMA, bool PAIRED = false>
__global__ void __launch_bounds__(kThreads, 2)
conv_stats_pool_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#if !defined(MODEL_B_WGMMA)
    if constexpr (WGMMA) __trap();  // built without sm_90a's wgmma: the host never launches it (make_plan)
#endif
    static_assert(!WGMMA || NT == 4, "the GEMM on wgmma: 32-channel chunks");
    constexpr int NCH = 8 * NT;
    constexpr int MT = kMTiles;
    constexpr SmemLayout layout{NT, SPLIT3, WGMMA};
    extern __shared__ __align__(16) unsigned char smem[];
    float* weight_frag = reinterpret_cast<float*>(smem);
    int2* taps = reinterpret_cast<int2*>(smem + layout.weight_bytes(p.ksteps));
    // fp32 mode: [2 (unit parity)][c_in], r(n, ci) of this unit's sample and the next one's (input_shift); then
    // [c_in][kShiftSamples], the next unit's samples of each plane (request_shift_elements); then [c_in][NCH],
    // sign_c * sum over the taps of w(c, ci, taps) for the chunk's channels c
    float* shifts = reinterpret_cast<float*>(smem + layout.weight_bytes(p.ksteps) + layout.tap_bytes(p.ksteps));
    float* shift_elements = shifts + 2 * p.c_in;
    float* weight_sums = shift_elements + kShiftSamples * p.c_in;
    // fp32 mode: requests the samples of each plane of sample n (input_shift) into shift_elements, as their own
    // cp.async group, one element per thread: request t is sample t % 16 of plane t / 16, so the 16 of a plane
    // come from 16 lanes of one warp, which combine them after the GEMM (each lane waits for its own request, then
    // a warp barrier). One thread requesting all 16 of a plane held its warp back (results/model_b/NOTES.md).
    const auto request_shift_elements = [&](int64_t n) {
        for (int t = threadIdx.x; t < kShiftSamples * p.c_in; t += kThreads) {
            const int ci = t / kShiftSamples, j = t % kShiftSamples;
            cp_async_4(shift_elements + t, input_plane(p, n, ci) + shift_sample_offset(j, p.h, p.w), 4);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    float* boxes = reinterpret_cast<float*>(smem + layout.weight_bytes(p.ksteps) + layout.tap_bytes(p.ksteps) +
                                            layout.shift_bytes(p.c_in));
    // WGMMA: boxes is the raw box, then the relaid one (quads)
    float* quads = boxes + p.c_in * p.box_pitch;
    float* stage = WGMMA ? quads + 16 * p.quad_groups * p.quad_plane_units
                          : boxes + 2 * p.c_in * p.box_pitch;  // see SmemLayout::stage_bytes

    __shared__ float4 warp_stats[kWarps][NCH];  // per warp and channel: (centre, mean - centre, M2, count)
    __shared__ float tile_shift[NCH];           // per channel: the statistics' shift, the last tile's mean
    __shared__ __align__(8) uint64_t box_landed[2];  // bulk_copy: per box, an mbarrier its copies complete on
    static_assert(MT == 4, "a lane's rows are 4 consecutive positions (i = 0..3), twice (h = 0, 1)");

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tiles = p.tiles_y * p.tiles_x;
    const int chunk = static_cast<int>(blockIdx.x % p.chunks);
    UnitPos pos = unit_position(p, static_cast<int>(blockIdx.x) / p.chunks);  // the first unit; then advance()
    const int co0 = chunk * NCH;
    const int K = p.c_in * p.kh * p.kw;
    if (pos.n >= static_cast<unsigned>(p.batch)) return;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const bool bulk = p.bulk_copy != 0;
#else
    const bool bulk = false;  // the host sets bulk_copy on sm_90 and newer only
#endif
    if (WGMMA) {  // the relay reads whole raw rows, and wgmma padded channels and words past the box
        for (int i = tid; i < p.c_in * p.box_pitch + 16 * p.quad_groups * p.quad_plane_units; i += kThreads)
            boxes[i] = 0.f;
    }
    if (bulk) {
        if (!WGMMA)
            for (int i = tid; i < 2 * p.c_in * p.box_pitch; i += kThreads) boxes[i] = 0.f;
        if (tid == 0) {
            mbarrier_init(&box_landed[0]);
            mbarrier_init(&box_landed[1]);
        }
        fence_proxy_async();  // the zeros before the bulk copies' writes
    }
    if constexpr (SPLIT3) {  // the first unit's r(n, ci): the barrier below (or step 1's) orders it before the use
        for (int ci = tid; ci < p.c_in; ci += kThreads) shifts[ci] = input_shift(p, pos.n, ci);
        for (int i = tid; i < NCH * p.c_in; i += kThreads) {
            const int co = co0 + i % NCH, ci = i / NCH;
            float sum = 0.f;
            if (co < p.c_out)
                for (int tap = 0; tap < p.kh * p.kw; ++tap)
                    sum += __ldg(p.weight + (static_cast<int64_t>(co) * p.c_in + ci) * p.kh * p.kw + tap);
            weight_sums[i] = co < p.c_out ? pooling_sign(p, co) * sum : 0.f;
        }
    }
    if (bulk || WGMMA || SPLIT3) __syncthreads();
    start_box(p, boxes, box_landed, bulk, 0, pos);
    // Once per CTA: the statistics' shifts, the weight fragments (negated for channels that pool by min)
    // and the tap offsets.
    if (tid < NCH) tile_shift[tid] = 0.f;
    if constexpr (WGMMA) {
        // k-step s = (tap (ky, kx), channels 8 q .. 8 q + 7), q fastest: the weights as wgmma's core matrices,
        // [n group (4)][k half (2)][8 channels n][4 k] per k-step (a chunk), rounded to TF32, or split into a hi
        // chunk and a lo chunk (SPLIT3); per k-step and phase v the offset of A's first word in the relaid box
        // (16-byte units): channel quad 2 q, phase (v + kx) % 4, word ky BS / 4 + (v + kx) / 4.
        const int quads8 = p.quad_groups / 2, kk = p.kh * p.kw, pair_rows = (p.kh + 1) / 2;
        for (int i = tid; i < p.ksteps * 256; i += kThreads) {
            const int s = i >> 8, k = (i >> 5) & 7, n = i & 31, co = co0 + n;
            int tap = s / quads8, ci = 8 * (s - tap * quads8) + k;
            if (SPLIT3 ? PAIRED : p.paired_taps != 0) {  // k half k >> 2: quad 0 of tap (2 j + k >> 2, kx); past kh, zeros
                const int kx = s / pair_rows, ky = 2 * (s - kx * pair_rows) + (k >> 2);
                tap = ky < p.kh ? ky * p.kw + kx : -1;
                ci = k & 3;
            }
            const float w = (tap >= 0 && co < p.c_out && ci < p.c_in)
                                ? pooling_sign(p, co) * __ldg(p.weight + (static_cast<int64_t>(co) * p.c_in + ci) * kk + tap)
                                : 0.f;
            const int at = ((n >> 3) * 2 + (k >> 2)) * 32 + (n & 7) * 4 + (k & 3);
            if constexpr (SPLIT3) {
                const float hi = tf32_hi(w);
                weight_frag[s * 512 + at] = hi;
                weight_frag[s * 512 + 256 + at] = w - hi;
            } else {
                weight_frag[s * 256 + at] = tf32_value(w);
            }
        }
    }
    for (int i = tid; i < (WGMMA ? 0 : p.ksteps * NT * 32); i += kThreads) {
        const int fl = i & 31, j = (i >> 5) % NT, s = (i >> 5) / NT;
        const int co = co0 + j * 8 + (fl >> 2);
        const int k0 = s * 8 + (fl & 3), k1 = k0 + 4;
        const float sign = co < p.c_out ? pooling_sign(p, co) : 1.f;
        const float w0 = (co < p.c_out && k0 < K) ? sign * __ldg(p.weight + static_cast<int64_t>(co) * K + k0) : 0.f;
        const float w1 = (co < p.c_out && k1 < K) ? sign * __ldg(p.weight + static_cast<int64_t>(co) * K + k1) : 0.f;
        if constexpr (SPLIT3) {
            const float h0 = tf32_hi(w0), h1 = tf32_hi(w1);
            reinterpret_cast<float4*>(weight_frag)[i] = make_float4(h0, h1, w0 - h0, w1 - h1);
        } else {
            reinterpret_cast<float2*>(weight_frag)[i] = make_float2(tf32_value(w0), tf32_value(w1));
        }
    }
    for (int i = tid; i < (WGMMA ? 0 : p.ksteps * 4); i += kThreads) {
        int off[2];
        for (int h = 0; h < 2; ++h) {
            const int kk = (i >> 2) * 8 + (i & 3) + 4 * h;
            if (kk < K) {
                const int ci = kk / (p.kh * p.kw), r = kk - ci * p.kh * p.kw, ky = r / p.kw, kx = r - ky * p.kw;
                off[h] = ci * p.box_pitch + ky * p.box_stride + kx;
            } else {
                off[h] = 0;  // padded tap: weight 0, reads a real element of the box
            }
        }
        taps[i] = make_int2(off[0], off[1]);
    }

    // The positions that count in a full tile (all R x TX positions inside the conv output), once per CTA.
    const uint32_t full_tile_valid = valid_positions(p, p.tile_rows, p.tile_cols, warp, g);

    // The loop step recomputes advance(p, pos) rather than carry `next` (a loop-carried `next` cost 4-byte
    // spills in three instantiations).
    for (int iter = 0; pos.n < static_cast<unsigned>(p.batch); ++iter, pos = advance(p, pos)) {
        const int64_t n = pos.n;
        const int ty = pos.ty, tx = pos.tx, tile = ty * p.tiles_x + tx;
        const int rows_valid = tile_rows_valid(p, ty), cols_valid = tile_cols_valid(p, tx);
        float* box = boxes + (WGMMA ? 0 : (iter & 1) * p.c_in * p.box_pitch);
        const float* shift = shifts + (iter & 1) * p.c_in;  // fp32 mode: this unit's r(n, ci)

        // 1. Start copying the next unit's box into the other buffer (free: every warp finished reading
        //    it before the last iteration's barriers), then wait for this unit's box.
        //    With bulk copies, box b's k-th use (iteration 2 k + b) waits for phase k of its mbarrier.
        //    WGMMA: wait for this unit's raw box, relay it (every warp finished reading the relaid box
        //    before the last iteration's barriers), then start copying the next unit's into the raw box.
        const UnitPos next = advance(p, pos);
        const bool has_next = next.n < static_cast<unsigned>(p.batch);
        if constexpr (WGMMA) {
            if (bulk) {
                mbarrier_wait(&box_landed[0], iter & 1);
            } else {
                cp_async_wait<0>();
                __syncthreads();
            }
            relay_box<!SPLIT3>(p, box, quads, shift);
            fence_proxy_async();  // the relaid box (generic writes) before wgmma reads it
            __syncthreads();
            if (SPLIT3 && has_next) request_shift_elements(next.n);  // (a cp.async group before the box's)
            if (has_next) start_box(p, boxes, box_landed, bulk, 0, next);
        } else {
            if (has_next) start_box(p, boxes, box_landed, bulk, (iter + 1) & 1, next);
            if (bulk) {
                mbarrier_wait(&box_landed[iter & 1], (iter >> 1) & 1);
            } else if (has_next) {
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            if constexpr (SPLIT3) {
                shift_box(p, box, shift,
                          bulk ? (min(p.h, ty * p.tile_rows + p.tile_rows + p.kh - 1) - ty * p.tile_rows) * p.w
                               : p.box_pitch);
                if (bulk) fence_proxy_async();  // these writes before the bulk copy that refills the buffer
                __syncthreads();
            }
        }
        if (!WGMMA && SPLIT3 && has_next) request_shift_elements(next.n);  // (a cp.async group after the box's)

        // 2. The implicit GEMM: rows = this warp's 64 flat positions, columns = NT x 8 channels, K in steps of
        //    8. Row g (h = 0) or g + 8 (h = 1) of m16 tile i is position m = 64 warp + 32 h + 4 g + i: a lane
        //    holds 4 consecutive positions (i = 0..3) twice, so pooling windows of up to 4 columns lie in its
        //    registers. For a fixed (i, h) the lanes read 4 g + off(t): distinct banks only when the 4 taps'
        //    offsets differ mod 4, which kx = 0..2 and a tap one row down (BS = 0 mod 4) do not, so those
        //    loads are 2-way conflicted (results/model_b/NOTES.md). A fragments come from the raw fp32 box
        //    and are split into TF32 hi (and lo) in registers.
        float acc[MT][NT][4];
        if constexpr (!WGMMA) {  // (the wgmma GEMMs start them)
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
        }

#if defined(MODEL_B_WGMMA)
        if constexpr (WGMMA) {
            // Warpgroup wg's rows u = 64 wg .. 64 wg + 63 of each phase: 64 words into the relaid box.
            const uint32_t wg = warp_uniform(static_cast<uint32_t>(warp >> 2));
            const uint32_t a_low = ((smem_address(quads) & 0x3ffff) >> 4) + 64 * wg;  // (LBO: in wgmma_taps)
            if constexpr (SPLIT3)
                gemm_rs_3xtf32<PAIRED>(acc, p.wgmma_taps, p.ksteps, quads + 4 * (16 * warp + g) + t,
                                       16 * p.quad_plane_units, weight_descriptor_low(weight_frag));
            else
                gemm_ss(acc, p.wgmma_taps, p.ksteps, a_low, weight_descriptor_low(weight_frag));
        }
#endif
        const float* a_base = box + warp * MT * 16 + 4 * g;
        for (int s = 0; s < (WGMMA ? 0 : p.ksteps); ++s) {
            const int2 off = taps[s * 4 + t];
            uint32_t b[NT][SPLIT3 ? 4 : 2];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if constexpr (SPLIT3) {
                    const float4 f = reinterpret_cast<const float4*>(weight_frag)[(s * NT + j) * 32 + lane];
                    b[j][0] = __float_as_uint(f.x); b[j][1] = __float_as_uint(f.y);
                    b[j][2] = __float_as_uint(f.z); b[j][3] = __float_as_uint(f.w);
                } else {
                    const float2 f = reinterpret_cast<const float2*>(weight_frag)[(s * NT + j) * 32 + lane];
                    b[j][0] = __float_as_uint(f.x); b[j][1] = __float_as_uint(f.y);
                }
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float v[4] = {a_base[i + off.x], a_base[i + 32 + off.x], a_base[i + off.y],
                                    a_base[i + 32 + off.y]};
                uint32_t a_hi[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) a_hi[e] = __float_as_uint(SPLIT3 ? tf32_hi(v[e]) : tf32_round(v[e]));
                if constexpr (SPLIT3) {
                    uint32_t a_lo[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) a_lo[e] = __float_as_uint(v[e] - __uint_as_float(a_hi[e]));
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        // A partial sum per k-step, started from zero, then one fp32 add: accumulating the
                        // three products straight into `acc` measured 10 % over PARITY.md's fp32 limit at
                        // K = 300 (C_in 12, k 5), since the error of the tensor cores' accumulation then
                        // grows with the number of k-steps.
                        float part[4] = {0.f, 0.f, 0.f, 0.f};
                        mma_tf32(part, a_lo, b[j][0], b[j][1]);
                        mma_tf32(part, a_hi, b[j][2], b[j][3]);
                        mma_tf32(part, a_hi, b[j][0], b[j][1]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[i][j][e] += part[e];
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < NT; ++j) mma_tf32(acc[i][j], a_hi, b[j][0], b[j][1]);
                }
            }
        }

        // fp32 mode: the next unit's r(n, ci) into the other slot, from the elements this thread requested in
        // step 1 (wgmma with cp.async boxes: the next box's group is newer). The slot's last readers (the relay or
        // shift_box of the unit before) are past that unit's barriers; this unit's barriers (step 4a's at least)
        // order it before the next unit's use.
        if (SPLIT3 && has_next) {
            if (WGMMA && !bulk) cp_async_wait<1>();
            else cp_async_wait<0>();
            __syncwarp();  // each lane waited for its own request; this shows them to the warp's other lanes
            float* slot = shifts + ((iter + 1) & 1) * p.c_in;
            for (int t = tid; t < kShiftSamples * p.c_in; t += kThreads)
                if (t % kShiftSamples == 0) slot[t / kShiftSamples] = input_shift_of(shift_elements + t);
        }

        // 3. Statistics per warp, from the registers and without a barrier (warp_statistics): each warp
        //    pushes (c_w, mean - c_w, M2, count) per channel to shared memory; warp 0 merges the 8 warps after
        //    the next barrier. Position m is conv position (y0 + m / BS, x0 + m % BS); it counts when both lie
        //    inside the tile's part of the conv output.
        const int count = rows_valid * cols_valid;
        const uint32_t valid = (rows_valid == p.tile_rows && cols_valid == p.tile_cols)
                                   ? full_tile_valid
                                   : valid_positions(p, rows_valid, cols_valid, warp, g);
        if constexpr (NT == 4) warp_statistics_transposed(acc, valid, tile_shift, warp_stats[warp], g, t);
        else warp_statistics(acc, valid, tile_shift, warp_stats[warp], g, t);

        // 4a. Pooling along x in registers where P in {2, 4, 8, 16} divides BS (pool_in_registers): a window's
        //     columns then lie in one conv row, starting at a multiple of P. pool_x_to_stage writes the x-pooled
        //     values of all 8 * NT channels to the stage (stage_stride = kRows / P + 4, so the lanes of a warp
        //     write to distinct banks for P >= 4).
        if (p.pool_in_registers) {
            switch (p.pool) {
                case 2: pool_x_to_stage<2>(acc, stage, p.stage_stride, warp, g, t); break;
                case 4: pool_x_to_stage<4>(acc, stage, p.stage_stride, warp, g, t); break;
                case 8: pool_x_to_stage<8>(acc, stage, p.stage_stride, warp, g, t); break;
                default: pool_x_to_stage<16>(acc, stage, p.stage_stride, warp, g, t); break;
            }
        }
        __syncthreads();  // warp_stats complete (and the x-pooled stage)

        // 4b. Warp 0 merges the 8 warps' statistics per channel (float, relative to warp 0's centre, no
        //     division but one per tile) and stores the tile's (mean, M2) in float64 to the workspace.
        if (tid < NCH && co0 + tid < p.c_out) {
            const float c0 = warp_stats[0][tid].x;  // warp 0 holds position 0, inside every tile: count >= 1
            const float2 merged = merge_parts<kWarps>(&warp_stats[0][tid], NCH, 1.f / static_cast<float>(count));
            const float mean_delta = merged.x;
            p.stats[(n * tiles + tile) * p.c_out + co0 + tid] =
                make_double2(static_cast<double>(c0) + mean_delta, fmaxf(merged.y, 0.f));
            // The next tile's shift; a NaN or inf must not carry over. fp32 mode: the values of the next unit are
            // shifted by d = sum_ci r(n, ci) sign_c sum_taps w less than the conv (input_shift), d_this here and
            // d_next there; its slot of r was written before the barrier above.
            float next_centre = c0 + mean_delta;
            if constexpr (SPLIT3) {
                const float* r_this = shift;
                const float* r_next = shifts + ((iter + 1) & 1) * p.c_in;
                float d_change = 0.f;
#pragma unroll 4
                for (int ci = 0; ci < p.c_in; ++ci)
                    d_change = fmaf(r_this[ci] - r_next[ci], weight_sums[ci * NCH + tid], d_change);
                next_centre += d_change;
            }
            tile_shift[tid] = isfinite(next_centre) ? next_centre : 0.f;
        }

        // 4c. The pooled values of the tile's windows: pooled rows [y0 / P, y0 / P + npy), columns
        //     [x0 / P, x0 / P + npx); max over each P x P window of sign * y (pooling_sign: y's min-pool where
        //     gamma * scale < 0).
        const int py0 = ty * p.pooled_tile_rows, px0 = tx * p.pooled_tile_cols;  // y0 / P, x0 / P
        const int npy = max(0, min(p.pooled_tile_rows, p.hp - py0));
        const int npx = max(0, min(p.pooled_tile_cols, p.wp - px0));
        if (npy * npx == 0) continue;  // a tile of rows in no pooling window (uniform across the CTA)
        if (p.pool_in_registers) {
            switch (p.pool) {
                case 2: pool_y_and_store<2>(p, stage, NCH, co0, n, py0, px0, npy, npx, warp, lane); break;
                case 4: pool_y_and_store<4>(p, stage, NCH, co0, n, py0, px0, npy, npx, warp, lane); break;
                case 8: pool_y_and_store<8>(p, stage, NCH, co0, n, py0, px0, npy, npx, warp, lane); break;
                default: pool_y_and_store<16>(p, stage, NCH, co0, n, py0, px0, npy, npx, warp, lane); break;
            }
            continue;
        }
        // General pooling: the raw tile through the stage, 8 channels (one n8 tile) at a time, each lane's 4
        // consecutive positions as one 16-byte write; warp w pools staged channel w. Rows of a window are
        // read 4 (or 2) floats at a time when P and BS allow.
        const int vec = (p.pool % 4 == 0 && p.box_stride % 4 == 0) ? 4 : (p.pool % 2 == 0 && p.box_stride % 2 == 0) ? 2 : 1;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            if (co0 + j * 8 >= p.c_out) break;  // uniform across the CTA
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int m0 = warp * MT * 16 + 32 * h + 4 * g;
                    *reinterpret_cast<float4*>(stage + (2 * t + e) * p.stage_stride + m0) = make_float4(
                        acc[0][j][2 * h + e], acc[1][j][2 * h + e], acc[2][j][2 * h + e], acc[3][j][2 * h + e]);
                }
            __syncthreads();
            static_assert(kWarps == 8, "one warp per staged channel");
            const int c = co0 + j * 8 + warp;
            if (c < p.c_out) {
                const float* plane = stage + warp * p.stage_stride;
                float* out_c = p.out + ((n * p.c_out + c) * p.hp + py0) * p.wp + px0;
                for (int ly = 0; ly < npy; ++ly)
                    for (int lx = lane; lx < npx; lx += 32) {
                        const float* win = plane + ly * p.pool * p.box_stride + lx * p.pool;
                        store_with_policy(out_c + ly * p.wp + lx, pool_window(win, p.pool, p.box_stride, vec),
                                          l2_policy_evict_last());
                    }
            }
            __syncthreads();
        }
    }
#else
    __trap();  // needs sm_80 (mma.sync TF32); the host refuses to launch it on older GPUs
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernel 1, by-phase plan: output channels as wgmma's M, one warpgroup per phase (both modes)
// ---------------------------------------------------------------------------------------------
// The plan for the KernelBench shape family (make_plan: sm_90a, P = 4, whole input rows of
// W = 128, kernel 3 x 3, C_in <= 8, 32 < C_out <= 64). The chunked kernel above puts positions on the GEMM's M
// and 32 channels on N, so two CTAs per tile each copy, relay and multiply the same input box. Here the GEMM is
// transposed: M = the 64 output channels (the weights, wgmma's A, from shared memory), N = 128 positions, K as
// before. A CTA of 4 warpgroups (512 threads, one CTA per SM, persistent) takes a whole tile (4 conv rows x 128
// box columns, all channels); warpgroup v takes the positions of phase v (column x = 4 xq + v), which in the
// relaid box are 128 consecutive words (u = 32 r + xq): one m64n128k8 wgmma per k-step, B the relaid box at
// the offsets of phase v (Params::phase_b, the chunked kernel's Params::wgmma_taps for its A where C_in > 4).
//   A lane (warp w of its warpgroup, g = lane / 4, t = lane % 4) then holds channels 16 w + g and 16 w + g + 8, and
// for each the conv rows r = 0..3 at x-quads xq = 8 jj + 2 t + e (jj = 0..3, e = 0, 1): acc[4 r + jj][2 h + e].
// So a pooling window's 4 rows are in the lane's registers (3 max per pooled value) and its 4 columns are the 4
// phases, which meet in a staged [phase][channel][xq] array behind the tile's one barrier. The statistics are
// shifted sums per lane (as the chunked kernel's, shifted by the CTA's mean of that channel two tiles back, which the
// fp32 mode moves by the change of d between the two units; the TF32 mode shifts by 0 where that mean was within 6
// standard deviations of 0, and sums a warp's values unshifted where all its shifts are 0), reduced over the 4 lanes
// of a quad and merged over the 4 phases after the barrier into the same (mean, M2) per (sample, tile, channel) that
// kernel 2 reads.
//   K: KSTEPS k8 slices, each two channel quads (k halves) of the relaid box: at C_in <= 4 two taps' quad 0 per
// slice (5 k-steps for the 9 taps; the chunks' layout takes 9, with quad 1 all zeros), else one tap's two quads (9).
// Where a slice's two halves lie in the other order for some phase, that phase's A is a copy of the weight block
// with its k halves swapped (Params::phase_b, phase_a). The run of record (results/model_b/timing.csv) times the
// model with this kernel and with the chunked one.
//   fp32 mode (SPLIT): the operands are FP16 hi and lo (split_half2), K in k16 slices of two taps' 8 channels (one
// octet: the paired plan's tables, 5 k-steps at any C_in <= 8), 15 m64n128k16 products per tile and warpgroup: w_lo x_hi
// and w_hi x_lo of every k-step, then w_hi x_hi. Shared memory holds hi and lo weight blocks and, per relaid buffer,
// a hi and a lo box (the same bytes as the TF32 layout's two quads). The relay subtracts r(n, ci) (input_shift,
// computed by warp 14 for the box two tiles ahead) and finds the box's scale among the relay warps (a barrier of
// their own, named_barrier_sync); the epilogue folds the scale back into the statistics and the pooled values.
constexpr int kPhaseThreads = 512;                       // 4 warpgroups
constexpr int kPhaseCopyWarp = 15;                       // issues the input boxes' bulk copies inside the tile loop
constexpr int kPhaseShiftWarp = 14;                      // fp32 mode: computes the input shifts r(n, ci) of box t + 2
constexpr int kPhaseSplitMergeWarp = 12;                 // fp32 mode: warps 12 and 13 merge the phases' statistics
constexpr int kPhasePairedSteps = 5;                     // k-steps at C_in <= 4 (3 x 3 taps, two per k8 slice)
constexpr int kPhasePairedBlocks = 6;                    // weight blocks of the paired plan (the fp32 mode's, hi and lo)
constexpr int kPhaseStageStride = 40;                    // floats per channel row of the stage: 32 x-quads + 8, so
                                                         // the lanes' 8-byte stores fall in distinct banks
constexpr int kPhaseStagePlane = 64 * kPhaseStageStride; // floats per phase of the stage

#if defined(MODEL_B_WGMMA)
// Sums of (y - c) and (y - c)^2 of the lane's two channels (h = 0: row g, h = 1: row g + 8; s = {d1, d2} per h)
// over its values in conv rows r < rows_valid and x-quads whose bit (2 jj + e) is set in colmask (any tile).
__device__ __forceinline__ void phase_lane_sums(const float (&acc)[16][4], int rows_valid, uint32_t colmask, float c0,
                                                float c1, float f0, float f1, float (&s)[4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float c = h ? c1 : c0, f = h ? f1 : f0;
        float d1 = 0.f, d2 = 0.f;
#pragma unroll
        for (int r = 0; r < 4; ++r)
            if (r < rows_valid)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (colmask >> (2 * jj + e) & 1u) {
                            const float d = fmaf(acc[4 * r + jj][2 * h + e], f, -c);
                            d1 += d;
                            d2 = fmaf(d, d, d2);
                        }
        s[2 * h] = d1;
        s[2 * h + 1] = d2;
    }
}
// The plain sums of the same values (the second pass's centre).
__device__ __forceinline__ void phase_lane_plain_sums(const float (&acc)[16][4], int rows_valid, uint32_t colmask,
                                                      float (&s)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = 0.f;
#pragma unroll
        for (int r = 0; r < 4; ++r)
            if (r < rows_valid)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (colmask >> (2 * jj + e) & 1u) sum += acc[4 * r + jj][2 * h + e];
        s[h] = sum;
    }
}
#endif

template <int KSTEPS, bool SPLIT>
__global__ void __launch_bounds__(kPhaseThreads, 1)
conv_stats_pool_by_phase_kernel(const __grid_constant__ Params p) {
#if defined(MODEL_B_WGMMA)
    static_assert(!SPLIT || KSTEPS == kPhasePairedSteps, "the fp32 mode runs the paired plan (FP16 octets)");
    // Weight blocks: at kPhaseMaxSteps, block s is k-step s for every phase (phase_steps_plan checks it), so A's
    // offsets are immediates (a build that looked them up there ran 1.4 % slower at the KernelBench size on an
    // H100, results/model_b/NOTES.md); else up to kPhaseMaxBlocks, looked up per k-step and phase.
    constexpr bool kTableA = KSTEPS != kPhaseMaxSteps;
    constexpr int kBlocks = SPLIT ? 2 * kPhasePairedBlocks : kTableA ? kPhaseMaxBlocks : kPhaseMaxSteps;
    // Shared memory: the weights as wgmma's A core matrices, kBlocks blocks ([8 channel groups][2 k halves][8][4],
    // 2 KB, TF32), two raw boxes (the bulk copies land there: box k in raw box k % 2), two relaid boxes (this
    // tile's, read by wgmma, and the next one's, written by the relay meanwhile), two stages (this tile's y-pooled
    // values; the last tile's are read after the barrier).
    extern __shared__ __align__(128) unsigned char smem[];
    float* weights = reinterpret_cast<float*>(smem);
    float* raw = weights + kBlocks * 512;
    const int box_floats = p.c_in * p.box_pitch;
    const int quad_floats = 16 * p.quad_groups * p.quad_plane_units;
    float* quads = raw + 2 * box_floats;
    float* stage = quads + 2 * quad_floats;
    __shared__ float4 phase_stats[2][4][64];  // per tile parity, phase and channel: (centre, mean - centre, M2, count)
    __shared__ float tile_shift[2][64];       // per tile parity and channel: the statistics' shift
    __shared__ __align__(8) uint64_t box_landed[2];  // per raw box: box k completes phase k / 2 of box_landed[k % 2]
    // fp32 mode (SPLIT): per box parity, r(n, ci) (input_shift) and the box's FP16 scale exponent; per channel, the
    // weights' scale exponent; per relay warp, its largest |x - r| (as bits); per (input channel, channel), the
    // channel's signed weights summed over the taps; per tile parity and channel, d = sum_ci r(n, ci) weight_sums
    // of the unit that takes that parity's statistics' shift next (see the merge).
    __shared__ float box_shift[SPLIT ? 2 : 1][8];
    __shared__ int box_exponent[2];
    __shared__ int weight_exponent[SPLIT ? 64 : 1];
    __shared__ __align__(16) uint32_t relay_max[kPhaseThreads / 32];
    static_assert(kPhaseThreads / 32 == 16, "relay_split_gather reads 16 warp maxima");
    __shared__ float weight_sums[SPLIT ? 8 : 1][64];
    __shared__ float unit_offset[SPLIT ? 2 : 1][64];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int v = static_cast<int>(warp_uniform(static_cast<uint32_t>(warp >> 2)));  // the warpgroup's phase
    const int w = warp & 3;
    const unsigned batch = static_cast<unsigned>(p.batch);
    UnitPos pos = unit_position(p, static_cast<int>(blockIdx.x));
    if (pos.n >= batch) return;

    // The boxes start zero (words past the copied rows feed only dropped positions); the first two boxes' copies
    // start before the weights are set up, which they hide.
    for (int i = tid; i < 2 * box_floats + 2 * quad_floats; i += kPhaseThreads) raw[i] = 0.f;
    if (tid < kPhaseThreads / 32) relay_max[tid] = 0u;  // the words of warps without relay items stay 0
    if (tid == 0) {
        mbarrier_init(&box_landed[0]);
        mbarrier_init(&box_landed[1]);
    }
    fence_proxy_async();
    __syncthreads();
    load_box_bulk(p, raw, &box_landed[0], pos.n, pos.ty);
    {
        const UnitPos second = advance(p, pos);
        if (second.n < batch) load_box_bulk(p, raw + box_floats, &box_landed[1], second.n, second.ty, kPhaseCopyWarp);
    }
    const int kk = p.kh * p.kw;
    if constexpr (SPLIT) {
        // Per channel, the weights' FP16 scale and their sums over the taps; the input shifts of the first two boxes
        // (warps 2 and 3).
        if (tid < 64) {
            uint32_t m = 0u;
            const float sign = tid < p.c_out ? pooling_sign(p, tid) : 0.f;
            for (int ci = 0; ci < 8; ++ci) {  // C_in <= 8 (make_plan)
                float sum = 0.f;
                if (tid < p.c_out && ci < p.c_in)
                    for (int tap = 0; tap < kk; ++tap) {
                        const float wv = __ldg(p.weight + (static_cast<int64_t>(tid) * p.c_in + ci) * kk + tap);
                        m = max(m, finite_abs_bits(wv));
                        sum += wv;
                    }
                weight_sums[ci][tid] = sign * sum;
            }
            weight_exponent[tid] = fp16_scale_exponent(m);
        } else if (tid >= 64 && tid < 64 + p.c_in) {
            box_shift[0][tid - 64] = input_shift(p, pos.n, tid - 64);
        } else if (tid >= 96 && tid < 96 + p.c_in) {
            const UnitPos second = advance(p, pos);
            box_shift[1][tid - 96] = second.n < batch ? input_shift(p, second.n, tid - 96) : 0.f;
        }
        __syncthreads();
        if (tid < 64)
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                float d = 0.f;
                for (int ci = 0; ci < p.c_in; ++ci) d = fmaf(box_shift[k][ci], weight_sums[ci][tid], d);
                unit_offset[k][tid] = d;
            }
        // The weights as FP16 hi (blocks 0..5) and lo (blocks 6..11), [8 channel groups][2 k halves][8][8 halves].
        for (int i = tid; i < p.phase_blocks * 512; i += kPhaseThreads) {
            const int b = i >> 9, c = (i >> 3) & 63, k = 2 * (i & 7);  // a pair of k values: one word
            const int half = (k >> 3) ? p.phase_halves[b].y : p.phase_halves[b].x;  // tap * 2 + octet, or -1
            const int tap = half >> 1, ci = 8 * (half & 1) + (k & 7);
            float wv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e)
                wv[e] = (half >= 0 && c < p.c_out && ci + e < p.c_in)
                            ? pooling_sign(p, c) * __ldg(p.weight + (static_cast<int64_t>(c) * p.c_in + ci + e) * kk + tap)
                            : 0.f;
            const float sc = exp2_int(weight_exponent[c]);
            const uint2 split = split_half2(wv[0] * sc, wv[1] * sc);
            const int word = b * 512 + ((c >> 3) * 2 + (k >> 3)) * 32 + (c & 7) * 4 + ((k & 7) >> 1);
            reinterpret_cast<uint32_t*>(weights)[word] = split.x;
            reinterpret_cast<uint32_t*>(weights)[word + kPhasePairedBlocks * 512] = split.y;
        }
    } else {
        for (int i = tid; i < p.phase_blocks * 512; i += kPhaseThreads) {
            const int b = i >> 9, c = (i >> 3) & 63, k = i & 7;
            const int half = (k >> 2) ? p.phase_halves[b].y : p.phase_halves[b].x;  // tap * 2 + quad, or -1
            const int tap = half >> 1, ci = 4 * (half & 1) + (k & 3);
            const float wv = (half >= 0 && c < p.c_out && ci < p.c_in)
                                 ? pooling_sign(p, c) * __ldg(p.weight + (static_cast<int64_t>(c) * p.c_in + ci) * kk + tap)
                                 : 0.f;
            weights[b * 512 + ((c >> 3) * 2 + (k >> 2)) * 32 + (c & 7) * 4 + (k & 3)] = tf32_value(wv);
        }
    }
    if (tid < 64) tile_shift[0][tid] = tile_shift[1][tid] = 0.f;
    fence_proxy_async();  // the weights before wgmma reads them (the barrier after the first relay orders them)

    // The lane's x-quads inside the conv output: bit 2 jj + e for xq = 8 jj + 2 t + e, x = 4 xq + v < Wo. At W = 128
    // the blocks jj < 3 are inside for every lane (x <= 95); only jj = 3 needs the mask on a full tile.
    uint32_t colmask = 0;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
        for (int e = 0; e < 2; ++e)
            if (4 * (8 * jj + 2 * t + e) + v < p.wo) colmask |= 1u << (2 * jj + e);
    const bool last_inside0 = (colmask >> 6) & 1u, last_inside1 = (colmask >> 7) & 1u;
    const bool front_inside = p.wo > 95;
    const int phase_cols = min(32, max(0, (p.wo - v + 3) / 4));  // x-quads of phase v inside the conv output

    // The relay (relay_box's layout) with one item per thread: channel quad my_quad, 16-byte word my_word.
    const int relay_words = (p.tile_rows + p.kh - 1) * (p.box_stride / 4);
    const int relay_items = ((p.c_in + 3) / 4) * relay_words;  // <= kPhaseThreads (make_plan)
    const int my_quad = tid / relay_words, my_word = tid - my_quad * relay_words;
    // fp32 mode: two channel quads per word (<= kPhaseThreads, make_plan), in the first 12 warps at W = 128. Their
    // gather (loads and the box maximum, behind their own barrier) and their store run before their warpgroups issue
    // the products: with the barrier after the issue, the relay warps waited there for the warpgroup whose issue the
    // tensor cores' queue held back (ncu); with the store after it, the gathered values were live across the issue
    // and ptxas spilled (storing first: 1.0 % faster, results/model_b/NOTES.md).
    const int split_items = 2 * relay_words;
    const int relay_threads = (split_items + 31) / 32 * 32;
    // An item is (octet half split_quad, word split_word); the two halves of a word go to adjacent lanes, so that
    // a warp's 8-byte stores cover 256 contiguous bytes (2 wavefronts, no bank conflict).
    const int split_quad = tid & 1, split_word = tid >> 1;
    float4 relay_values[SPLIT ? 4 : 1];  // the gathered item of the next box
    int relay_exponent = 0;
    const auto relay_gather = [&](const float* raw_box, int slot) {  // slot: the box's parity
        if constexpr (SPLIT) {
            if (tid < relay_threads) {
                relay_exponent = relay_split_gather(p, raw_box, box_shift[slot], relay_max, split_quad, split_word,
                                                    split_items, relay_threads, relay_values);
                if (tid == 0) box_exponent[slot] = relay_exponent;
            }
        }
    };
    const auto relay = [&](const float* raw_box, float* dst_box) {  // (fp32 mode: after relay_gather)
        if constexpr (SPLIT) {
            if (tid < split_items) relay_split_store(p, relay_values, relay_exponent, dst_box, quad_floats / 2,
                                                     split_quad, split_word);
        } else if (tid < relay_items) {
            relay_item<true>(p, raw_box, dst_box, nullptr, my_quad, my_word);
        }
    };

    mbarrier_wait(&box_landed[0], 0);
    relay_gather(raw, 0);
    relay(raw, quads);
    fence_proxy_async();
    __syncthreads();
    const uint32_t w_low = weight_descriptor_low(weights);
    const uint32_t q_low = (smem_address(quads) & 0x3ffff) >> 4;  // LBO 0: each k-step's phase_b adds its own
    const int* b_steps = reinterpret_cast<const int*>(p.phase_b);  // [k-step][phase]
    const int* a_steps = reinterpret_cast<const int*>(p.phase_a);  // [k-step][phase]
    const uint64_t keep = l2_policy_evict_last();
    const int64_t out_plane = static_cast<int64_t>(p.hp) * p.wp;
    const int tiles = p.tiles_y;

    // Per tile: (1) the GEMM issued, (2) meanwhile the next-but-one box's copy started (by warp 15) and the next box
    // relaid into the other relaid buffer (fp32 mode: relaid before the issue), (3) the statistics and the y pooling
    // from registers, the tile's one barrier, then (4) the phases' statistics merged (by warps 0 and 1; fp32 mode: 12
    // and 13) and the x pooling stored. (The warpgroups pipelined instead, without the tile's barrier, each phase
    // passing its x maximum on to the next through mbarriers, measured 0-20 % slower in the TF32 mode on an H100:
    // results/model_b/NOTES.md.)
    for (int iter = 0; pos.n < batch; ++iter) {
        const UnitPos next = advance(p, pos);
        const bool has_next = next.n < batch;
        const int buf = iter & 1;
        const int64_t n = pos.n;
        const int ty = pos.ty;

        float acc[16][4];
        const uint32_t qb = warp_uniform(q_low + static_cast<uint32_t>(buf * (quad_floats / 4)));
        if constexpr (SPLIT) {  // box t + 1's gather and store, before this tile's products (only the relay warps)
            if (has_next && tid < relay_threads) {
                mbarrier_wait(&box_landed[buf ^ 1], static_cast<uint32_t>((iter + 1) >> 1) & 1u);
                relay_gather(raw + (buf ^ 1) * box_floats, buf ^ 1);
                relay(raw + (buf ^ 1) * box_floats, quads + (buf ^ 1) * quad_floats);
                fence_proxy_async();
            }
        }
        wgmma_fence();
        if constexpr (SPLIT) {
            // fp32 mode: the small products (w_lo x_hi, w_hi x_lo) of every k-step first, then w_hi x_hi, so that
            // only these 5 add to the running sum at its full magnitude (the tensor cores truncate what they add to
            // it there, results/model_b/NOTES.md).
            constexpr uint32_t kLoWeights = kPhasePairedBlocks * 128;        // 16-byte units
            const uint32_t lo_box = static_cast<uint32_t>(quad_floats / 8);  // 16-byte units
#pragma unroll
            for (int s = 0; s < KSTEPS; ++s) {
                const uint32_t a = w_low + static_cast<uint32_t>(a_steps[4 * s + v]);
                const uint32_t b = qb + static_cast<uint32_t>(b_steps[4 * s + v]);
                if (s == 0) wgmma_m64n128_ss<false, true>(acc, a + kLoWeights, b);
                else wgmma_m64n128_ss<true, true>(acc, a + kLoWeights, b);
                wgmma_m64n128_ss<true, true>(acc, a, b + lo_box);
            }
#pragma unroll
            for (int s = 0; s < KSTEPS; ++s)
                wgmma_m64n128_ss<true, true>(acc, w_low + static_cast<uint32_t>(a_steps[4 * s + v]),
                                             qb + static_cast<uint32_t>(b_steps[4 * s + v]));
        } else {
#pragma unroll
            for (int s = 0; s < KSTEPS; ++s) {
                const uint32_t a = w_low + static_cast<uint32_t>(kTableA ? a_steps[4 * s + v] : 128 * s);
                const uint32_t b = qb + static_cast<uint32_t>(b_steps[4 * s + v]);
                if (s == 0) wgmma_m64n128_ss<false>(acc, a, b);
                else wgmma_m64n128_ss<true>(acc, a, b);
            }
        }
        wgmma_commit();
        // Box t + 2 into raw box t % 2, which held box t (relaid before the last barrier). Warp 15 issues it: its
        // warpgroup has no relay items at C_in <= 8 and waits for its products anyway (issuing 8 copies keeps a warp
        // about 1 600 cycles on an H100, results/model_b/NOTES.md).
        {
            const UnitPos after_next = advance(p, next);
            if (has_next && after_next.n < batch) {
                load_box_bulk(p, raw + buf * box_floats, &box_landed[buf], after_next.n, after_next.ty, kPhaseCopyWarp);
                if constexpr (SPLIT)  // its r(n, ci), in box t's slot (read by box t's relay before the last barrier)
                    if (warp == kPhaseShiftWarp && lane < p.c_in) box_shift[buf][lane] = input_shift(p, after_next.n, lane);
            }
        }
        if (!SPLIT && has_next) {  // box t + 1: raw box (t + 1) % 2, its use (t + 1) / 2 of that mbarrier
            mbarrier_wait(&box_landed[buf ^ 1], static_cast<uint32_t>((iter + 1) >> 1) & 1u);
            relay(raw + (buf ^ 1) * box_floats, quads + (buf ^ 1) * quad_floats);
            fence_proxy_async();
        }
        wgmma_wait<0>();
        float f_row0 = 1.f, f_row1 = 1.f;
        if constexpr (SPLIT) {
            // fp32 mode: the products are 2^(box exponent + channel's weight exponent) times the conv of x - r. Where
            // that power of two is a normal float, the scale back (exact) is folded into where the values are used:
            // the statistics take fma(acc, f, -c), and the pooled values are scaled after the max (which commutes with
            // a positive scale). Else the accumulators are scaled here, in two multiplies.
            const int ex = box_exponent[buf], ew0 = weight_exponent[16 * w + g], ew1 = weight_exponent[16 * w + g + 8];
            const int s0 = ex + ew0, s1 = ex + ew1;
            const auto scale_back = [&](float f0, float f1) {  // rows g (channel 16 w + g) and g + 8
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    acc[j][0] *= f0;
                    acc[j][1] *= f0;
                    acc[j][2] *= f1;
                    acc[j][3] *= f1;
                }
            };
            if (__all_sync(0xffffffffu, s0 >= -127 && s0 <= 126 && s1 >= -127 && s1 <= 126)) {
                f_row0 = exp2_int(-s0);
                f_row1 = exp2_int(-s1);
            } else {
                scale_back(exp2_int(-ex), exp2_int(-ex));
                scale_back(exp2_int(-ew0), exp2_int(-ew1));
            }
        }

        // Statistics of the lane's two channels, shifted by c (one pass; a second one about the warp's own mean
        // where c is more than a standard deviation off or the sums are not finite), reduced over the quad's 4
        // lanes transposed: lane t ends with moment t >> 1 of channel row g + 8 (t & 1).
        const int rows_valid = tile_rows_valid(p, ty);
        const float count = static_cast<float>(rows_valid * phase_cols);
        const float inv_count = 1.f / count;
        float c0 = tile_shift[buf][16 * w + g], c1 = tile_shift[buf][16 * w + g + 8];
        const bool up1 = t & 1, up2 = (t & 2) != 0;
        const auto reduce_quad = [&](const float (&s)[4]) {
            float k0 = up1 ? s[2] : s[0], k1 = up1 ? s[3] : s[1];
            k0 += __shfl_xor_sync(0xffffffffu, up1 ? s[0] : s[2], 1);
            k1 += __shfl_xor_sync(0xffffffffu, up1 ? s[1] : s[3], 1);
            return (up2 ? k1 : k0) + __shfl_xor_sync(0xffffffffu, up2 ? k0 : k1, 2);
        };
        const bool full_tile = front_inside && rows_valid == 4;  // uniform
        // shifted (std::true_type or std::false_type): whether c0_ and c1_ are subtracted. Unshifted (the TF32 mode
        // only, where f = 1), a value takes two instructions instead of three.
        const auto lane_sums = [&](auto shifted, float c0_, float c1_, float (&s)[4]) {
            constexpr bool kShifted = decltype(shifted)::value;
            static_assert(kShifted || !SPLIT, "the fp32 mode scales its values back (f): always the shifted form");
            if (!full_tile) {
                phase_lane_sums(acc, rows_valid, colmask, kShifted ? c0_ : 0.f, kShifted ? c1_ : 0.f, f_row0, f_row1,
                                s);
                return;
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float c = h ? c1_ : c0_, f = h ? f_row1 : f_row0;
                float a1 = 0.f, a2 = 0.f, b1 = 0.f, b2 = 0.f;  // two chains each, for latency
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            float d = kShifted ? fmaf(acc[4 * r + jj][2 * h + e], f, -c) : acc[4 * r + jj][2 * h + e];
                            if (jj == 3) d = (e ? last_inside1 : last_inside0) ? d : 0.f;  // outside: d = 0
                            if (r & 1) { a1 += d; a2 = fmaf(d, d, a2); }
                            else { b1 += d; b2 = fmaf(d, d, b2); }
                        }
                s[2 * h] = a1 + b1;
                s[2 * h + 1] = a2 + b2;
            }
        };
        // TF32 mode: a shift of 0 means that the channel's mean was within 6 standard deviations of 0 two tiles back
        // (the merge below). There the pass holds where the mean is within 8 (M2 then carries at most about 65 float
        // roundings of itself, far below TF32's error), and where every shift of the warp is 0, the values are summed
        // unshifted (measured on an H100: results/model_b/NOTES.md). Elsewhere it holds within one.
        float sums[4];
        const bool unshifted = !SPLIT && __all_sync(0xffffffffu, c0 == 0.f && c1 == 0.f);
        if constexpr (SPLIT)
            lane_sums(std::true_type{}, c0, c1, sums);
        else if (unshifted)
            lane_sums(std::false_type{}, 0.f, 0.f, sums);
        else
            lane_sums(std::true_type{}, c0, c1, sums);
        float mine = reduce_quad(sums), other = __shfl_xor_sync(0xffffffffu, mine, 2);
        float d1 = up2 ? other : mine, d2 = up2 ? mine : other;
        const float slack = (!SPLIT && (up1 ? c1 : c0) == 0.f) ? 64.f : 1.f;  // holds where mean^2 <= slack * variance
        if (__any_sync(0xffffffffu, !((slack + 1.f) * d1 * d1 <= slack * count * d2) || !isfinite(d2))) {
            float plain[2];
            phase_lane_plain_sums(acc, rows_valid, colmask, plain);
            plain[0] *= f_row0;  // exact: a power of two
            plain[1] *= f_row1;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                plain[h] += __shfl_xor_sync(0xffffffffu, plain[h], 1);
                plain[h] += __shfl_xor_sync(0xffffffffu, plain[h], 2);
            }
            c0 = plain[0] * inv_count;
            c1 = plain[1] * inv_count;
            lane_sums(std::true_type{}, c0, c1, sums);
            mine = reduce_quad(sums);
            other = __shfl_xor_sync(0xffffffffu, mine, 2);
            d1 = up2 ? other : mine;
            d2 = up2 ? mine : other;
        }
        if (!up2) {
            const float m1 = d1 * inv_count;
            phase_stats[buf][v][16 * w + g + 8 * (t & 1)] = make_float4(up1 ? c1 : c0, m1, fmaf(-d1, m1, d2), count);
        }

        // Pooling along y in registers (the tile is one row of windows), to stage[buf][v][channel][xq].
        const int py = ty;
        if (py < p.hp) {
            float* st = stage + buf * 4 * kPhaseStagePlane + v * kPhaseStagePlane + (16 * w + g) * kPhaseStageStride + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    float q[2];
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        q[e] = (h ? f_row1 : f_row0) *
                               pool_fold(pool_fold(acc[jj][2 * h + e], acc[4 + jj][2 * h + e]),
                                         pool_fold(acc[8 + jj][2 * h + e], acc[12 + jj][2 * h + e]));
                    *reinterpret_cast<float2*>(st + 8 * h * kPhaseStageStride + 8 * jj) = make_float2(q[0], q[1]);
                }
        }
        __syncthreads();  // the stage, the phases' statistics and the next relaid box complete; the relaid raw box free

        // The 4 phases' statistics of a channel merged (as the chunked kernel merges its warps); the mean is the
        // shift of the tile two ahead (this tile parity's slot, read again after the next barrier). In the fp32 mode
        // warps 12 and 13 merge: their warpgroup has no relay items, so warps 0 and 1 go straight on to the next
        // box's gather, whose barrier the other relay warps would otherwise wait at (1.2 % faster, NOTES).
        const int mc = tid - (SPLIT ? 32 * kPhaseSplitMergeWarp : 0);  // the channel merged
        if (mc >= 0 && mc < 64 && mc < p.c_out) {
            const float c_first = phase_stats[buf][0][mc].x;
            const float inv_total = 1.f / static_cast<float>(rows_valid * p.wo);  // the 4 phases' counts add up to it
            const float2 merged = merge_parts<4>(&phase_stats[buf][0][mc], 64, inv_total);
            const float mean_delta = merged.x;
            p.stats[(n * tiles + ty) * p.c_out + mc] =
                make_double2(static_cast<double>(c_first) + mean_delta, fmaxf(merged.y, 0.f));
            float centre = c_first + mean_delta;
            if constexpr (!SPLIT)  // within 6 standard deviations of 0: 0, so that the next tile may sum unshifted
                if (centre * centre * static_cast<float>(rows_valid * p.wo) <= 36.f * merged.y) centre = 0.f;
            if constexpr (SPLIT) {
                // These values are the conv of x - r (r of this unit's sample) and lack d of this unit; those of the
                // unit two ahead lack d of theirs, whose r warp 14 put in box_shift[buf] in this tile. The shift moves
                // by the difference (r changes from sample to sample; without this move the second pass ran on most
                // tiles, results/model_b/NOTES.md).
                float d_ahead = 0.f;
                for (int ci = 0; ci < p.c_in; ++ci) d_ahead = fmaf(box_shift[buf][ci], weight_sums[ci][mc], d_ahead);
                centre += unit_offset[buf][mc] - d_ahead;
                unit_offset[buf][mc] = d_ahead;
            }
            tile_shift[buf][mc] = isfinite(centre) ? centre : 0.f;
        }
        // Pooling along x: the max over the 4 phases; warp w stores channels w, w + 16, ... (lane = xq). All 16 loads
        // come before the first store: each store is an asm statement with a memory clobber, which kept the next
        // channel's loads behind it (loads first: 1.5-1.9 % faster in the TF32 mode, results/model_b/NOTES.md).
        if (py < p.hp && lane < p.wp) {
            const float* e = stage + buf * 4 * kPhaseStagePlane + warp * kPhaseStageStride + lane;
            float pooled[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float* ek = e + 16 * k * kPhaseStageStride;
                pooled[k] = pool_fold(pool_fold(ek[0], ek[kPhaseStagePlane]),
                                      pool_fold(ek[2 * kPhaseStagePlane], ek[3 * kPhaseStagePlane]));
            }
            float* o = p.out + ((n * p.c_out + warp) * p.hp + py) * p.wp + lane;
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (warp + 16 * k < p.c_out) store_with_policy(o + 16 * k * out_plane, pooled[k], keep);
        }
        pos = next;
    }
#else
    __trap();  // the host launches it only where the build has wgmma (make_plan)
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernel 2: merge the statistics per (sample, group), then out = clamp(a * (Q - mu) + beta * scale)
// ---------------------------------------------------------------------------------------------
// One warp per (sample, group) piece, `warps` pieces per block: a piece's merge is a warp's shuffles, with no
// block barrier. (One block of 256 threads per piece, its merge two block sums, took 22-27 us at the KernelBench
// size; its merge's chain alone took 20 us and its traffic in the pooled values 16 us: results/model_b/NOTES.md.)
// Samples run last to first: kernel 1 wrote the last ones last, so they are the likeliest still in L2.
// The merge is Chan et al.'s, in two warp sums instead of a pairwise tree: the group mean
// mu = sum(count_t * mean_t) / count, then M2 = sum(M2_t + count_t * (mean_t - mu)^2); no division but
// the two per lane at the end.
// Dynamic shared memory per warp (finish_smem_bytes): per channel of the group a float4 of coefficients and a double
// offset; SHIFT_INPUT (the fp32 mode's d_c) also input_shift's samples, [c_in][kShiftSamples] floats,
// and r per input channel. SHIFT_INPUT is a template parameter so that the TF32 mode's registers are not sized for it.
__host__ __device__ constexpr size_t finish_smem_bytes(int cpg, int c_in, bool shift_input) {
    return (static_cast<size_t>(cpg) * (sizeof(float4) + sizeof(double)) +
            (shift_input ? sizeof(float) * (kShiftSamples + 1) * static_cast<size_t>(c_in) : 0) + 15) / 16 * 16;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <bool SHIFT_INPUT>
__global__ void __launch_bounds__(kFinalThreads)
finish_kernel(const Params p, const float* __restrict__ bias, const float* __restrict__ beta, int groups,
              int warps, float eps, float lo, float hi) {
    extern __shared__ __align__(16) unsigned char finish_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int cpg = p.c_out / groups;
    const int64_t piece = static_cast<int64_t>(blockIdx.x) * warps + warp;  // (the launch has 32 x warps threads)
    if (piece >= p.batch * static_cast<int64_t>(groups)) return;  // no block barrier below
    unsigned char* mine = finish_smem + warp * finish_smem_bytes(cpg, p.c_in, SHIFT_INPUT);
    float4* coef = reinterpret_cast<float4*>(mine);  // sign * (s_hi, s_lo, a), beta * scale
    double* offset = reinterpret_cast<double*>(coef + cpg);  // bias + d
    float* shift_elements = reinterpret_cast<float*>(offset + cpg);  // SHIFT_INPUT: [c_in][kShiftSamples]
    float* shifts = shift_elements + kShiftSamples * p.c_in;  // SHIFT_INPUT: r per input channel
    const int64_t n = p.batch - 1 - piece / groups;
    const int grp = static_cast<int>(piece % groups);
    const int tiles = p.tiles_y * p.tiles_x;
    const double group_count = static_cast<double>(p.ho) * p.wo * cpg;

    // In place over each channel's plane: a scalar head up to a 16-byte boundary, 16-byte words, a scalar tail
    // (4-byte accesses left a third of the copy rate on the table: too few bytes in flight). kBatch channels at a
    // time, kWords words of each per lane loaded before any is finished and stored; a channel's head and tail (at
    // most 3 values each) are one value per lane of the first head + tail lanes. The first words are requested here,
    // before the merge, whose round trips then hide their latency.
    constexpr int kBatch = 4, kWords = 2;
    const int plane = p.hp * p.wp;  // < 2^31: a plane of the input is
    float* dst[kBatch];
    int head[kBatch], body[kBatch], edges[kBatch], most = 0;
    float4 q[kWords][kBatch];
    float edge[kBatch];  // this lane's head value (lane < head) or tail value (lane - head < tail)
    const auto plan_batch = [&](int c0) {
        most = 0;
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
            const int cl = min(c0 + u, cpg - 1);  // past cpg: a copy of the last channel, with nothing to do
            dst[u] = p.out + (n * p.c_out + grp * cpg + cl) * plane;
            head[u] = min(plane, static_cast<int>(((16 - (reinterpret_cast<uintptr_t>(dst[u]) & 15)) & 15) / 4));
            body[u] = c0 + u < cpg ? (plane - head[u]) / 4 : 0;
            edges[u] = c0 + u < cpg ? plane - 4 * body[u] : 0;  // head + tail, <= 6 <= 32
            most = max(most, body[u]);
        }
    };
    const auto edge_index = [&](int u) { return lane < head[u] ? lane : 4 * body[u] + lane; };  // where lane < edges[u]
    const auto load_words = [&](int v0) {  // words v0 + 32 w of each channel of the batch
#pragma unroll
        for (int w = 0; w < kWords; ++w)
#pragma unroll
            for (int u = 0; u < kBatch; ++u)
                if (v0 + 32 * w < body[u]) q[w][u] = reinterpret_cast<const float4*>(dst[u] + head[u])[v0 + 32 * w];
    };
    const auto load_edges = [&]() {
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
            if (lane < edges[u]) edge[u] = dst[u][edge_index(u)];
    };
    plan_batch(0);
    load_words(lane);
    load_edges();

    // fp32 mode: kernel 1 convolved x - r(n, ci) (input_shift), so its statistics and pooled values lack the
    // per-channel constant d_c = sum_ci r(n, ci) sum_taps w(c, ci, taps), computed below in float64 (exact
    // products of floats, one rounding per add) and added with the bias: offset_c = bias_c + d_c. The samples are
    // requested here, 16 c_in spread over the lanes, and pass through shared memory (16 per lane had taken 102
    // registers: results/model_b/NOTES.md); lane ci then takes r of input channel ci once for all channels.
    const int taps = p.kh * p.kw;  // per (c, ci)
    constexpr int kSamplesAhead = 4;  // per lane, in registers (at the KernelBench size, all 16 c_in = 128)
    float sample[kSamplesAhead];
    const auto sample_of = [&](int t) {  // element t % 16 of input_shift's samples of plane t / 16
        return __ldg(input_plane(p, n, t / kShiftSamples) + shift_sample_offset(t % kShiftSamples, p.h, p.w));
    };
    if constexpr (SHIFT_INPUT) {
#pragma unroll
        for (int k = 0; k < kSamplesAhead; ++k)
            if (lane + 32 * k < kShiftSamples * p.c_in) sample[k] = sample_of(lane + 32 * k);
    }

    // The tile statistics are (mean, M2) of sign * conv without bias (pooling_sign); mean_t below is the conv's
    // mean with the bias (+ d_c: added after the loop, per channel).
    const auto tile_count = [&](int tile) {
        return static_cast<double>(tile_rows_valid(p, tile / p.tiles_x)) * tile_cols_valid(p, tile % p.tiles_x);
    };
    double moment = 0.0;
    for (int e = lane; e < tiles * cpg; e += 32) {
        const int tile = e / cpg, c = grp * cpg + (e - tile * cpg);
        const double mean_t = pooling_sign(p, c) * p.stats[(n * tiles + tile) * p.c_out + c].x +
                              static_cast<double>(__ldg(bias + c));
        moment += tile_count(tile) * mean_t;
    }
    if constexpr (SHIFT_INPUT) {
#pragma unroll
        for (int k = 0; k < kSamplesAhead; ++k)
            if (lane + 32 * k < kShiftSamples * p.c_in) shift_elements[lane + 32 * k] = sample[k];
        for (int t = lane + 32 * kSamplesAhead; t < kShiftSamples * p.c_in; t += 32) shift_elements[t] = sample_of(t);
        __syncwarp();
        for (int ci = lane; ci < p.c_in; ci += 32) shifts[ci] = input_shift_of(shift_elements + ci * kShiftSamples);
        __syncwarp();
        for (int cl = 0; cl < cpg; ++cl) {
            const int c = grp * cpg + cl;
            double d = 0.0;
            for (int ci = lane; ci < p.c_in; ci += 32) {
                const float* w = p.weight + (static_cast<int64_t>(c) * p.c_in + ci) * taps;
                double w_sum = 0.0;
                for (int tap = 0; tap < taps; ++tap) w_sum += static_cast<double>(__ldg(w + tap));
                d += static_cast<double>(shifts[ci]) * w_sum;
            }
            d = warp_sum(d);
            if (lane == 0) {
                offset[cl] = static_cast<double>(__ldg(bias + c)) + d;
                moment += static_cast<double>(p.ho) * p.wo * d;
            }
        }
    } else {
        for (int cl = lane; cl < cpg; cl += 32) offset[cl] = static_cast<double>(__ldg(bias + grp * cpg + cl));
    }
    __syncwarp();  // offset
    const double mean = warp_sum(moment) / group_count;
    double m2 = 0.0;
    for (int e = lane; e < tiles * cpg; e += 32) {
        const int tile = e / cpg, c = grp * cpg + (e - tile * cpg);
        const double2 st = p.stats[(n * tiles + tile) * p.c_out + c];
        const double d = pooling_sign(p, c) * st.x + offset[c - grp * cpg] - mean;
        m2 += st.y + tile_count(tile) * d * d;
    }
    const double rstd = 1.0 / sqrt(warp_sum(m2) / group_count + static_cast<double>(eps));
    for (int cl = lane; cl < cpg; cl += 32) {
        const int c = grp * cpg + cl;
        const float gs = __ldg(p.gamma + c) * __ldg(p.scale + c);
        const double shift = mean - offset[cl];  // mu - bias - d: Q has neither
        const float s_hi = static_cast<float>(shift), s_lo = static_cast<float>(shift - s_hi);
        // `out` holds sign * Q: a * (Q - s) = (sign * a) * (sign * Q - sign * s), negations being exact.
        const float sign = pooling_sign(p, c);
        coef[cl] = make_float4(sign * s_hi, sign * s_lo, sign * static_cast<float>(gs * rstd),
                               __ldg(beta + c) * __ldg(p.scale + c));
    }
    __syncwarp();  // coef
    for (int c0 = 0; c0 < cpg; c0 += kBatch) {
        plan_batch(c0);
        if (c0 > 0) {
            load_words(lane);
            load_edges();
        }
        const auto finish = [&](int u, float v) {
            const float4 k = coef[c0 + u];
            return nan_min(nan_max(fmaf(k.z, (v - k.x) - k.y, k.w), lo), hi);
        };
        for (int v0 = lane; v0 < most; v0 += 32 * kWords) {
            if (v0 != lane) load_words(v0);
#pragma unroll
            for (int w = 0; w < kWords; ++w)
#pragma unroll
                for (int u = 0; u < kBatch; ++u)
                    if (v0 + 32 * w < body[u]) {
                        float4 r = q[w][u];
                        r.x = finish(u, r.x); r.y = finish(u, r.y); r.z = finish(u, r.z); r.w = finish(u, r.w);
                        store_with_policy(reinterpret_cast<float4*>(dst[u] + head[u]) + v0 + 32 * w, r,
                                          l2_policy_evict_first());
                    }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
            if (lane < edges[u]) dst[u][edge_index(u)] = finish(u, edge[u]);
    }
}

// ---------------------------------------------------------------------------------------------
// Host side: the plan (tiling, shared memory), the envelope, the launcher.
// ---------------------------------------------------------------------------------------------

inline std::string str_of(c10::IntArrayRef sizes) {
    std::string text = "(";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + ")";
}

// Per-device facts, read once per device (a forward should not pay for runtime queries).
struct DeviceLimits {
    int smem_optin = 0;  // most dynamic shared memory one block may opt in to (bytes)
    int major = 0;
    int sms = 0;
    bool wgmma = false;  // this build runs wgmma on it (built for sm_90a, a compute capability 9.0 GPU)
};

const DeviceLimits& device_limits(int device) {
    static std::mutex mutex;
    static std::map<int, DeviceLimits> cache;  // map nodes never move: references stay valid
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(device);
    if (it == cache.end()) {
        DeviceLimits limits;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor, device));
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.sms, cudaDevAttrMultiProcessorCount, device));
        if (limits.major == 9) {  // an sm_90a image loads on 9.0 only; ask the loaded image (wgmma_build_probe)
            cudaFuncAttributes probe{};
            C10_CUDA_CHECK(cudaFuncGetAttributes(&probe, wgmma_build_probe));
            limits.wgmma = probe.maxThreadsPerBlock == 128;
        }
        it = cache.emplace(device, limits).first;
    }
    return it->second;
}

struct Plan {
    Params params{};
    int nt = 4;
    bool wgmma = false;  // the GEMM on wgmma from the relaid box
    size_t smem_bytes = 0;
    bool by_phase = false;  // the by-phase kernel applies (where x is 16-byte aligned)
    int phase_steps = 0;    // its k-steps (kPhasePairedSteps or kPhaseMaxSteps)
    size_t phase_smem_bytes = 0;
    std::string problem;  // empty when v3 applies
};

// The by-phase kernel's dynamic shared memory: the weights (`blocks` k8 blocks of 64 channels), two raw boxes, two
// relaid boxes, two stages. Its static shared memory (under kPhaseStaticSmem) comes off the opt-in limit.
constexpr int kPhaseStaticSmem = 12288;
inline size_t phase_smem_bytes(int64_t blocks, int64_t c_in, int64_t pitch, int64_t quad_groups, int64_t plane_units) {
    return static_cast<size_t>(blocks * 512 + 2 * c_in * pitch + 2 * 16 * quad_groups * plane_units +
                               2 * 4 * kPhaseStagePlane) * sizeof(float);
}

// The by-phase plan's k-steps (Params::phase_b, phase_a, phase_halves; 3 x 3 taps over C_in <= 8, one quad group).
// The k halves in order: at C_in <= 4, each tap's quad 0, taps by column then row, so that most slices pair the
// same column in two rows (the same phase plane for every phase, the lower row first); the last, odd one pairs
// with its own quad 1 (zeros). Else each tap's quads 0 and 1. Returns the number of k-steps, or 0 where they or
// their weight blocks would not fit the tables.
int phase_steps_plan(Params& P, int64_t c_in, int64_t kh, int64_t kw, int64_t stride, int64_t plane_units,
                     bool octets = false) {
    std::vector<int> halves;  // tap * 2 + quad
    if (c_in <= 4 || octets) {  // (octets: the fp32 mode's FP16 relaid box, 8 channels per 16 bytes, as one quad)
        for (int64_t kx = 0; kx < kw; ++kx)
            for (int64_t ky = 0; ky < kh; ++ky) halves.push_back(static_cast<int>(2 * (ky * kw + kx)));
        // The odd one out pairs with its own quad 1, all zeros in the TF32 layout. The octet layout has no zero
        // quad (the lo box lies there), so its pair is marked -1: the same words again (LBO 0), zero weights.
        if (halves.size() % 2) halves.push_back(octets ? -1 : halves.back() + 1);
    } else {
        for (int64_t tap = 0; tap < kh * kw; ++tap) {
            halves.push_back(static_cast<int>(2 * tap));
            halves.push_back(static_cast<int>(2 * tap + 1));
        }
    }
    const int64_t steps = static_cast<int64_t>(halves.size()) / 2;
    if (steps > kPhaseMaxSteps) return 0;
    // The relaid box's word of a half's first position for phase v (as Params::wgmma_taps' offsets).
    const auto word = [&](int half, int64_t v) {
        const int64_t tap = half >> 1, quad = half & 1, ky = tap / kw, kx = tap % kw;
        return (4 * quad + (v + kx) % 4) * plane_units + ky * (stride / 4) + (v + kx) / 4;
    };
    std::vector<std::pair<int, int>> blocks;
    const auto block_of = [&](int first, int second) {
        for (size_t b = 0; b < blocks.size(); ++b)
            if (blocks[b] == std::make_pair(first, second)) return static_cast<int>(b);
        blocks.emplace_back(first, second);
        return static_cast<int>(blocks.size()) - 1;
    };
    for (int64_t s = 0; s < steps; ++s) {
        int b_off[4], a_off[4];
        for (int64_t v = 0; v < 4; ++v) {
            int first = halves[2 * s], second = halves[2 * s + 1];
            if (second >= 0 && word(second, v) < word(first, v)) std::swap(first, second);  // wgmma's LBO is unsigned
            const int64_t lbo = second >= 0 ? word(second, v) - word(first, v) : 0;
            b_off[v] = static_cast<int>(word(first, v) | (lbo << 16));
            a_off[v] = 128 * block_of(first, second);
        }
        P.phase_b[s] = make_int4(b_off[0], b_off[1], b_off[2], b_off[3]);
        P.phase_a[s] = make_int4(a_off[0], a_off[1], a_off[2], a_off[3]);
    }
    if (blocks.size() > static_cast<size_t>(kPhaseMaxBlocks)) return 0;
    if (steps == kPhaseMaxSteps)  // the kernel's immediate A offsets there: block s is k-step s for every phase
        for (int64_t s = 0; s < steps; ++s)
            if (P.phase_a[s].x != 128 * s || P.phase_a[s].y != 128 * s || P.phase_a[s].z != 128 * s ||
                P.phase_a[s].w != 128 * s)
                return 0;
    for (size_t b = 0; b < blocks.size(); ++b) P.phase_halves[b] = make_int2(blocks[b].first, blocks[b].second);
    P.phase_blocks = static_cast<int>(blocks.size());
    return static_cast<int>(steps);
}

// Everything but the pointers, from the sizes; `problem` says why v3 does not apply. The shared-memory
// check uses the fp32 mode's (larger) footprint, so the envelope does not depend on allow_tf32. The GEMM runs
// on wgmma from the relaid box (plan.wgmma) where allowed, the build has wgmma (sm_90a), the chunks are 32
// channels, BS % 4 == 0, at most kMaxWgmmaSteps k-steps and its footprint fits; else on mma.sync.
Plan make_plan(int64_t h, int64_t w, int64_t c_in, int64_t c_out, int64_t kh, int64_t kw, int64_t pool, int device,
               bool split3, bool allow_wgmma = true, bool allow_by_phase = true) {
    Plan plan;
    const DeviceLimits& limits = device_limits(device);
    auto refuse = [&](std::string why) {
        plan.problem = std::move(why);
        return plan;
    };
    if (limits.major < 8) return refuse("needs compute capability 8.0 or newer (mma.sync TF32)");
    if (kh < 1 || kh > kMaxKernel || kw < 1 || kw > kMaxKernel)
        return refuse("the kernel must be 1.." + std::to_string(kMaxKernel) + " on each side, got " +
                      std::to_string(kh) + " x " + std::to_string(kw));
    if (c_in < 1 || c_out < 1) return refuse("C_in and C_out must be >= 1");
    if (pool < 1 || pool > kMaxPool) return refuse("pool must be in 1.." + std::to_string(kMaxPool));
    if (h < kh || w < kw) return refuse("the input is smaller than the kernel");
    const int64_t ho = h - kh + 1, wo = w - kw + 1;
    if (pool > ho || pool > wo) return refuse("the pool window is larger than the conv output");
    if (c_in * h * w >= (int64_t{1} << 31)) return refuse("a sample has 2^31 or more input elements");

    // Tile: R = P * PR rows by whole input rows when P * W <= kRows, else by TX = P * PX columns.
    int64_t rows, cols, stride, tiles_x;
    bool whole_rows;
    if (pool * w <= kRows) {
        whole_rows = true;
        stride = w;
        cols = wo;
        tiles_x = 1;
        rows = std::min(pool * (kRows / (pool * w)), (ho + pool - 1) / pool * pool);
    } else {
        whole_rows = false;
        const int64_t px = (kRows / pool - (kw - 1)) / pool;  // >= 1: P * (P + kw - 1) <= 16 * 22 < 512
        cols = pool * px;
        stride = cols + kw - 1;
        // For P in {2, 4, 8, 16}, a stride that P divides lets windows pool along x in registers. It stays
        // <= kRows / P (a multiple of P), so a tile still has at least P rows.
        if (pool == 2 || pool == 4 || pool == 8 || pool == 16) stride = (stride + pool - 1) / pool * pool;
        tiles_x = (wo + cols - 1) / cols;
        rows = pool * std::max<int64_t>(1, kRows / (pool * stride));
        rows = std::min(rows, (ho + pool - 1) / pool * pool);
    }
    const int64_t tiles_y = (ho + rows - 1) / rows;
    const int64_t K = c_in * kh * kw;
    const int64_t ksteps = (K + 7) / 8;
    const int nt = c_out <= 8 ? 1 : (c_out <= 16 ? 2 : 4);
    const int64_t chunks = (c_out + 8 * nt - 1) / (8 * nt);
    // Rows the warps read: up to kRows - 1 plus the last tap's offset.
    const int64_t pitch = (kRows + (kh - 1) * stride + (kw - 1) + 3) / 4 * 4;
    if (ksteps >= (1 << 20) || c_in * pitch >= (int64_t{1} << 28))
        return refuse("C_in * kh * kw = " + std::to_string(K) + " is too large");
    // Pooling along x in registers where P and the stride allow and its (x-pooled, all channels) stage fits;
    // else the general pooling through an 8-channel stage.
    const int64_t budget = limits.smem_optin - kStaticSmemReserve;
    const auto smem_for = [&](bool split3_mode, bool x_pooled) {
        return SmemLayout{nt, split3_mode, false}.total(static_cast<int>(ksteps), static_cast<int>(c_in),
                                                        static_cast<int>(pitch), 0, x_pooled,
                                                        x_pooled ? kRows / static_cast<int>(pool) + 4 : kStageStride);
    };
    bool pool_in_registers = (pool == 2 || pool == 4 || pool == 8 || pool == 16) && stride % pool == 0;
    if (pool_in_registers && static_cast<int64_t>(smem_for(true, true)) > budget) pool_in_registers = false;
    const size_t bytes_fp32 = smem_for(true, pool_in_registers);
    if (static_cast<int64_t>(bytes_fp32) > budget)
        return refuse("the input box and weights (C_in * kh * kw = " + std::to_string(K) + ") need " +
                      std::to_string(bytes_fp32) + " bytes of shared memory, more than the " + std::to_string(budget) +
                      " this GPU gives a block");

    Params& P = plan.params;
    P.c_in = static_cast<int>(c_in); P.c_out = static_cast<int>(c_out);
    P.kh = static_cast<int>(kh); P.kw = static_cast<int>(kw);
    P.h = static_cast<int>(h); P.w = static_cast<int>(w);
    P.ho = static_cast<int>(ho); P.wo = static_cast<int>(wo);
    P.hp = static_cast<int>(ho / pool); P.wp = static_cast<int>(wo / pool);
    P.pool = static_cast<int>(pool);
    P.tile_rows = static_cast<int>(rows); P.tile_cols = static_cast<int>(cols);
    P.box_stride = static_cast<int>(stride); P.box_pitch = static_cast<int>(pitch);
    P.tiles_y = static_cast<int>(tiles_y); P.tiles_x = static_cast<int>(tiles_x);
    P.pooled_tile_rows = static_cast<int>(rows / pool); P.pooled_tile_cols = static_cast<int>(cols / pool);
    P.chunks = static_cast<int>(chunks);
    P.ksteps = static_cast<int>(ksteps);
    P.whole_rows = whole_rows ? 1 : 0;
    P.pool_in_registers = pool_in_registers ? 1 : 0;
    P.stage_stride = pool_in_registers ? kRows / static_cast<int>(pool) + 4 : kStageStride;
    P.bulk_copy = (limits.major >= 9 && whole_rows && w % 4 == 0) ? 1 : 0;  // forward also needs x 16-byte aligned
    plan.nt = nt;
    plan.smem_bytes = smem_for(split3, pool_in_registers);

    // The relaid box: C_in padded to 8 (two quads per k8 slice), four phase planes per quad, each the words
    // the GEMM reads: u < kRows / 4 plus the last tap's (ky BS + kx + phase) / 4.
    const int64_t quad_groups = (c_in + 7) / 8 * 2;
    const int64_t plane_units = kRows / 4 + (kh - 1) * (stride / 4) + (kw + 2) / 4;
    const bool paired = c_in <= 4;  // Params::paired_taps
    const int64_t ksteps_ss = paired ? kw * ((kh + 1) / 2) : kh * kw * (quad_groups / 2);
    const size_t bytes_ss = SmemLayout{nt, split3, true}.total(
        static_cast<int>(ksteps_ss), static_cast<int>(c_in), static_cast<int>(pitch),
        static_cast<int>(16 * quad_groups * plane_units), pool_in_registers, P.stage_stride);
    if (allow_wgmma && nt == 4 && limits.wgmma && stride % 4 == 0 && ksteps_ss <= kMaxWgmmaSteps &&
        static_cast<int64_t>(bytes_ss) <= budget) {
        plan.wgmma = true;
        plan.smem_bytes = bytes_ss;
        P.ksteps = static_cast<int>(ksteps_ss);
        P.quad_groups = static_cast<int>(quad_groups);
        P.quad_plane_units = static_cast<int>(plane_units);
        const int64_t quads8 = quad_groups / 2, pair_rows = (kh + 1) / 2;
        P.paired_taps = paired ? 1 : 0;
        for (int64_t s = 0; s < ksteps_ss; ++s) {
            const int64_t tap = s / quads8, q = s % quads8;
            const int64_t kx = paired ? s / pair_rows : tap % kw, ky = paired ? 2 * (s % pair_rows) : tap / kw;
            // from the first k half to the second: one box row, or the next quad (4 phase planes); the fp32 mode's
            // unpaired A loads add the quad's offset themselves (a plain entry there)
            const int64_t lbo = (split3 && !paired) ? 0 : (paired && ky + 1 < kh) ? stride / 4 : 4 * plane_units;
            int off[4];
            for (int64_t v = 0; v < 4; ++v)
                off[v] = static_cast<int>((8 * q + (v + kx) % 4) * plane_units + ky * (stride / 4) + (v + kx) / 4 +
                                          (lbo << 16));
            P.wgmma_taps[s] = make_int4(off[0], off[1], off[2], off[3]);
        }
        // The by-phase kernel (conv_stats_pool_by_phase_kernel) for its shape family: 4 conv rows of
        // whole 128-wide input rows per tile (N = 128 positions per phase), windows of 4 (the phases), 3 x 3 taps
        // over at most 8 input channels (9 k-steps, 5 at C_in <= 4; the relay one 16-byte item per thread), 33..64
        // output channels (one m64; fewer run the 32-channel chunks, which waste less), TMA bulk copies.
        // The fp32 mode's by-phase kernel splits its operands into FP16 hi and lo (k16 products, 8 channels per
        // 16 bytes): always the paired plan, with hi and lo weight blocks.
        if (allow_by_phase && pool == 4 && whole_rows && w == 128 && kh == 3 && kw == 3 && c_in <= 8 &&
            c_out > 32 && c_out <= 64 && rows == 4 && quad_groups == 2 && P.bulk_copy) {
            const int steps = phase_steps_plan(P, c_in, kh, kw, stride, plane_units, split3);
            const int blocks = split3 ? 2 * kPhasePairedBlocks
                                      : steps == kPhaseMaxSteps ? kPhaseMaxSteps : kPhaseMaxBlocks;  // the kBlocks
            const size_t phase_bytes = phase_smem_bytes(blocks, c_in, pitch, quad_groups, plane_units);
            const bool instantiated = split3 ? steps == kPhasePairedSteps && P.phase_blocks <= kPhasePairedBlocks
                                             : steps == kPhasePairedSteps || steps == kPhaseMaxSteps;
            if (instantiated && static_cast<int64_t>(phase_bytes) <= limits.smem_optin - kPhaseStaticSmem) {
                plan.by_phase = true;
                plan.phase_steps = steps;
                plan.phase_smem_bytes = phase_bytes;
            }
        }
    }
    return plan;
}

using KernelFn = void (*)(Params);

// The instantiation for a plan's n-tiles and accuracy mode.
KernelFn kernel_for(const Plan& plan, bool split3) {
    if (plan.wgmma) {  // the fp32 mode's paired taps in an instantiation of their own, which leaves the other plans'
                       // code as it was (builds that decoded the tap entries in every plan ran the KernelBench size
                       // 1.2-1.4 % slower on an H100, results/model_b/NOTES.md)
        if (!split3) return conv_stats_pool_kernel<4, false, true>;
        return plan.params.paired_taps ? conv_stats_pool_kernel<4, true, true, true> : conv_stats_pool_kernel<4, true, true>;
    }
    switch (plan.nt) {
        case 1: return split3 ? conv_stats_pool_kernel<1, true, false> : conv_stats_pool_kernel<1, false, false>;
        case 2: return split3 ? conv_stats_pool_kernel<2, true, false> : conv_stats_pool_kernel<2, false, false>;
        default: return split3 ? conv_stats_pool_kernel<4, true, false> : conv_stats_pool_kernel<4, false, false>;
    }
}

// The by-phase kernel's instantiation for the plan's k-steps and accuracy mode.
KernelFn phase_kernel_for(const Plan& plan, bool split3) {
    if (split3) return conv_stats_pool_by_phase_kernel<kPhasePairedSteps, true>;
    return plan.phase_steps == kPhasePairedSteps ? conv_stats_pool_by_phase_kernel<kPhasePairedSteps, false>
                                                 : conv_stats_pool_by_phase_kernel<kPhaseMaxSteps, false>;
}

// CTAs of `kernel` (blocks of `threads`) with `smem` bytes of dynamic shared memory that fit on the device at once,
// after raising its dynamic shared-memory limit to the opt-in maximum less its static shared memory; cached per
// (kernel, device, smem). The persistent grid is this many CTAs (or fewer, for small problems).
int resident_ctas(KernelFn kernel, int threads, int device, size_t smem) {
    static std::mutex mutex;
    static std::map<std::tuple<KernelFn, int, size_t>, int> cache;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(kernel, device, smem);
    auto it = cache.find(key);
    if (it == cache.end()) {
        cudaFuncAttributes attributes{};
        C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            device_limits(device).smem_optin - static_cast<int>(attributes.sharedSizeBytes)));
        int per_sm = 0;
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
        TORCH_CHECK(per_sm >= 1, "forward: the v3 kernel cannot be resident with ", std::to_string(smem),
                    " bytes of shared memory on this GPU");
        it = cache.emplace(key, per_sm * device_limits(device).sms).first;
    }
    return it->second;
}

// CTAs of the persistent grid: a multiple of the channel chunks, at most one per (unit, chunk).
int64_t grid_ctas(const Plan& plan, int64_t batch, bool split3, int device) {
    const Params& P = plan.params;
    const int64_t units = batch * P.tiles_y * P.tiles_x;
    const int64_t resident = resident_ctas(kernel_for(plan, split3), kThreads, device, plan.smem_bytes);
    return std::min(units, std::max<int64_t>(1, resident / P.chunks)) * P.chunks;
}

// CTAs of the by-phase kernel's persistent grid (one per SM at the KernelBench size), at most one per tile.
int64_t phase_grid_ctas(const Plan& plan, int64_t batch, bool split3, int device) {
    const int64_t tiles = batch * plan.params.tiles_y * plan.params.tiles_x;
    return std::min<int64_t>(tiles, resident_ctas(phase_kernel_for(plan, split3), kPhaseThreads, device,
                                                  plan.phase_smem_bytes));
}

std::string unsupported_reason(int64_t h, int64_t w, int64_t batch, int64_t c_in, int64_t c_out, int64_t kh,
                               int64_t kw, int64_t pool, int64_t device) {
    TORCH_CHECK(device >= 0 && device < c10::cuda::device_count(), "unsupported_reason: no CUDA device ",
                std::to_string(device));
    (void)batch;  // any batch works; kept so the signature matches model A's
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    return make_plan(h, w, c_in, c_out, kh, kw, pool, static_cast<int>(device), true).problem;
}

void check_operand(const char* name, const torch::Tensor& t, const torch::Tensor& x) {
    TORCH_CHECK(t.device() == x.device(), "forward: ", name, " must be on ", x.device().str(), ", got ",
                t.device().str());
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, "forward: ", name, " must be float32, got ",
                c10::toString(t.scalar_type()));
    TORCH_CHECK(t.is_contiguous(), "forward: ", name, " must be contiguous");
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                      const torch::Tensor& gamma, const torch::Tensor& beta, const torch::Tensor& scale,
                      int64_t groups, int64_t pool, double clamp_min, double clamp_max, double eps,
                      bool allow_tf32, torch::Tensor out, bool wgmma, bool by_phase) {
    TORCH_CHECK(x.is_cuda(), "forward: x must be a CUDA tensor, got one on ", x.device().str());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "forward: x must be float32, got ", c10::toString(x.scalar_type()));
    TORCH_CHECK(x.dim() == 4, "forward: x must be 4-D (N, C_in, H, W), got shape ", str_of(x.sizes()));
    TORCH_CHECK(x.is_contiguous(), "forward: x must be contiguous (NCHW)");
    check_operand("weight", weight, x);
    check_operand("out", out, x);
    const int64_t N = x.size(0), c_in = x.size(1), H = x.size(2), W = x.size(3);
    TORCH_CHECK(weight.dim() == 4 && weight.size(1) == c_in,
                "forward: weight must be (C_out, C_in, kh, kw) with C_in = ", std::to_string(c_in), ", got shape ",
                str_of(weight.sizes()));
    const int64_t c_out = weight.size(0), kh = weight.size(2), kw = weight.size(3);
    const std::pair<const char*, const torch::Tensor*> per_channel[] = {
        {"bias", &bias}, {"gamma", &gamma}, {"beta", &beta}, {"scale", &scale}};
    for (const auto& [name, t] : per_channel) {
        check_operand(name, *t, x);
        TORCH_CHECK(t->numel() == c_out, "forward: ", name, " must hold one value per output channel (",
                    std::to_string(c_out), "), got shape ", str_of(t->sizes()));
    }
    TORCH_CHECK(groups >= 1 && c_out % groups == 0, "forward: groups (", std::to_string(groups),
                ") must divide C_out (", std::to_string(c_out), ")");
    TORCH_CHECK(eps > 0.0, "forward: eps must be > 0, got ", std::to_string(eps));
    const int device = x.get_device();
    const c10::cuda::CUDAGuard device_guard(x.device());
    const bool split3 = !allow_tf32;
    const bool shift_input = split3;  // the fp32 mode convolves x - r(n, ci), and kernel 2 adds d back
    Plan plan = make_plan(H, W, c_in, c_out, kh, kw, pool, device, split3, wgmma, by_phase);
    TORCH_CHECK(plan.problem.empty(), "forward: outside v3's envelope: ", plan.problem);
    Params& P = plan.params;
    TORCH_CHECK(out.dim() == 4 && out.size(0) == N && out.size(1) == c_out && out.size(2) == P.hp &&
                    out.size(3) == P.wp,
                "forward: out must have shape (N, C_out, Ho / pool, Wo / pool) = ",
                str_of({N, c_out, P.hp, P.wp}), ", got ", str_of(out.sizes()));
    const int64_t tiles = static_cast<int64_t>(P.tiles_y) * P.tiles_x;
    TORCH_CHECK(N < (int64_t{1} << 31) && N * groups < (int64_t{1} << 31),
                "forward: batch too large: ", std::to_string(N));
    // Launch 2: one warp per (sample, group), up to 8 per block as its shared memory allows (48 KB).
    const size_t finish_bytes =
        finish_smem_bytes(static_cast<int>(c_out / groups), static_cast<int>(c_in), shift_input);
    TORCH_CHECK(finish_bytes <= 48 * 1024, "forward: too many channels per group (", std::to_string(c_out / groups),
                ") or input channels (", std::to_string(c_in), ") for the finishing launch's 48 KB of shared memory");
    const int finish_warps = static_cast<int>(std::min<size_t>(kFinalThreads / 32, 48 * 1024 / finish_bytes));
    if (N == 0) return out;

    auto stats = torch::empty({N, tiles, c_out, 2}, x.options().dtype(torch::kFloat64));
    P.x = x.data_ptr<float>();
    P.weight = weight.data_ptr<float>();
    P.gamma = gamma.data_ptr<float>();
    P.scale = scale.data_ptr<float>();
    P.out = out.data_ptr<float>();
    P.stats = reinterpret_cast<double2*>(stats.data_ptr<double>());
    if (reinterpret_cast<uintptr_t>(P.x) % 16 != 0) P.bulk_copy = 0;  // bulk copies need 16-byte aligned sources

    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    P.batch = static_cast<int>(N);
    const bool phases = plan.by_phase && P.bulk_copy;  // (bulk copies need x 16-byte aligned)
    if (phases) P.chunks = 1;                           // a CTA takes all channels of a tile
    const int64_t tiles_per_sample = static_cast<int64_t>(P.tiles_y) * P.tiles_x;
    const int64_t ctas = phases ? phase_grid_ctas(plan, N, split3, device) : grid_ctas(plan, N, split3, device);
    const int64_t unit_stride = ctas / P.chunks, stride_tile = unit_stride % tiles_per_sample;
    P.step_n = static_cast<int>(unit_stride / tiles_per_sample);
    P.step_ty = static_cast<int>(stride_tile / P.tiles_x);
    P.step_tx = static_cast<int>(stride_tile % P.tiles_x);
    if (phases)
        phase_kernel_for(plan, split3)<<<static_cast<unsigned>(ctas), kPhaseThreads, plan.phase_smem_bytes, stream>>>(P);
    else
        kernel_for(plan, split3)<<<static_cast<unsigned>(ctas), kThreads, plan.smem_bytes, stream>>>(P);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    (shift_input ? finish_kernel<true> : finish_kernel<false>)<<<
        static_cast<unsigned>((N * groups + finish_warps - 1) / finish_warps), 32 * finish_warps,
        finish_warps * finish_bytes, stream>>>(P, bias.data_ptr<float>(), beta.data_ptr<float>(),
                                               static_cast<int>(groups), finish_warps, static_cast<float>(eps),
                                               static_cast<float>(clamp_min), static_cast<float>(clamp_max));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

// The plan's choices, for notebooks and tests.
std::map<std::string, int64_t> plan_info(int64_t h, int64_t w, int64_t batch, int64_t c_in, int64_t c_out, int64_t kh,
                                          int64_t kw, int64_t pool, bool allow_tf32, int64_t device, bool wgmma,
                                          bool by_phase) {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    const Plan plan = make_plan(h, w, c_in, c_out, kh, kw, pool, static_cast<int>(device), !allow_tf32, wgmma,
                                by_phase);
    TORCH_CHECK(plan.problem.empty(), "plan_info: outside v3's envelope: ", plan.problem);
    const Params& P = plan.params;
    const int64_t tiles = static_cast<int64_t>(P.tiles_y) * P.tiles_x;
    if (plan.by_phase)  // (for a 16-byte aligned x, as PyTorch allocates it)
        return {{"tile_rows", P.tile_rows}, {"tile_cols", P.tile_cols}, {"box_stride", P.box_stride},
                {"tiles_per_sample", tiles}, {"channel_chunks", 1}, {"n_tiles", 8}, {"k_steps", plan.phase_steps},
                {"smem_bytes", static_cast<int64_t>(plan.phase_smem_bytes)}, {"pool_in_registers", 1},
                {"bulk_copy", 1},
                {"ctas", phase_grid_ctas(plan, batch, !allow_tf32, static_cast<int>(device))},
                {"gemm_rows_per_cta", kRows}, {"wgmma", 1}, {"by_phase", 1},
                {"phase_weight_blocks", P.phase_blocks}};
    return {{"tile_rows", P.tile_rows}, {"tile_cols", P.tile_cols}, {"box_stride", P.box_stride},
            {"tiles_per_sample", tiles}, {"channel_chunks", P.chunks}, {"n_tiles", plan.nt},
            {"k_steps", P.ksteps}, {"smem_bytes", static_cast<int64_t>(plan.smem_bytes)},
            {"pool_in_registers", P.pool_in_registers}, {"bulk_copy", P.bulk_copy},
            {"ctas", grid_ctas(plan, batch, !allow_tf32, static_cast<int>(device))}, {"gemm_rows_per_cta", kRows},
            {"wgmma", plan.wgmma ? 1 : 0}, {"by_phase", 0}};
}

// The fp32 mode's input_shift rule and its sample offsets, run on the host: for tests (the kernels' own code,
// checked without a GPU) and for readers who want to see which r a plane gets.
double input_shift_rule(const std::vector<double>& samples) {
    TORCH_CHECK(samples.size() == static_cast<size_t>(kShiftSamples), "input_shift_rule: samples must hold " +
                std::to_string(kShiftSamples) + " values, got " + std::to_string(samples.size()));
    float e[kShiftSamples];
    for (int j = 0; j < kShiftSamples; ++j) e[j] = static_cast<float>(samples[j]);
    return input_shift_of(e);
}
std::vector<int64_t> shift_samples(int64_t rows, int64_t cols) {
    TORCH_CHECK(rows >= 1 && cols >= 1 && rows * cols < (int64_t{1} << 31),
                "shift_samples: rows and cols must be >= 1 with a product < 2^31");
    std::vector<int64_t> out;
    for (int j = 0; j < kShiftSamples; ++j)
        out.push_back(shift_sample_offset(j, static_cast<int>(rows), static_cast<int>(cols)));
    return out;
}

}  // namespace model_b_v3

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-85 v3: Conv2d -> GroupNorm -> *scale -> MaxPool2d -> clamp, conv inside the kernel";
    m.def("unsupported_reason", &model_b_v3::unsupported_reason,
          "'' when v3 handles this configuration on `device`, else why not", py::arg("h"), py::arg("w"),
          py::arg("batch"), py::arg("c_in"), py::arg("c_out"), py::arg("kh"), py::arg("kw"), py::arg("pool"),
          py::arg("device"));
    m.def("forward", &model_b_v3::forward,
          "out = clamp(maxpool(scale * groupnorm(conv2d(x) + bias))), the conv never in device memory",
          py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("gamma"), py::arg("beta"), py::arg("scale"),
          py::arg("groups"), py::arg("pool"), py::arg("clamp_min"), py::arg("clamp_max"), py::arg("eps"),
          py::arg("allow_tf32"), py::arg("out"), py::arg("wgmma") = true, py::arg("by_phase") = true);
    m.def("plan_info", &model_b_v3::plan_info, "the tiling v3 picks for these sizes", py::arg("h"), py::arg("w"),
          py::arg("batch"), py::arg("c_in"), py::arg("c_out"), py::arg("kh"), py::arg("kw"), py::arg("pool"),
          py::arg("allow_tf32"), py::arg("device"), py::arg("wgmma") = true, py::arg("by_phase") = true);
    m.def("input_shift_rule", &model_b_v3::input_shift_rule,
          "fp32 mode: input_shift's r from a plane's 16 samples (as floats), computed on the host by the kernel's rule",
          py::arg("samples"));
    m.def("shift_samples", &model_b_v3::shift_samples,
          "fp32 mode: the flat offsets of input_shift's samples in a (rows, cols) plane", py::arg("rows"),
          py::arg("cols"));
}

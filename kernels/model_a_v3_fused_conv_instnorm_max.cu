// model_a_v3_fused_conv_instnorm_max.cu -- KernelBench L2-79, version 3: the whole model in one launch.
//
// What it computes
//   The reference model (kernels/model_a_conv3d_instnorm_clamp_max.py) is
//       y = conv3d(x, weight, bias);  z = y * m;  z = instance_norm(z);  z = clamp(z, lo, hi);  z = z * m;
//       out = z.max(dim=1)
//   with one multiplier m_c per output channel (any sign, zero allowed), stride 1, no padding. This
//   kernel reads x once, computes the conv on tensor cores, keeps it in registers while the
//   InstanceNorm statistics are reduced across the CTAs of a thread-block cluster, and writes only
//   `out`: the conv output (16 x 14 x 30 x 30 floats, 806 KB per sample at the KernelBench size)
//   never reaches device memory.
//
// The math
//   As in v1 (model_a_v1_fused_tail.cu): with mu, var the mean and biased variance of the conv output
//   y of plane (n, c),  InstanceNorm(m y) = (y - mu) * a,  a = m / sqrt(m^2 var + eps), so
//       out[n, s] = max_c  m_c * clamp((y[n, c, s] - mu_c) * a_c, lo, hi).
//   InstanceNorm removes any per-channel constant, so the conv bias cannot change `out`: it is not
//   read. y - mu is evaluated as (y - mu_hi) - mu_lo with mu = mu_hi + mu_lo two floats, so a large
//   common offset (inputs shifted by +100) costs no accuracy. The multiplier is folded in:
//   m * clamp(z, lo, hi) = clamp(m z, L, H) with [L, H] = m * [lo, hi] in increasing order, so the
//   epilogue computes clamp((y - mu) * s, L, H) with s = a m, one multiply per value.
//   The fp32 mode convolves x - r(n, ci) instead of x, r a value of the plane itself where the plane sits at an
//   offset (input_shift: the median of three central samples of a 4 x 4 interior grid where at least 12 of the 16
//   samples agree with it to half its magnitude, else 0). The conv is linear and valid (every output reads every
//   tap), so this changes y[n, c, :] by the constant sum_ci r(n, ci) sum_taps w(c, ci, taps), which InstanceNorm
//   removes like the bias: `out` is unchanged in exact arithmetic. What it buys is accuracy under a common offset:
//   the split below represents each operand to about 2^-22 of itself, and with inputs at +100 that is 2^-22 of 100
//   per element for x, but of about 1 for x - r. Without it the fp32 mode's error at +100 was that of the float32
//   yardstick (at the KernelBench size 3.1e-5 against 3.4e-5), and the fuzz found it over the fp32 bar (4x the
//   yardstick's) on about 1 in 2 000 configurations with few taps; with it, 1.6e-7 (results/model_a/NOTES.md).
//   Flat implicit GEMM: with stride 1 and no padding, output (od, oh, ow) reads input flat index
//   q + off(ci, kd, kh, kw), q = (od * H + oh) * W + ow, off = ci * plane + (kd * H + kh) * W + kw. So the
//   kernel treats the Do x H x W flat positions q of a sample as GEMM rows (those with oh >= Ho or
//   ow >= Wo are computed and dropped: 14 % extra rows at the KernelBench size), the K = C_in * k^3
//   taps as the reduction (padded to a multiple of 8 with zero weights) and C_out as the columns.
//   A row's input address is its flat index plus a per-tap constant: no index arithmetic per tap.
//   kh reuse (W a multiple of 16, k = 2 or 3; the KernelBench size): tap (ci, kd, kh, kw) of row q reads the
//   word that tap (ci, kd, 0, kw) reads for row q + kh W. A warp that owns the same 16 columns of consecutive
//   lines (od H + oh) therefore loads each A fragment once and multiplies it into the tiles of up to k lines,
//   with the weights of the k kernel rows in registers: 9 fragment loads per tap step instead of 21 at the
//   KernelBench size, for 12 k-steps of mma instead of 11 (warp_gemm_kh_reuse).
//   Tensor cores, fp32 accumulation. The fp32-accurate default: mma.sync m16n8k16 with FP16 operands, each
//   operand v (scaled by a power of two so that FP16's 5-bit exponent neither overflows nor underflows: per CTA
//   and sample for the input, per output channel for the weights; undone exactly on the accumulators) split
//   into v = hi + lo, two FP16 numbers, and lo*hi + hi*lo + hi*hi added per k16 step: an error of about 2^-22
//   of each product, as "3xTF32" (FP16 and TF32 have the same 11-bit significand) at half the mma
//   instructions, since FP16's mma takes k16 in the time TF32's takes k8 (the fp32 mode measured 12-15 % faster
//   than with 3xTF32 at the KernelBench size). For up to 16 k8 steps (C_in k^3 <= 128; the KernelBench size has
//   11) straight into the accumulator, beyond that into a partial sum started from zero per k16 step and added
//   to the accumulator in fp32 (the tensor cores' own accumulation truncates, and its error grows with the
//   k-steps: see warp_gemm). The TF32 mode (allow_tf32) does one m16n8k8 TF32 product per k8 step, like cuDNN
//   with allow_tf32: weights rounded to TF32, inputs truncated to TF32 by the tensor cores (see
//   load_a_fragment); FP16 operands there measured 12 % slower (the scaling and conversion cost more than the
//   halved mma saved). The fp32 kernel is large enough to wait on instruction fetch, so its most common GEMM
//   (kh reuse, k = 3, products summed in the tensor cores: the KernelBench size's) has instantiations of its
//   own, a third smaller (kGemmKh3TensorCoreSum; 5 % faster at the KernelBench size, 12 % at batch 1). At
//   small batches a plan of 4 tiles per warp (a third of the straight-line statistics and epilogue code per
//   warp, which a sample's single pass fetches cold) took the fp32 mode 21 % faster at batches 1-4 of the
//   KernelBench size, the TF32 mode 3 % (see mt_choices).
//   Statistics: each warp sums its valid rows per channel (giving its own centre c, its mean), then
//   sums (y - c) and (y - c)^2, all from registers and shuffles; sixteen lanes per channel combine the
//   warps' (count, mean, M2) in float64 (no division: the inverse counts are computed once) and store the
//   CTA's (count, mean, M2) into every CTA of the cluster (distributed shared memory, st.async stores that
//   count their bytes off an mbarrier in the receiving CTA); each CTA waits on its own mbarrier and merges
//   them the same way (mean, then M2 about it: Chan et al.'s update).
//
// Tiling
//   Persistent clusters of `cluster` CTAs (1..16): as many clusters as fit on the GPU at once (at most
//   N), cluster i computing samples i, i + clusters, ... in turn. CTA r of a cluster owns the flat
//   rows [r * S, (r + 1) * S) of each sample, S = 16 * tiles_per_cta. A warp owns MT consecutive m16
//   tiles (with kh reuse: MT tiles W rows apart, the same 16 columns of MT consecutive lines, W / 16 warps
//   side by side) x NT n8 tiles (NT = 1, 2, 4 for C_out <= 8, 16, 32; MT * NT = 16, or 14 for NT = 1, 2: 64 or
//   56 accumulators per thread); a CTA has ceil(tiles_per_cta / MT) <= 16 warps. The host picks MT and
//   the cluster size with the least estimated time (choose_plan_uncached): waves and SM sharing from the
//   occupancy API (clusters must fit in one GPC, which leaves SMs idle for some sizes; a batch smaller than
//   the clusters that fit runs one cluster per sample), a CTA's warps best spread evenly over the SM's 4
//   schedulers, and a fitted per-CTA cost that falls with its warps: 8 CTAs of 16 warps of 7 tiles (1792
//   rows each) at the KernelBench size on an H100; scripts/plan_sweep_model_a.py times every plan.
//   Shared memory per CTA (besides the fp32 mode's r(n, ci) of two samples): the input box
//   x[n, :, r * S + (0 .. rows + halo)] (halo = (k-1)(H W + W + 1);
//   zeros past the sample's end; one bulk copy (TMA) per channel where D H W % 4 == 0, cp.async of 4-byte
//   elements elsewhere), as float: the GEMM loads A elements as they are (TF32 mode) or scales and splits
//   them into FP16 hi and lo in registers (fp32 mode). Two boxes where they fit: the next sample's box is
//   requested into the other one as soon as this one has arrived, so it loads while this sample is computed
//   (where only one fits, it loads after the sample before). The weight fragments, pre-split; the tap offsets
//   per tap step (during the set-up first each tap's index in the weights); each row's output offset (-1:
//   dropped); the cluster's statistics, two slots (sample parity) with an mbarrier each. All but the box are
//   computed once per CTA.
//
// Speed (H100 80GB HBM3, KernelBench size, results/model_a/): about 0.126 ms fp32-accurate and 0.080 ms
//   TF32 (3.9x and 6.1x torch.compile in a probe run; the notebook's timing.csv is the run of record), far
//   from the floors (0.08 ms for the conv at the FP32 FFMA rate). Each cluster computes 8-9 samples in turn
//   (15 clusters of 8 CTAs fit on 132 SMs), about 13 us (fp32) and 8 us (TF32) each, plus about 9 us per
//   forward that nothing hides (launch, set-up, the first box). No unit is saturated (ncu with kh reuse,
//   before the bulk copies and the FP16 split: instructions issued in
//   45 % (TF32) and 42 % (fp32) of the scheduler cycles, 0.9 eligible warps of 4, the tensor pipe active 24 %
//   and 41 % of the cycles): each warp waits on its own chain of shared loads, mma, shuffles and the cluster's
//   statistics exchange (15 % of the TF32 stall samples). kh reuse loads 57 % fewer A fragments and measured
//   about 5 % (fp32) and 7 % (TF32) faster; the box by bulk copies instead of 16-byte cp.async per thread (9 % of
//   the TF32 kernel's instructions) 2 % and 6 %. Two samples per CTA, one per half of the warps taking turns at
//   the GEMM, measured slower (NOTES).
//   results/model_a/NOTES.md has the measurements and what to try next.

// Shapes and layouts
//   x       : (N, C_in, D, H, W) float32, contiguous (NCDHW), CUDA
//   weight  : (C_out, C_in, k, k, k) float32, contiguous (nn.Conv3d's layout)
//   m       : C_out float32 values, contiguous (the model's (C_out, 1, 1, 1) parameter is accepted as is)
//   out     : (N, Do, Ho, Wo) float32, contiguous, Do = D - k + 1 (same for H, W); every element written
//
// Envelope (checked; `unsupported_reason` says why a configuration is outside it, and the Python
//   wrapper then runs v1 -- cuDNN's conv + the fused tail -- instead)
//   Compute capability 9.0 or newer (thread-block clusters); cubic kernel 1..5, stride 1, no padding,
//   dilation 1, groups 1; 1 <= C_out <= 32; any N >= 0, C_in >= 1, D, H, W >= k with more than one
//   output position; a sample's flat rows (Do * H * W) spread over at most 16 CTAs, and the input box
//   plus weight fragments fitting in the GPU's shared memory (227 KB on an H100, less 8 KB kept for
//   static shared memory). The KernelBench size takes 114 096 bytes per CTA in the fp32 mode and 114 016 in the
//   TF32 mode (two boxes). Larger C_in * k^3 (e.g. C_in 64 with k = 5) or larger samples (e.g. 64 x 64 x 64)
//   fall outside and run v1.
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_a_v3", cpp_sources="",
//       cuda_sources=open("model_a_v3_fused_conv_instnorm_max.cu").read(),
//       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"])
//   ext.unsupported_reason(in_size, batch, c_in, c_out, kernel, device) -> "" when v3 applies, else why not
//   ext.forward(x, weight, m, clamp_min, clamp_max, eps, allow_tf32, out, cluster_size=0, warps_per_cta=0,
//               tiles_per_warp=0, kh_reuse=True, specialised_gemm=True)
//       -> out  (tuning knobs, 0 = pick: CTAs per sample, most warps per CTA, m16 tiles per warp (16 / NT
//       or, for C_out <= 16, 14 / NT, and for 9 <= C_out <= 16 also 4); any valid value gives the same result
//       up to float rounding of the statistics; kh_reuse=False keeps the flat GEMM where kh reuse would apply,
//       which changes the order of the k sum; specialised_gemm=False runs the instantiation with every GEMM
//       variant where the plan's has one of its own (kGemmAny), the same arithmetic in a larger kernel)
//   ext.plan_info(in_size, batch, c_in, c_out, kernel, allow_tf32, device, cluster_size=0, warps_per_cta=0,
//                 tiles_per_warp=0, kh_reuse=True)
//       -> the plan forward would use (cluster size, rows and warps per CTA, shared memory, the GEMM
//       instantiation: 0 = kGemmAny, 1 = kGemmKh3TensorCoreSum, ...)
//   ext.shift_samples(depth, rows, cols) -> the flat offsets of input_shift's 16 samples in a plane; and
//   ext.input_shift_rule(samples) -> the r those samples give (the fp32 mode's rule, run on the host)

#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace model_a_v3 {

namespace cg = cooperative_groups;

constexpr int kMaxWarps = 16;           // warps per CTA: up to 16 (the plan picks; fewer for small problems)
constexpr int kDefaultWarps = 16;       // 16: one CTA per SM, so a cluster's CTAs run at the same pace
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kTilesPerWarp = 16;       // MT * NT at most: m16n8 accumulator tiles per warp (64 floats per thread)
constexpr int kMaxCluster = 16;         // Hopper's non-portable cluster limit
constexpr int kMaxKernel = 5;
constexpr int kMaxOutChannels = 32;     // NT <= 4
constexpr int kStaticSmemReserve = 8192;  // the kernel's static shared memory (<= 5.2 KB) comes off the opt-in limit
// fp32 mode: the split products accumulate in the tensor cores for up to this many k8 steps (C_in * k^3 <= 8 x it),
// where the error measured against float64 stays within half the fp32 bar (see warp_gemm).
constexpr int kTcAccumulateMaxKsteps = 16;
// kh reuse (warp_gemm_kh_reuse) for kernels of side 2..kKhReuseMaxKernel: the weights of k kernel rows stay in
// registers (k * NT * 4 per thread and k16 step in the fp32 mode, k * NT * 2 per k8 step in the TF32 mode).
constexpr int kKhReuseMaxKernel = 3;
// Not built for the fp32 mode with 4 n-tiles (C_out > 16): 48 weight registers beside 64 accumulators made ptxas
// spill 212 bytes. The host plans the flat GEMM there.
__host__ __device__ constexpr bool kh_reuse_built(int nt, bool split3) { return !(split3 && nt == 4); }
// Which GEMM an instantiation holds. kGemmAny: all of its mode's variants (kh reuse for k = 3 and 2, the flat GEMM;
// in the fp32 mode each with and without the tensor cores' accumulation), picked at run time from the plan.
// kGemmKh3TensorCoreSum: the fp32 mode's kh reuse for k = 3 with the products accumulated in the tensor cores, alone
// (the plan for k = 3 and C_in <= 3 where W is a multiple of 16; the KernelBench size's). Why: the fp32 kernel waits
// on instruction fetch. With all six variants its <NT 2, MT 7> instantiation is 9 288 SASS instructions; ncu put
// 39 % of its warps' stall cycles at batch 1 (caches flushed) and 6 % at batch 128 on "no instruction", against
// 4 % and 1 % for the TF32 kernel. With one variant it is 6 272 instructions, and on an H100, timed after other
// kernels with L2 flushed, the KernelBench size took 5 % less and batch 1 12 % less (results/model_a/NOTES.md).
// The other variants keep the kGemmAny instantiations, so the kernel count grows by one per (NT, MT) only.
constexpr int kGemmAny = 0;
constexpr int kGemmKh3TensorCoreSum = 1;

struct Params {
    const float* x;
    const float* weight;
    const float* multiplier;
    float* out;
    int c_in, c_out, k;
    int d, h, w;              // input size
    int od, oh, ow;           // output size
    int hw;                   // H * W
    int plane;                // D * H * W
    int flat_rows;            // Do * H * W: GEMM rows per sample
    int tiles_per_cta;        // m16 tiles per CTA
    int box_pitch;            // floats between two channels of the input box (picked with tap_order: see below)
    int tap_order;            // how the reduction index runs over (ci, kd, kh, kw): see tap_of
    int ksteps;               // k8 steps: ceil(C_in * k^3 / 8), or k * ceil(C_in * k^2 / 8) with kh reuse (fp32
                              // mode: each ceil rounded up to even, for its k16 steps)
    int warps;                // warps per CTA (<= 16); warp w owns tiles [w * MT, (w + 1) * MT) (kh reuse: warp_row0)
    int prefetch;             // 1: two boxes, so sample n + clusters loads while sample n is computed
    int tc_accumulate;        // fp32 mode: 1: the split products accumulate in the tensor cores (see warp_gemm)
    int kh_reuse;             // 1: warp_gemm_kh_reuse (ksteps = k * tap_steps, warps own lines of W / 16 tiles)
    int tap_steps;            // k-steps of the tap table: ksteps, or ceil(C_in * k^2 / 8) with kh reuse
    int64_t batch;            // N
    double inv_count;         // 1 / (Do * Ho * Wo): the statistics' count per (sample, channel)
    float eps, lo, hi;
};

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

// max / min that propagate NaN, as torch.max and torch.clamp do (fmaxf / fminf would drop it).
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

// Asynchronous global -> shared copies. `bytes` < the copy size zero-fills the rest (0: src not read).
__device__ __forceinline__ void cp_async_4(float* dst, const float* src, int bytes) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all_but_newest() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// The cluster's statistics exchange: each CTA stores into every CTA's shared memory with st.async, which
// counts its bytes off an mbarrier in the receiving CTA ("complete_tx"); the receiver waits on its own
// mbarrier until all bytes are in. No cluster-wide barrier and no memory fence sit between the stores and
// their use (a release/acquire cluster barrier there cost a fence and a round trip per sample).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t map_to_rank(uint32_t address, uint32_t rank) {  // the same offset in CTA `rank`
    uint32_t mapped;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(mapped) : "r"(address), "r"(rank));
    return mapped;
}
__device__ __forceinline__ void store_async_f64(uint32_t remote, double v, uint32_t remote_barrier) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(remote),
                 "l"(__double_as_longlong(v)), "r"(remote_barrier) : "memory");
}
__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t barrier, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// The input box by bulk copies (TMA): `bytes` (a multiple of 16) from global `src` to shared `dst`, both 16-byte
// aligned, counted off the mbarrier at shared address `barrier`; the threads wait on that mbarrier (acquire).
__device__ __forceinline__ void bulk_copy(float* dst, const float* src, uint32_t bytes, uint32_t barrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(shared_address(dst)), "l"(src), "r"(bytes), "r"(barrier) : "memory");
}
// Wait until the mbarrier at shared address `barrier` completes the phase of parity `phase`. CTA scope for the
// CTA's own bulk copies; cluster scope (acquire) for the statistics that other CTAs store with st.async. One
// loop in PTX for both, the scope spliced into its try_wait (a loop in C++ around a try_wait that returns a
// flag compiled to different SASS, 16-24 more instructions in three instantiations).
#define MODEL_A_MBARRIER_WAIT_LOOP(SEM_SCOPE)                                           \
    "{\n"                                                                              \
    ".reg .pred done;\n"                                                               \
    "WAIT:\n"                                                                          \
    "mbarrier.try_wait.parity" SEM_SCOPE ".shared::cta.b64 done, [%0], %1;\n"          \
    "@!done bra WAIT;\n"                                                               \
    "}\n"
enum class WaitScope { kCta, kCluster };
template <WaitScope SCOPE>
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t phase) {
    if constexpr (SCOPE == WaitScope::kCluster)
        asm volatile(MODEL_A_MBARRIER_WAIT_LOOP(".acquire.cluster") ::"r"(barrier), "r"(phase) : "memory");
    else
        asm volatile(MODEL_A_MBARRIER_WAIT_LOOP("") ::"r"(barrier), "r"(phase) : "memory");
}
#undef MODEL_A_MBARRIER_WAIT_LOOP

// TF32 operands. The tensor cores read the top 19 bits of a .tf32 operand (sign, exponent, 10 mantissa
// bits) and ignore the low 13, so v plus half a TF32 ulp is v rounded to nearest (ties away) for them.
// tf32_round adds it in float, v + 2^(e - 11) with 2^e the binade of v: NaN stays NaN and infinities stay
// infinite. An integer add of 2^12 would carry a NaN whose payload fills the top mantissa bits (0x7fffffff,
// the NaN CUDA's arithmetic produces) into the sign bit and hand the tensor cores -0: a finite output where
// PyTorch's is NaN. Two instructions (cvt.rna.tf32.f32 compiles to three on sm_90).
__device__ __forceinline__ float tf32_round(float v) {  // low 13 bits left as they fall (tf32_value clears them)
    const float binade = __uint_as_float(__float_as_uint(v) & 0xff800000u);  // +-2^e; +-inf for NaN and inf
    return fmaf(binade, 0x1p-11f, v);
}
// v rounded to TF32 with the low 13 bits cleared: a TF32 value, for the TF32 mode's weight fragments.
__device__ __forceinline__ float tf32_value(float v) {
    return __uint_as_float(__float_as_uint(tf32_round(v)) & 0xffffe000u);
}
// d += a * b for one 16x8x8 tile, TF32 operands (the TF32 mode). Fragments (PTX ISA, mma.m16n8k8 .tf32),
// g = lane / 4, t = lane % 4:
//   a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4);   b0 (k=t, n=g)  b1 (k=t+4, n=g);
//   d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm(  // not volatile: no side effects, so the compiler may interleave independent chains
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a * b for one 16x8x16 tile, FP16 operands, fp32 accumulation (the fp32 mode's split products).
// Fragments (PTX ISA, mma.m16n8k16 .f16; each register holds two FP16 values, the smaller k in the low half):
//   a0 (g, 2t..2t+1)  a1 (g+8, 2t..2t+1)  a2 (g, 2t+8..2t+9)  a3 (g+8, 2t+8..2t+9);
//   b0 (k=2t..2t+1, n=g)  b1 (k=2t+8..2t+9, n=g);  d as for m16n8k8.
// One k16 step is two k8 steps 2s, 2s + 1 of the tap table: its k = 2t + e + 8h is tap column t + 4e of k8 step
// 2s + h. So each lane loads the same words as for those two TF32 k8 steps (the same bank analysis holds, see
// pick_tap_layout), and its weights are the two k8 fragments' (b0, b1) side by side.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// FP16 operands for the fp32 mode. FP16 has TF32's 11-bit significand but 5 exponent bits, so values are first
// scaled by a power of two (exact) that brings the largest |v| of its group into [2^14, 2^15): the input box per
// CTA and sample, the weights per output channel; the accumulators are scaled back (exact). Each scaled v is then
// split v = hi + lo, both FP16 rounded to nearest, and hi*hi + hi*lo + lo*hi are summed: relative error about
// 2^-22 per product (lo*lo is dropped, lo rounded), as 3xTF32's with a rounded lo. A value more than 2^24 below
// its group's largest is represented to about 2^-25 of that largest (FP16 subnormals), far below the rounding
// of the sums it enters. NaN and infinities stay NaN and infinite (the largest |v| is taken with fmaxf, which
// skips NaN; an infinite one scales the rest toward 0, and the sample's statistics become NaN as in PyTorch).
// Two floats rounded to nearest FP16 in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float2 unpack_f16(uint32_t v) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
}
// 2^e as a float, for -126 <= e <= 127.
__device__ __forceinline__ float exp2_int(int e) { return __uint_as_float(static_cast<uint32_t>(e + 127) << 23); }
// The exponent e that brings a largest |v| = m into [2^14, 2^15) (FP16's largest finite value is 65504), clamped to
// [-126, 126]: m = 0 or denormal gives 126, m = infinity -114.
__device__ __forceinline__ int f16_scale_exponent(float m) {
    const int binade = static_cast<int>((__float_as_uint(m) >> 23) & 0xffu) - 127;
    return max(-126, min(126, 14 - binade));
}
// fp32 mode: the reference value r(n, ci) subtracted from plane (n, ci) of the input before the split (see "The
// math"). It looks at kShiftSamples = 16 elements of the plane on a 4 x 4 grid of rows and columns, (2a + 1) / 8
// and (2b + 1) / 8 of the way across (a, b = 0..3: interior, so a frame or letterbox is missed; spread in both
// directions, so no row-aligned stride lands them on one edge), each on its own depth slice (2 ((a + b) % 4) + 1)
// / 8 of the way through (a Latin square: all four depths on every row and column of the grid). The candidate m
// is the median of three central samples, (1, 1), (1, 2) and (2, 1); r = m where all 16 are finite and at least
// 12 of them lie within |m| / 2 of m (the plane sits mostly at an offset large against its spread, e.g. inputs
// + 100), else 0 (inputs about 0, a wide spread, no majority at one offset, a NaN or infinity among the samples,
// which then propagates as before). Why 16 and a majority: r taken from the plane's first, middle and last
// elements (the rule before) was their value wherever those three sat far from the rest, e.g. under a constant
// frame, and the split's error grows with |x - r|: 4.2x PARITY.md's fp32 bar at three elements of 10 over [0, 1)
// data (results/model_a/NOTES.md). With 12 of 16 spread samples near r, most of the plane is within [r/2, 3r/2],
// where |x - r| <= |x|; the rest can be anywhere, as the samples cannot see it.
// Every CTA of a cluster computes the same value from the same elements.
// In two parts: the samples, and r from them (the kernel copies them into shared memory with cp.async, the first
// sample's with the weights and the next sample's during this sample's GEMM, so that no warp waits on their loads).
constexpr int kShiftSamples = 16;
constexpr int kShiftMajority = 12;
__host__ __device__ __forceinline__ int shift_sample_offset(int j, int depth, int rows, int cols) {
    const int a = j >> 2, b = j & 3;  // 64-bit products: 7 * cols may pass 2^31 where the plane does not
    const int64_t d = (2 * ((a + b) & 3) + 1) * int64_t{depth} / 8, y = (2 * a + 1) * int64_t{rows} / 8,
                  x = (2 * b + 1) * int64_t{cols} / 8;
    return static_cast<int>((d * rows + y) * cols + x);  // < depth * rows * cols < 2^31
}
// The rule over samples sample(0..15): the candidate from three, then one pass for finiteness and agreement.
// Its callers read the samples from shared memory (cp.async), or on the host from a list.
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
// The split of two scaled values into (hi, lo) FP16 pairs: lo = v - hi is exact in float, then rounded.
__device__ __forceinline__ void split_f16(float v0, float v1, uint32_t& hi, uint32_t& lo) {
    hi = pack_f16(v0, v1);
    const float2 h = unpack_f16(hi);
    lo = pack_f16(v0 - h.x, v1 - h.y);
}

// One lane's weight fragment for one k-step and n-tile, at index f = (k-step * NT + n-tile) * 32 + lane of the
// fragments the set-up wrote: TF32 mode (b0, b1) of a k8 step in one 8-byte load; fp32 mode (b0_hi, b1_hi,
// b0_lo, b1_lo) of a k16 step, FP16 pairs, in one 16-byte load.
template <bool SPLIT3>
__device__ __forceinline__ void load_b_fragment(uint32_t (&b)[SPLIT3 ? 4 : 2], const float* weight_frag, int f) {
    if constexpr (SPLIT3) {
        const uint4 w4 = reinterpret_cast<const uint4*>(weight_frag)[f];
        b[0] = w4.x; b[1] = w4.y; b[2] = w4.z; b[3] = w4.w;
    } else {
        const uint2 w2 = reinterpret_cast<const uint2*>(weight_frag)[f];
        b[0] = w2.x; b[1] = w2.y;
    }
}

// One lane's A fragment of a 16-row tile whose rows start at `a` (the lane's row g already added).
// TF32 mode: k8 step with taps at word offsets off0.x (column t) and off0.y (column t + 4), four shared loads
// handed to the tensor cores as they are (a_lo unused): they read the top 19 bits, i.e. v truncated to TF32.
// Truncation has the same error spread as rounding (uniform over one TF32 ulp instead of half an ulp either side)
// plus a bias of half an ulp toward zero, a relative scale of the conv output that InstanceNorm divides out;
// rounding cost two instructions per element, half the GEMM loop's.
// fp32 mode: k16 step from k8 steps with offsets off0 and off1 (see mma_f16), eight shared loads, each value
// times `scale` and split into FP16 hi and lo.
template <bool SPLIT3>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a_hi)[4], uint32_t (&a_lo)[4], const float* a, int2 off0,
                                                int2 off1, float scale) {
    if constexpr (SPLIT3) {
        const float v[8] = {a[off0.x], a[off0.y], a[8 + off0.x], a[8 + off0.y],
                            a[off1.x], a[off1.y], a[8 + off1.x], a[8 + off1.y]};
#pragma unroll
        for (int r = 0; r < 4; ++r) split_f16(v[2 * r] * scale, v[2 * r + 1] * scale, a_hi[r], a_lo[r]);
    } else {
        const float v[4] = {a[off0.x], a[8 + off0.x], a[off0.y], a[8 + off0.y]};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            a_hi[e] = __float_as_uint(v[e]);
            a_lo[e] = 0u;
        }
    }
}

// acc += A * B for one tile and k-step in the mode's precision: one TF32 product (a_lo unused), or the fp32 mode's
// FP16 split with b = (b0_hi, b1_hi, b0_lo, b1_lo): lo*hi + hi*lo + hi*hi, the small products first, either
// straight into acc (TC_ACCUMULATE) or into a partial sum started from zero and added to acc in fp32 (see
// warp_gemm).
template <bool SPLIT3, bool TC_ACCUMULATE>
__device__ __forceinline__ void mma_step(float (&acc)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                         const uint32_t (&b)[SPLIT3 ? 4 : 2]) {
    if constexpr (!SPLIT3) {
        mma_tf32(acc, a_hi, b[0], b[1]);
    } else if constexpr (TC_ACCUMULATE) {
        mma_f16(acc, a_lo, b[0], b[1]);
        mma_f16(acc, a_hi, b[2], b[3]);
        mma_f16(acc, a_hi, b[0], b[1]);
    } else {
        float part[4] = {0.f, 0.f, 0.f, 0.f};
        mma_f16(part, a_lo, b[0], b[1]);
        mma_f16(part, a_hi, b[2], b[3]);
        mma_f16(part, a_hi, b[0], b[1]);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] += part[e];
    }
}

// The reduction index kk of the implicit GEMM (0 <= kk < C_in * k^3) names a tap (ci, kd, kh, kw); its A
// element for flat row q is box[q + ci * box_pitch + (kd * H + kh) * W + kw]. Any order of the taps gives the
// same sum (the weights follow it), but not the same shared-memory traffic: one A-fragment load reads, for
// g = 0..7 and t = 0..3, box[q0 + g + off(tap t)], and two taps whose offsets differ by a multiple of 32 words
// plus at most 7 put different words in one bank (2-way conflict: two wavefronts). At the KernelBench size
// (W = 32, H W = 1024) every offset is kw mod 32, so the natural order conflicts in every load. The host
// (pick_tap_layout) tries three nestings and eight box pitches and keeps the one with the fewest wavefronts;
// at the KernelBench size order 1 with box_pitch = 20 mod 32 is conflict-free.
//   order 0: (ci, kd, kh, kw), kw fastest: nn.Conv3d's weight layout
//   order 1: (kd, kh, ci, kw)
//   order 2: (kd, kh, kw, ci)
// With kh reuse (warp_gemm_kh_reuse) the index runs over the taps of kernel row kh = 0 only (kh_taps = 1):
// the same three nestings without kh; the GEMM adds kh * W itself.
struct Tap {
    int ci, kd, kh, kw;
};
__host__ __device__ inline Tap tap_of(int kk, int order, int c_in, int k, int kh_taps) {
    Tap tap;
    if (order == 0) {
        tap.kw = kk % k; kk /= k; tap.kh = kk % kh_taps; kk /= kh_taps; tap.kd = kk % k; tap.ci = kk / k;
    } else if (order == 1) {
        tap.kw = kk % k; kk /= k; tap.ci = kk % c_in; kk /= c_in; tap.kh = kk % kh_taps; tap.kd = kk / kh_taps;
    } else {
        tap.ci = kk % c_in; kk /= c_in; tap.kw = kk % k; kk /= k; tap.kh = kk % kh_taps; tap.kd = kk / kh_taps;
    }
    return tap;
}
// The tap's offset in the box; padded taps (kk >= K, zero weight) reuse the last real tap's word, which
// is in the same load (taps are consecutive), so they add no wavefront.
__host__ __device__ inline int tap_offset(int kk, int order, int c_in, int k, int kh_taps, int box_pitch, int h,
                                          int w) {
    const int last = c_in * k * k * kh_taps - 1;
    const Tap tap = tap_of(kk < last ? kk : last, order, c_in, k, kh_taps);
    return tap.ci * box_pitch + (tap.kd * h + tap.kh) * w + tap.kw;
}
// nn.Conv3d's index of the tap's weight within one output channel.
__host__ __device__ inline int tap_weight_index(int kk, int order, int c_in, int k, int kh_taps) {
    const Tap tap = tap_of(kk, order, c_in, k, kh_taps);
    return ((tap.ci * k + tap.kd) * k + tap.kh) * k + tap.kw;
}

// One warp's implicit GEMM for one sample: acc[i][j] += A(tile i) * W(n-tile j) over all k-steps. Every warp
// computes all MT of its tiles, so the tile loop has no branch and the compiler can interleave the independent
// mma chains of different tiles. `ksteps` counts k8 steps of the tap table; the fp32 mode takes them in pairs
// (one k16 step of FP16 products; ksteps is even there), its inputs times `scale`.
// fp32 mode (SPLIT3), TC_ACCUMULATE: the three products go straight into acc, accumulated by the tensor cores,
// whose fp32 accumulation truncates instead of rounding to nearest; otherwise they go into a partial sum started
// from zero at each k-step, which is added to acc in fp32. The host allows TC_ACCUMULATE up to
// kTcAccumulateMaxKsteps k8 steps: measured with 3xTF32 products against float64 (H100, 3 seeds, inputs in
// [0, 1) and +100; results/model_a/NOTES.md), the error as a fraction of the fp32 bar was at most 0.32 up to 17
// k-steps, 0.56-0.83 at 27-63 and 1.16 (a failure) at 81; with the partial sum, at most 0.24 up to 125 k-steps.
// Accumulating in the tensor cores saved 8 % at the KernelBench size; tests/test_gpu_model_a_v3.py checks both
// sides of the threshold with the FP16 products.
template <int NT, int MT, bool SPLIT3, bool TC_ACCUMULATE>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const float* a_base, const int2* taps,
                                          const float* weight_frag, int ksteps, int lane, int t, float scale) {
    constexpr int kStep = SPLIT3 ? 2 : 1;  // k8 steps per mma step
    for (int s = 0; s < ksteps; s += kStep) {
        const int2 off0 = taps[s * 4 + t], off1 = taps[(s + kStep - 1) * 4 + t];
        uint32_t b[NT][SPLIT3 ? 4 : 2];
#pragma unroll
        for (int j = 0; j < NT; ++j) load_b_fragment<SPLIT3>(b[j], weight_frag, (s / kStep * NT + j) * 32 + lane);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            uint32_t a_hi[4], a_lo[4];
            load_a_fragment<SPLIT3>(a_hi, a_lo, a_base + i * 16, off0, off1, scale);
#pragma unroll
            for (int j = 0; j < NT; ++j) mma_step<SPLIT3, TC_ACCUMULATE>(acc[i][j], a_hi, a_lo, b[j]);
        }
    }
}

// The same GEMM with each A fragment loaded once for the k kernel rows kh (kh reuse; 2 <= k <= 3, W a multiple
// of 16). A warp's tile i covers flat rows row0 + i W + (0..15): the same 16 columns of MT consecutive lines
// (od H + oh) of the sample. Tap (ci, kd, kh, kw) of tile i reads box[rows(i) + kh W + off(ci, kd, 0, kw)] =
// box[rows(i + kh) + off(ci, kd, 0, kw)]: the kh = 0 fragment of "tile" i + kh. So the warp loads the fragments
// of MT + k - 1 lines per k-step of (ci, kd, kw) taps and multiplies each into up to k accumulator tiles, with
// the weights of kernel rows 0..k-1 held in registers: (MT + k - 1) / (k MT) of the flat GEMM's A loads and
// splits (9 / 21 at the KernelBench size), for ceil(C_in k^2 / 8) k / ceil(C_in k^3 / 8) of its mma (12 / 11;
// the fp32 mode's k16 steps: 6 / 6).
// Weight fragments: mma step u of the tap steps (a k8 step, or a pair of them in the fp32 mode), kernel row kh:
// fragment (u * KH + kh) * NT + n-tile. KH = k is a template parameter: with k known, the line loop has no exits
// and no predicates, and ptxas can issue the next line's loads before this line's mma.
template <int NT, int MT, int KH, bool SPLIT3, bool TC_ACCUMULATE>
__device__ __forceinline__ void warp_gemm_kh_reuse(float (&acc)[MT][NT][4], const float* a_base, int line,
                                                   const int2* taps, const float* weight_frag, int tap_steps, int lane,
                                                   int t, float scale) {
    static_assert(KH >= 2 && KH <= kKhReuseMaxKernel, "kh reuse: k = 2 .. kKhReuseMaxKernel");
    constexpr int kStep = SPLIT3 ? 2 : 1;
    for (int s0 = 0; s0 < tap_steps; s0 += kStep) {
        const int2 off0 = taps[s0 * 4 + t], off1 = taps[(s0 + kStep - 1) * 4 + t];
        uint32_t b[KH][NT][SPLIT3 ? 4 : 2];
#pragma unroll
        for (int kh = 0; kh < KH; ++kh)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                load_b_fragment<SPLIT3>(b[kh][j], weight_frag, ((s0 / kStep * KH + kh) * NT + j) * 32 + lane);
#pragma unroll
        for (int q = 0; q < MT + KH - 1; ++q) {  // line q of the warp's MT + k - 1
            uint32_t a_hi[4], a_lo[4];
            load_a_fragment<SPLIT3>(a_hi, a_lo, a_base + q * line, off0, off1, scale);
#pragma unroll
            for (int kh = 0; kh < KH; ++kh) {
                const int i = q - kh;  // the tile this line is kernel row kh of
                if (i < 0 || i >= MT) continue;
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_step<SPLIT3, TC_ACCUMULATE>(acc[i][j], a_hi, a_lo, b[kh][j]);
            }
        }
    }
}

// kh reuse for kernel side KH in either accumulation of the fp32 mode.
template <int NT, int MT, int KH, bool SPLIT3>
__device__ __forceinline__ void warp_gemm_kh_reuse_mode(float (&acc)[MT][NT][4], const float* a_base, const Params& p,
                                                        const int2* taps, const float* weight_frag, int lane, int t,
                                                        float scale) {
    if constexpr (SPLIT3) {
        if (p.tc_accumulate)
            warp_gemm_kh_reuse<NT, MT, KH, true, true>(acc, a_base, p.w, taps, weight_frag, p.tap_steps, lane, t,
                                                       scale);
        else
            warp_gemm_kh_reuse<NT, MT, KH, true, false>(acc, a_base, p.w, taps, weight_frag, p.tap_steps, lane, t,
                                                        scale);
    } else {
        warp_gemm_kh_reuse<NT, MT, KH, false, false>(acc, a_base, p.w, taps, weight_frag, p.tap_steps, lane, t, scale);
    }
}

// The GEMM the plan chose: kh reuse or flat; in the fp32 mode, products accumulated in the tensor cores or in a
// partial sum per k-step. GEMM = kGemmKh3TensorCoreSum builds only that variant (see kGemmAny).
template <int NT, int MT, bool SPLIT3, int GEMM>
__device__ __forceinline__ void sample_gemm(float (&acc)[MT][NT][4], const float* a_base, const Params& p,
                                            const int2* taps, const float* weight_frag, int lane, int t, float scale) {
    if constexpr (GEMM == kGemmKh3TensorCoreSum) {  // the host launches it only for such plans (gemm_of)
        static_assert(SPLIT3 && kh_reuse_built(NT, SPLIT3), "kGemmKh3TensorCoreSum: the fp32 mode's kh reuse");
        warp_gemm_kh_reuse<NT, MT, 3, true, true>(acc, a_base, p.w, taps, weight_frag, p.tap_steps, lane, t, scale);
        return;
    }
    if constexpr (kh_reuse_built(NT, SPLIT3)) {
        static_assert(kKhReuseMaxKernel == 3, "the dispatch below covers k = 2 and 3");
        if (p.kh_reuse) {
            if (p.k == 3)
                warp_gemm_kh_reuse_mode<NT, MT, 3, SPLIT3>(acc, a_base, p, taps, weight_frag, lane, t, scale);
            else
                warp_gemm_kh_reuse_mode<NT, MT, 2, SPLIT3>(acc, a_base, p, taps, weight_frag, lane, t, scale);
            return;
        }
    }
    if constexpr (SPLIT3) {
        if (p.tc_accumulate)
            warp_gemm<NT, MT, true, true>(acc, a_base, taps, weight_frag, p.ksteps, lane, t, scale);
        else
            warp_gemm<NT, MT, true, false>(acc, a_base, taps, weight_frag, p.ksteps, lane, t, scale);
    } else {
        warp_gemm<NT, MT, false, false>(acc, a_base, taps, weight_frag, p.ksteps, lane, t, scale);
    }
}

// Sum over the 8 lanes of a quad column (same t, g = 0..7): the rows of an mma fragment.
__device__ __forceinline__ float sum_over_rows(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

// Sum over the 16 lanes of a half warp (lanes i ^ 1, 2, 4, 8). Each step adds the same two numbers on both
// partners, so all 16 lanes end with the same bits.
__device__ __forceinline__ double sum_over_16_lanes(double v) {
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Shared-memory layout of one CTA (dynamic part), in this order, each part 16-byte aligned.
struct SmemLayout {
    int nt;       // n8 tiles
    bool split3;  // the fp32 mode (FP16 hi and lo fragments per k16 step)
    // Per lane and n-tile, 8 bytes per k8 step: TF32 (b0, b1) of each k8 step; fp32 mode 16 bytes of FP16 pairs
    // (b0_hi, b1_hi, b0_lo, b1_lo) per k16 step (two k8 steps).
    __host__ __device__ size_t weight_bytes(int ksteps) const {
        return static_cast<size_t>(ksteps) * nt * 32 * 2 * sizeof(float);
    }
    __host__ __device__ size_t gathered_bytes(int cluster) const {  // (count, mean, M2) per parity, CTA, channel
        return (2 * static_cast<size_t>(cluster) * 8 * nt * sizeof(double3) + 15) / 16 * 16;
    }
    __host__ __device__ size_t tap_bytes(int ksteps) const { return static_cast<size_t>(ksteps) * 4 * sizeof(int2); }
    __host__ __device__ size_t row_bytes(int tiles) const { return static_cast<size_t>(tiles) * 16 * sizeof(int); }
    // fp32 mode: r(n, ci) of two samples (input_shift), and the next sample's kShiftSamples elements per plane
    __host__ __device__ size_t shift_bytes(int c_in) const {
        return split3 ? ((2 + kShiftSamples) * static_cast<size_t>(c_in) * sizeof(float) + 15) / 16 * 16 : 0;
    }
    __host__ __device__ size_t box_bytes(int c_in, int pitch, bool prefetch) const {  // one box, two to prefetch
        return static_cast<size_t>(prefetch ? 2 : 1) * c_in * pitch * sizeof(float);
    }
    __host__ __device__ size_t total(int ksteps, int cluster, int tiles, int c_in, int pitch, bool prefetch) const {
        return weight_bytes(ksteps) + gathered_bytes(cluster) + tap_bytes(ksteps) + row_bytes(tiles) +
               shift_bytes(c_in) + box_bytes(c_in, pitch, prefetch);
    }
};

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------
// grid.x = cluster * clusters, cluster dims (cluster, 1, 1), clusters <= N: persistent clusters, cluster i
// computes samples i, i + clusters, i + 2 * clusters, ...
template <int NT, int MT, bool SPLIT3, int GEMM>
__global__ void __launch_bounds__(kMaxThreads, 1)
fused_conv_instnorm_max_kernel(const Params p) {
    static_assert(MT * NT <= kTilesPerWarp, "at most 64 accumulators per thread");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr SmemLayout layout{NT, SPLIT3};
    extern __shared__ __align__(16) unsigned char smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int cluster_size = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int clusters = static_cast<int>(gridDim.x) / cluster_size;
    unsigned char* carve = smem;
    float* weight_frag = reinterpret_cast<float*>(carve);
    carve += layout.weight_bytes(p.ksteps);
    double3* gathered = reinterpret_cast<double3*>(carve);  // [2 (sample parity)][cluster_size][8 * NT]
    carve += layout.gathered_bytes(cluster_size);
    int2* taps = reinterpret_cast<int2*>(carve);
    carve += layout.tap_bytes(p.ksteps);
    int* row_out = reinterpret_cast<int*>(carve);
    carve += layout.row_bytes(p.warps * MT);
    float* shifts = reinterpret_cast<float*>(carve);  // fp32 mode: [2 (sample parity)][c_in], r(n, ci)
    float* shift_elements = shifts + 2 * p.c_in;       // fp32 mode: [c_in][kShiftSamples], the next sample's
    carve += layout.shift_bytes(p.c_in);
    float* boxes = reinterpret_cast<float*>(carve);  // [1 or 2 (prefetch: sample parity)][c_in][box_pitch]
    const int box_floats = p.c_in * p.box_pitch;

    __shared__ float2 warp_sums[kMaxWarps][8 * NT];  // per warp and channel: sum of (y - centre), of (y - centre)^2
    __shared__ float warp_centre[kMaxWarps][8 * NT];  // the warp's own mean, rounded to float
    __shared__ float warp_count[kMaxWarps];           // valid rows per warp
    __shared__ double warp_inv_count[kMaxWarps];      // 1 / valid rows per warp (0: none)
    __shared__ float4 coef[8 * NT];                   // (mu_hi, mu_lo, s, L) per channel, and H: see step 6
    __shared__ float coef_hi[8 * NT];
    __shared__ __align__(8) uint64_t gathered_full[2];  // per slot: all CTAs' statistics have arrived (step 5)
    __shared__ __align__(8) uint64_t box_landed[2];     // per box buffer: its bulk copies have landed (step 2)
    __shared__ int weight_exponent[8 * NT];             // fp32 mode: per output channel, the weights' scale exponent
    __shared__ unsigned int weight_absmax_bits[8 * NT];  // fp32 mode: per output channel, max |w| as float bits
    __shared__ float box_max_warp[kMaxWarps];           // fp32 mode: per warp, max |x| over its slice of the box

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int threads = p.warps * 32;
    const int rows = p.tiles_per_cta * 16;       // this CTA's share of the sample's rows
    const int rows_alloc = p.warps * MT * 16;    // rows its warps compute (>= rows)
    const int row0 = rank * rows;  // first flat row of this CTA
    const int kh_taps = p.kh_reuse ? 1 : p.k;    // kernel rows in the tap index (see tap_of)
    const int K = p.c_in * p.k * p.k * kh_taps;  // taps in the tap index: C_in k^3, or C_in k^2 (kh = 0) with kh reuse
    // This warp's tile i covers local rows warp_row0 + i * tile_stride + (0..15): MT consecutive tiles, or with kh
    // reuse the same 16 columns of MT consecutive lines (W / 16 warps side by side per group of lines).
    const int tile_stride = p.kh_reuse ? p.w : 16;
    const int warp_row0 = p.kh_reuse ? (warp / (p.w / 16)) * MT * p.w + (warp % (p.w / 16)) * 16 : warp * MT * 16;
    const int first = static_cast<int>(blockIdx.x) / cluster_size;  // this cluster's first sample

    // Input box of sample n into buffer b: channel ci, element j = x[n, ci, row0 + j], 0 past the sample's end.
    // Where the channels are 16-byte aligned (D H W % 4 == 0 and x aligned): thread 0 requests one bulk copy per
    // channel of the box_copy elements that exist, counted off box_landed[b]; the zeros past them are written once
    // (step 1) and never overwritten. Elsewhere every thread copies 4-byte elements with cp.async (zero-filled past
    // the end), in one commit group. wait_box(b) makes the box visible to every thread.
    const bool bulk = (p.plane % 4 == 0) && (reinterpret_cast<uintptr_t>(p.x) % 16 == 0);
    const int remaining = p.plane - row0;  // elements of each channel from row0 on (> 0: the plan gives every CTA rows)
    const int box_copy = min(p.box_pitch, remaining);
    uint32_t landed_phase = 0;             // bit b: the phase of box_landed[b] to wait for next
    const auto copy_box = [&](int64_t n, int b) {
        const float* xs = p.x + (n * p.c_in) * static_cast<int64_t>(p.plane);
        float* box = boxes + b * box_floats;
        if (bulk) {
            if (tid == 0) {
                const uint32_t landed = shared_address(&box_landed[b]);
                mbarrier_arrive_expect_bytes(landed, static_cast<uint32_t>(p.c_in * box_copy) * sizeof(float));
                for (int ci = 0; ci < p.c_in; ++ci)
                    bulk_copy(box + ci * p.box_pitch, xs + static_cast<int64_t>(ci) * p.plane + row0,
                              static_cast<uint32_t>(box_copy) * sizeof(float), landed);
            }
        } else {
            for (int ci = 0; ci < p.c_in; ++ci) {
                const float* src = xs + static_cast<int64_t>(ci) * p.plane + row0;
                float* dst = box + ci * p.box_pitch;
                for (int j = tid; j < p.box_pitch; j += threads)
                    cp_async_4(dst + j, j < remaining ? src + j : xs, j < remaining ? 4 : 0);
            }
            cp_async_commit();
        }
    };
    const auto wait_box = [&](int b) {
        if (bulk) {
            mbarrier_wait<WaitScope::kCta>(shared_address(&box_landed[b]), landed_phase >> b & 1u);
            landed_phase ^= 1u << b;
        } else {
            cp_async_wait_all();
            __syncthreads();
        }
    };

    // 1. Once per CTA: the first sample's box is requested; while it flies, the tables every sample shares.
    if (tid == 0) {
        mbarrier_init(shared_address(&gathered_full[0]), 1);
        mbarrier_init(shared_address(&gathered_full[1]), 1);
        mbarrier_init(shared_address(&box_landed[0]), 1);
        mbarrier_init(shared_address(&box_landed[1]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");  // waited on before the first push
    copy_box(first, 0);
    //    fp32 mode: the first sample's kShiftSamples elements per plane (input_shift), requested as the next
    //    samples' are (step 2) and in the weights' cp.async group below; combined after the weights' wait. (Loaded
    //    and combined here, they held warp 0, and with it the CTA, for a global-memory round trip: see
    //    results/model_a/NOTES.md.)
    if constexpr (SPLIT3)
        for (int t = tid; t < kShiftSamples * p.c_in; t += threads) {
            const int ci = t / kShiftSamples, j = t % kShiftSamples;
            const float* plane = p.x + (first * p.c_in + ci) * static_cast<int64_t>(p.plane);
            cp_async_4(shift_elements + t, plane + shift_sample_offset(j, p.d, p.h, p.w), 4);
        }
    //    Weight fragments, step 1 of 2: each thread requests the raw weights of its fragments (taps k0 and k0 + 4
    //    of channel co for each k8 step of the fragment) into the fragment's slot with 4-byte cp.async,
    //    zero-filled where it pads past C_out or K. All of a thread's loads are in flight at once, where a load
    //    per fragment in turn cost a global-memory latency each (27 in a row per thread in CTAs of 4 warps with
    //    C_out 32 and C_in 8: 4-7 % of such a forward). Step 2 rounds or splits them after the tables below.
    //    Fragment i = (u, n-tile j, lane fl), u = s * khc + kh for mma step s and kernel row kh (khc = k with kh
    //    reuse, else 1): for each of the mma step's k8 steps (one; two in the fp32 mode's k16 steps) the weights of
    //    tap columns t and t + 4 of output channel co = 8 j + g.
    //    Each tap's place in nn.Conv3d's weight layout is decoded once (tap_weight_index: integer divisions by
    //    C_in and k), into the tap table's space, which the tap offsets below overwrite. Decoded per fragment
    //    instead, each tap took 8 NT decodes: with one warp and C_in k^3 = 3 000 they drew about three quarters of
    //    ncu's stall samples in a 440 us kernel (results/model_a/NOTES.md).
    constexpr int kStep = SPLIT3 ? 2 : 1;
    const int64_t weight_row = static_cast<int64_t>(p.c_in) * p.k * p.k * p.k;  // one output channel's weights
    const int fragments = p.ksteps / kStep * NT * 32;
    int* weight_index = reinterpret_cast<int*>(taps);  // [tap_steps * 8] (the tap table holds tap_steps * 4 int2)
    for (int kk = tid; kk < p.tap_steps * 8; kk += threads)
        weight_index[kk] = kk < K ? tap_weight_index(kk, p.tap_order, p.c_in, p.k, kh_taps) : 0;
    //    fp32 mode: max |w| per output channel, as float bits, gathered from the fragments in step 2 (atomicMax:
    //    non-negative floats order as their bits).
    if (SPLIT3 && tid < 8 * NT) weight_absmax_bits[tid] = 0u;
    __syncthreads();  // weight_index and the zeroed maxima are complete
    {
        const int khc = p.kh_reuse ? p.k : 1;
        for (int i = tid; i < fragments; i += threads) {
            const int fl = i & 31, j = (i >> 5) % NT, u = (i >> 5) / NT;
            const int s = u / khc, kh = u - s * khc;
            const int co = j * 8 + (fl >> 2);
            const float* w_co = p.weight + co * weight_row + kh * p.k;  // kernel row kh of output channel co
            float* slot = weight_frag + i * 2 * kStep;
#pragma unroll
            for (int h = 0; h < kStep; ++h) {
                const int k0 = (kStep * s + h) * 8 + (fl & 3), k1 = k0 + 4;
                const bool real0 = co < p.c_out && k0 < K, real1 = co < p.c_out && k1 < K;
                cp_async_4(slot + 2 * h, real0 ? w_co + weight_index[k0] : p.weight, real0 ? 4 : 0);
                cp_async_4(slot + 2 * h + 1, real1 ? w_co + weight_index[k1] : p.weight, real1 ? 4 : 0);
            }
        }
        cp_async_commit();
    }
    //    The bulk copies' zeros past the sample's end, in every box buffer (the barriers below order them
    //    before any read; the copies never write there).
    if (bulk && box_copy < p.box_pitch) {
        const int tail = p.box_pitch - box_copy;
        for (int i = tid; i < (p.prefetch ? 2 : 1) * p.c_in * tail; i += threads)
            boxes[(i / tail) * p.box_pitch + box_copy + i % tail] = 0.f;
    }
    //    The row -> output offset table (-1: dropped), over all rows the warps compute (rows past this
    //    CTA's share belong to the next CTA and are dropped here), and the number of valid rows.
    int valid_rows = 0;
    for (int base = 0; base < rows_alloc; base += threads) {
        const int r = base + tid;
        const int q = row0 + r;
        bool valid = false;
        int offset = -1;
        if (r < rows && q < p.flat_rows) {
            const int d = q / p.hw, rem = q - d * p.hw, hh = rem / p.w, ww = rem - hh * p.w;
            valid = hh < p.oh && ww < p.ow;
            if (valid) offset = (d * p.oh + hh) * p.ow + ww;
        }
        if (r < rows_alloc) row_out[r] = offset;
        valid_rows += __syncthreads_count(valid);
    }
    //    Weight fragments, step 2 of 2: each thread rounds (TF32 mode) or scales and splits (fp32 mode) the raw
    //    weights it requested (step 1 above) in place, once they have landed (the wait also covers a cp.async
    //    box, which the GEMM needs next anyway).
    cp_async_wait_all();
    if constexpr (SPLIT3) {
        // Per output channel, max |w| over its C_in k^3 weights (each is in exactly one fragment; the padding is
        // zero), and below the exponent that scales it into [2^14, 2^15) for FP16. From the fragments this thread
        // requested: a loop over global memory per channel instead was a chain of dependent loads, one channel
        // after another in a CTA of few warps (results/model_a/NOTES.md).
        float absmax[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) absmax[j] = 0.f;
        for (int i = tid; i < fragments; i += threads) {
            const float4 f = reinterpret_cast<const float4*>(weight_frag)[i];
            const float m = fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w)));
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (j == (i >> 5) % NT) absmax[j] = fmaxf(absmax[j], m);  // channel j * 8 + g (lane == i & 31)
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            float m = fmaxf(absmax[j], __shfl_xor_sync(0xffffffffu, absmax[j], 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            if (t == 0) atomicMax(&weight_absmax_bits[j * 8 + g], __float_as_uint(m));
        }
    }
    __syncthreads();  // the maxima are complete; every weight copy is issued (the tap offsets overwrite weight_index)
    if constexpr (SPLIT3) {
        if (tid < 8 * NT) weight_exponent[tid] = f16_scale_exponent(__uint_as_float(weight_absmax_bits[tid]));
        // The first sample's r(n, ci), by the lanes that requested its samples (the barrier at the end of step 1
        // orders it before use).
        __syncwarp();
        for (int t = tid; t < kShiftSamples * p.c_in; t += threads)
            if (t % kShiftSamples == 0) shifts[t / kShiftSamples] = input_shift_of(shift_elements + t);
        // Scaled by 2^(the exponent above) (exact) and split into FP16 (hi, lo) pairs in place: (hi of k8 steps 2s,
        // 2s + 1, lo of the same).
        for (int i = tid; i < fragments; i += threads) {
            uint4& f = reinterpret_cast<uint4*>(weight_frag)[i];
            const int co = ((i >> 5) % NT) * 8 + ((i & 31) >> 2);
            const float scale = exp2_int(f16_scale_exponent(__uint_as_float(weight_absmax_bits[co])));
            uint32_t h01, h23, l01, l23;
            split_f16(__uint_as_float(f.x) * scale, __uint_as_float(f.y) * scale, h01, l01);
            split_f16(__uint_as_float(f.z) * scale, __uint_as_float(f.w) * scale, h23, l23);
            f = make_uint4(h01, h23, l01, l23);
        }
    } else {
        for (int i = tid; i < fragments; i += threads) {  // TF32 mode: rounded to TF32 in place
            float2& f = reinterpret_cast<float2*>(weight_frag)[i];
            f = make_float2(tf32_value(f.x), tf32_value(f.y));
        }
    }
    //    Tap offsets.
    for (int i = tid; i < p.tap_steps * 4; i += threads) {
        const int kk = (i >> 2) * 8 + (i & 3);  // taps t and t + 4 of tap step i / 4
        taps[i] = make_int2(tap_offset(kk, p.tap_order, p.c_in, p.k, kh_taps, p.box_pitch, p.h, p.w),
                            tap_offset(kk + 4, p.tap_order, p.c_in, p.k, kh_taps, p.box_pitch, p.h, p.w));
    }
    //    This thread's rows (row_out is complete: __syncthreads_count is a barrier): valid bit (i, h) for
    //    rows g and g + 8 of its warp's tile i; the warp's count of valid rows.
    uint32_t valid_bits = 0;
    int warp_valid = 0;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const bool v = row_out[warp_row0 + i * tile_stride + g + 8 * h] >= 0;
            valid_bits |= static_cast<uint32_t>(v) << (2 * i + h);
            warp_valid += __popc(__ballot_sync(0xffffffffu, v) & 0x11111111u);  // lanes t = 0: one per row
        }
    if (lane == 0) {
        warp_count[warp] = static_cast<float>(warp_valid);
        warp_inv_count[warp] = warp_valid > 0 ? 1.0 / warp_valid : 0.0;
    }
    const float warp_inv = warp_valid > 0 ? 1.f / static_cast<float>(warp_valid) : 0.f;
    const double cta_count = valid_rows, cta_inv_count = valid_rows > 0 ? 1.0 / valid_rows : 0.0;

    __syncthreads();  // the weight fragments and tap offsets are complete before any warp's first GEMM

    int parity = 0;
    uint32_t slot_phase = 0;  // bit s: the phase of slot s's mbarrier to wait for next
    for (int64_t n = first; n < p.batch; n += clusters, parity ^= 1) {
        // 2. The box of sample n: requested during the sample before into the other buffer (prefetch), or
        //    now into the only one (every warp is past the previous GEMM: the barriers of steps 4-6).
        //    Once it is here, the next sample's box is requested into the other buffer, whose last readers (the
        //    GEMM of the sample before) are past the barrier of step 4. With bulk copies no CTA barrier is needed
        //    here: every thread waits on the box's mbarrier itself.
        const int b = p.prefetch ? parity : 0;
        float* box = boxes + b * box_floats;
        if (!p.prefetch && n != first) copy_box(n, 0);
        const bool has_next = n + clusters < p.batch;
        wait_box(b);
        // fp32 mode: the next sample's kShiftSamples elements per plane (input_shift), requested as a cp.async group
        // of their own before the next box's, one element per thread: request t is sample t % 16 of plane t / 16,
        // so the 16 of a plane come from 16 lanes of one warp (threads is a multiple of 32), which combine them
        // after the GEMM. (Thread ci requesting all 16 of plane ci's held its warp back: results/model_a/NOTES.md.)
        if (SPLIT3 && has_next) {
            for (int t = tid; t < kShiftSamples * p.c_in; t += threads) {
                const int ci = t / kShiftSamples, j = t % kShiftSamples;
                const float* plane = p.x + ((n + clusters) * p.c_in + ci) * static_cast<int64_t>(p.plane);
                cp_async_4(shift_elements + t, plane + shift_sample_offset(j, p.d, p.h, p.w), 4);
            }
            cp_async_commit();
        }
        if (p.prefetch && n + clusters < p.batch) copy_box(n + clusters, b ^ 1);
        // fp32 mode: the box's copied elements become x - r(n, ci) in place (see "The math"), and their max |.|
        // (every warp a slice, then all warps' maxima) gives the exponent that scales them into [2^14, 2^15) for
        // the FP16 operands; the products are scaled back after the GEMM (exact). The zeros past the copied
        // elements (the sample's end) feed only dropped rows and stay zero. box_pitch is a multiple of 4.
        int box_exponent = 0;
        if constexpr (SPLIT3) {
            float m = 0.f;
            const float* r = shifts + parity * p.c_in;
            for (int ci = 0; ci < p.c_in; ++ci) {
                const float c = r[ci];
                float4* channel = reinterpret_cast<float4*>(box + ci * p.box_pitch);
                for (int i = tid; 4 * i < box_copy; i += threads) {
                    float4 v = channel[i];
                    const int e = 4 * i;
                    v.x -= c;  // e < box_copy
                    v.y = e + 1 < box_copy ? v.y - c : v.y;
                    v.z = e + 2 < box_copy ? v.z - c : v.z;
                    v.w = e + 3 < box_copy ? v.w - c : v.w;
                    channel[i] = v;
                    m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
                }
            }
            // These generic writes before the bulk copy that refills this buffer two samples on (async proxy).
            if (bulk) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) box_max_warp[warp] = m;
            __syncthreads();
            m = 0.f;
            for (int w = 0; w < p.warps; ++w) m = fmaxf(m, box_max_warp[w]);
            box_exponent = f16_scale_exponent(m);
        }

        // 3. The implicit GEMM: rows = this warp's MT tiles, columns = NT x 8 channels, K in steps of 8.
        float acc[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

        // Every warp computes all MT of its tiles (the box and row table are sized for warps * MT tiles;
        // rows past this CTA's share are dropped like any invalid row): see warp_gemm.
        sample_gemm<NT, MT, SPLIT3, GEMM>(acc, box + warp_row0 + g, p, taps, weight_frag, lane, t,
                                          SPLIT3 ? exp2_int(box_exponent) : 1.f);
        if constexpr (SPLIT3) {  // acc * 2^-(box_exponent + weight exponent of the column), in two exact halves
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int total = box_exponent + weight_exponent[j * 8 + 2 * t + e];
                    const int half = total >> 1;
                    const float f1 = exp2_int(-half), f2 = exp2_int(half - total);
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int h = 0; h < 2; ++h) acc[i][j][2 * h + e] = acc[i][j][2 * h + e] * f1 * f2;
                }
        }

        // fp32 mode: the next sample's r(n, ci) into the other slot. That slot's last readers (step 2 of the sample
        // before) are past the barriers of steps 4-6, and this sample's barrier of step 4 orders it before its use.
        if (SPLIT3 && has_next) {
            if (!bulk && p.prefetch) cp_async_wait_all_but_newest();  // (the next box's cp.async group is newer)
            else cp_async_wait_all();
            __syncwarp();  // each lane waited for its own requests; this shows them to the warp's other lanes
            float* slot = shifts + (parity ^ 1) * p.c_in;
            for (int t = tid; t < kShiftSamples * p.c_in; t += threads)
                if (t % kShiftSamples == 0) slot[t / kShiftSamples] = input_shift_of(shift_elements + t);
        }

        // 4. Statistics of each warp's valid rows, per channel, from the registers: the sums of (y - c) and
        //    (y - c)^2 about a centre c of the channel, which only has to be near its values (the merge is exact
        //    for any c; M2 = s2 - s1^2 / n loses ((mean - c) / sigma)^2 ulps to cancellation). The fp32 mode
        //    takes the warp's mean of its valid rows (a pass of its own), the TF32 mode the value of the warp's
        //    first row (a shuffle), which saves a third of the pass. No barrier between the two.
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float c;
                if constexpr (SPLIT3) {
                    float v = 0.f;
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int h = 0; h < 2; ++h)
                            if (valid_bits >> (2 * i + h) & 1u) v += acc[i][j][2 * h + e];
                    c = sum_over_rows(v) * warp_inv;
                } else {
                    c = __shfl_sync(0xffffffffu, acc[0][j][e], t);  // row 0 of tile 0 (lane g = 0 of this t)
                }
                float v1 = 0.f, v2 = 0.f;
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        if (valid_bits >> (2 * i + h) & 1u) {
                            const float d = acc[i][j][2 * h + e] - c;
                            v1 += d;
                            v2 = fmaf(d, d, v2);
                        }
                v1 = sum_over_rows(v1);
                v2 = sum_over_rows(v2);
                if (g == 0) {
                    warp_sums[warp][j * 8 + 2 * t + e] = make_float2(v1, v2);
                    warp_centre[warp][j * 8 + 2 * t + e] = c;
                }
            }
        }
        __syncthreads();
        // 5. This CTA's (count, mean, M2) per channel, in float64 from the warps' (mean, sums), pushed into
        //    every CTA of the cluster (distributed shared memory, slot [parity][rank]) with st.async; each CTA
        //    waits on its slot's mbarrier until all of them are in. The slots alternate with the sample; a
        //    relaxed cluster barrier, arrived at once a CTA has read a slot (step 6) and waited on here before
        //    the next push, keeps a CTA that runs ahead from overwriting values another has yet to read.
        //    Sixteen lanes per channel, lane w holding warp w's part, sum with shuffles (a warp does two
        //    channels; the loop covers whole warps, as 8 * NT * 16 and the block are multiples of 32), and lane
        //    r pushes the result into CTA r. No division: 1 / count was computed once. (One thread per channel
        //    summing the warps in turn, while the other warps waited, measured 2 % slower on an H100.)
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every CTA has started / read the last slot
        const uint32_t slot_full = shared_address(&gathered_full[parity]);
        for (int i = tid; i < 8 * NT * 16; i += threads) {
            const int ch = i >> 4, w = i & 15;
            double nw = 0.0, inv = 0.0, centre = 0.0, s1 = 0.0, s2 = 0.0;  // a warp slot without a warp adds 0
            if (w < p.warps) {
                nw = warp_count[w];
                inv = warp_inv_count[w];
                centre = warp_centre[w][ch];
                s1 = warp_sums[w][ch].x;
                s2 = warp_sums[w][ch].y;
            }
            // sum of y = count * centre + sum of (y - centre); M2 = sum over warps of M2_w + n_w (mean_w - mean)^2
            const double mean = sum_over_16_lanes(nw * centre + s1) * cta_inv_count;
            const double dm = (centre - mean) + s1 * inv;
            const double m2 = sum_over_16_lanes((s2 - s1 * s1 * inv) + nw * dm * dm);
            double3* slot = gathered + (parity * cluster_size + rank) * 8 * NT + ch;
            if (cluster_size == 1) {  // st.async needs a cluster of two or more CTAs: a plain store
                if (w == 0) *slot = make_double3(cta_count, valid_rows > 0 ? mean : 0.0, fmax(m2, 0.0));
            } else if (w < cluster_size) {
                const uint32_t remote = map_to_rank(shared_address(slot), w);
                const uint32_t remote_full = map_to_rank(slot_full, w);
                store_async_f64(remote, cta_count, remote_full);
                store_async_f64(remote + 8, valid_rows > 0 ? mean : 0.0, remote_full);
                store_async_f64(remote + 16, fmax(m2, 0.0), remote_full);
            }
        }
        if (cluster_size == 1) {
            __syncthreads();
        } else {
            if (tid == 0) mbarrier_arrive_expect_bytes(slot_full, cluster_size * 8 * NT * sizeof(double3));
            mbarrier_wait<WaitScope::kCluster>(slot_full, slot_phase >> parity & 1u);
            slot_phase ^= 1u << parity;
        }
        // 6. Merge the cluster's (count, mean, M2), sixteen lanes per channel again (lane r: CTA r's part): mean
        //    first, then M2 about it; no division (1 / count is a parameter). Every CTA of the sample adds the
        //    same numbers in the same order, so all compute the same coefficients. The epilogue's coefficients
        //    fold the multiplier into the normalisation:
        //    m * clamp(a (y - mu), lo, hi) = clamp(s (y - mu), L, H) with s = a m = m^2 / sqrt(m^2 var + eps),
        //    [L, H] = m * [lo, hi] in increasing order (lo > hi clamps everything to hi, as torch.clamp does).
        //    Channels past C_out get s = 0 and L = H = -inf, so they never win the max.
        for (int i = tid; i < 8 * NT * 16; i += threads) {
            const int ch = i >> 4, r = i & 15;
            double3 v = make_double3(0.0, 0.0, 0.0);  // (count, mean, M2); a rank past the cluster adds 0
            if (r < cluster_size) v = gathered[(parity * cluster_size + r) * 8 * NT + ch];
            const double mean = sum_over_16_lanes(v.x * v.y) * p.inv_count;
            const double dm = v.y - mean;
            const double var = sum_over_16_lanes(v.z + v.x * dm * dm) * p.inv_count;
            if (r == 0) {
                float4 c = make_float4(0.f, 0.f, 0.f, -INFINITY);
                float top = -INFINITY;
                if (ch < p.c_out) {
                    const float m = __ldg(p.multiplier + ch);
                    const double md = m;
                    const float mu_hi = static_cast<float>(mean);
                    const float lo = p.lo > p.hi ? p.hi : p.lo;
                    const float bound_lo = m * lo, bound_hi = m * p.hi;  // rounded as m * clamp(...) would round
                    const double sd = md * md * rsqrt(md * md * var + static_cast<double>(p.eps));
                    // fp32 mode: (mu_hi, mu_lo, s, L), z = ((y - mu_hi) - mu_lo) s; TF32 mode: (-mu s, -, s, L),
                    // z = y s - mu s, one FMA (it loses |mu s| ulps, far below TF32's error; see step 7).
                    c = make_float4(SPLIT3 ? mu_hi : static_cast<float>(-mean * sd), static_cast<float>(mean - mu_hi),
                                    static_cast<float>(sd), fminf(bound_lo, bound_hi));
                    top = fmaxf(bound_lo, bound_hi);
                }
                coef[ch] = c;
                coef_hi[ch] = top;
            }
        }
        __syncthreads();
        // The slot has been read (its values are in coef, written before the barrier above): the cluster may
        // overwrite it. Waited on before the next push.
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

        // 7. Epilogue: clamp(s (y - mu), L, H), max over channels (the thread's channels, then the quad);
        //    lanes t = 0 and 1 store rows g and g + 8 of each tile. s (y - mu) is ((y - mu_hi) - mu_lo) s in the
        //    fp32 mode (exact to rounding however large mu is: inputs shifted by +100) and y s - mu s, one FMA,
        //    in the TF32 mode, whose error (an ulp of |mu s|) stays far below the TF32 products' own.
        float4 cf[NT][2];
        float top[NT][2];
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                cf[j][e] = coef[j * 8 + 2 * t + e];
                top[j][e] = coef_hi[j * 8 + 2 * t + e];
            }
        float* out_n = p.out + n * (static_cast<int64_t>(p.od) * p.oh * p.ow);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            float best[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                best[h] = -INFINITY;
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float4 c = cf[j][e];
                        const float z = SPLIT3 ? ((acc[i][j][2 * h + e] - c.x) - c.y) * c.z
                                               : fmaf(acc[i][j][2 * h + e], c.z, c.x);
                        best[h] = nan_max(best[h], nan_min(nan_max(z, c.w), top[j][e]));
                    }
                best[h] = nan_max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 1));
                best[h] = nan_max(best[h], __shfl_xor_sync(0xffffffffu, best[h], 2));
            }
            const int h = t & 1;
            if (t < 2 && (valid_bits >> (2 * i + h) & 1u))
                out_n[row_out[warp_row0 + i * tile_stride + g + 8 * h]] = h ? best[1] : best[0];
        }
    }
    // Matches the last arrive: no CTA leaves while another may still store into its shared memory.
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#else
    __trap();  // needs sm_90 (thread-block clusters); the host refuses to launch it on older GPUs
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side: the plan (cluster size, shared memory), the envelope, the launcher.
// ---------------------------------------------------------------------------------------------

inline std::string str_of(c10::IntArrayRef sizes) {
    std::string text = "(";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + ")";
}

// Per-device facts, read once per device (a forward should not pay for runtime queries).
struct DeviceLimits {
    int smem_optin = 0;  // most dynamic shared memory one block may opt in to (bytes)
    int sms = 0;
    int major = 0;
};

const DeviceLimits& device_limits(int device) {
    static std::mutex mutex;
    static std::map<int, DeviceLimits> cache;  // map nodes never move: references stay valid
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(device);
    if (it == cache.end()) {
        DeviceLimits limits;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.sms, cudaDevAttrMultiProcessorCount, device));
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.major, cudaDevAttrComputeCapabilityMajor, device));
        it = cache.emplace(device, limits).first;
    }
    return it->second;
}

// Shared-memory wavefronts of one CTA-wide pass of A-fragment loads: for each tap step, the loads of taps
// t = 0..3 and t + 4 (each one per m16 half: the same count), with the words g + off(tap) for g = 0..7 and
// 32 banks of 4 bytes. The ideal is 2 per tap step (a k-step of the flat GEMM; with kh reuse, the taps of
// kernel row 0, whose loads serve all k rows).
int64_t a_load_wavefronts(int order, int box_pitch, int c_in, int k, int kh_taps, int h, int w, int tap_steps) {
    int64_t total = 0;
    for (int kk0 = 0; kk0 < 8 * tap_steps; kk0 += 4) {
        int words[32][32];  // per bank, the distinct words it serves (at most 32)
        int count[32] = {};
        int worst = 0;
        for (int t = 0; t < 4; ++t) {
            const int off = tap_offset(kk0 + t, order, c_in, k, kh_taps, box_pitch, h, w);
            for (int g = 0; g < 8; ++g) {
                const int word = off + g, bank = word & 31;
                bool seen = false;
                for (int i = 0; i < count[bank]; ++i) seen = seen || words[bank][i] == word;
                if (!seen) words[bank][count[bank]++] = word;
                worst = std::max(worst, count[bank]);
            }
        }
        total += worst;
    }
    return total;
}

// The tap order and box pitch (>= min_pitch, a multiple of 4 for the 16-byte copies, at most 28 floats more,
// and only where `fits(pitch)`) with the fewest A-load wavefronts; ties keep the smaller pitch and order.
struct TapLayout {
    int order = 0;
    int64_t pitch = 0;
    int64_t wavefronts = 0;
};
template <typename Fits>
TapLayout pick_tap_layout(int c_in, int k, int kh_taps, int h, int w, int tap_steps, int64_t min_pitch,
                          const Fits& fits) {
    TapLayout best{0, min_pitch, a_load_wavefronts(0, static_cast<int>(min_pitch), c_in, k, kh_taps, h, w, tap_steps)};
    for (int64_t pitch = min_pitch; pitch <= min_pitch + 28; pitch += 4) {
        if (!fits(pitch)) break;
        for (int order = 0; order < 3; ++order) {
            const int64_t waves = a_load_wavefronts(order, static_cast<int>(pitch), c_in, k, kh_taps, h, w, tap_steps);
            if (waves < best.wavefronts) best = TapLayout{order, pitch, waves};
        }
    }
    return best;
}

// n8 tiles per warp for C_out output channels (NT): 1, 2 or 4.
inline int n_tiles_for(int64_t c_out) { return c_out <= 8 ? 1 : (c_out <= 16 ? 2 : 4); }

struct Plan {
    Params params{};
    int nt = 2;
    int mt = 8;  // m16 tiles per warp (MT)
    int cluster = 1;
    size_t smem_bytes = 0;
    int64_t a_wavefronts = 0;  // shared-memory wavefronts of one pass of A-fragment loads (ideal: 2 * tap_steps)
    std::string problem;  // empty when v3 applies
};


// Everything but the pointers, from the sizes. `problem` says why v3 does not apply. The shared-memory
// check uses the fp32 mode's (larger) footprint, so the envelope does not depend on allow_tf32.
Plan make_plan(c10::IntArrayRef in_size, int64_t c_in, int64_t c_out, c10::IntArrayRef kernel, int device,
               bool split3, int64_t batch, int64_t cluster_request, int64_t warps_request, int64_t mt_request,
               bool kh_reuse_allowed) {
    Plan plan;
    const DeviceLimits& limits = device_limits(device);
    if (limits.major < 9) {
        plan.problem = "needs compute capability 9.0 or newer (thread-block clusters)";
        return plan;
    }
    if (in_size.size() != 3 || kernel.size() != 3) {
        plan.problem = "in_size and kernel must have 3 entries";
        return plan;
    }
    const int64_t k = kernel[0];
    if (kernel[1] != k || kernel[2] != k || k < 1 || k > kMaxKernel) {
        plan.problem = "the kernel must be cubic with side 1.." + std::to_string(kMaxKernel) + ", got " + str_of(kernel);
        return plan;
    }
    if (c_out < 1 || c_out > kMaxOutChannels) {
        plan.problem = "C_out must be in 1.." + std::to_string(kMaxOutChannels) + ", got " + std::to_string(c_out);
        return plan;
    }
    if (c_in < 1) {
        plan.problem = "C_in must be >= 1";
        return plan;
    }
    const int64_t d = in_size[0], h = in_size[1], w = in_size[2];
    if (d < k || h < k || w < k) {
        plan.problem = "the input " + str_of(in_size) + " is smaller than the kernel";
        return plan;
    }
    const int64_t od = d - k + 1, oh = h - k + 1, ow = w - k + 1;
    const int64_t plane = d * h * w;
    if (c_in * plane >= (int64_t{1} << 31)) {
        plan.problem = "a sample has 2^31 or more input elements";
        return plan;
    }
    const int64_t K = c_in * k * k * k;
    // k8 steps of the reduction; the fp32 mode takes them in pairs (k16 steps of FP16 products), so an even count.
    // The envelope is checked with the fp32 mode's footprint, which is the larger.
    const int64_t ksteps_fp32 = (K + 15) / 16 * 2;
    const int64_t ksteps = split3 ? ksteps_fp32 : (K + 7) / 8;
    const int nt = n_tiles_for(c_out);
    const int64_t mt = mt_request > 0 ? mt_request : kTilesPerWarp / nt;
    const int64_t warps_max = warps_request > 0 ? warps_request : kDefaultWarps;
    const int64_t max_tiles = warps_max * mt;
    const int64_t flat_rows = od * h * w;
    const int64_t total_tiles = (flat_rows + 15) / 16;
    const int64_t halo = (k - 1) * (h * w + w + 1);

    // cs CTAs per sample: each takes `tiles` m16 tiles, computed by ceil(tiles / MT) warps of MT tiles. Every CTA
    // must own at least one row of the sample (the kernel's box copy assumes row0 < D H W): e.g. 29 tiles over 13
    // CTAs of 3 would leave the last 3 CTAs without rows, so 13 is refused there (15 CTAs of 2 tiles are not).
    auto every_cta_has_rows = [&](int64_t cs) { return (cs - 1) * ((total_tiles + cs - 1) / cs) < total_tiles; };
    auto try_cluster = [&](int64_t cs, size_t& bytes, int64_t& tiles, int64_t& pitch) {
        tiles = (total_tiles + cs - 1) / cs;
        if (tiles > max_tiles || !every_cta_has_rows(cs)) return false;
        const int64_t tiles_alloc = (tiles + mt - 1) / mt * mt;
        pitch = (tiles_alloc * 16 + halo + 3) / 4 * 4;
        bytes = SmemLayout{nt, true}.total(static_cast<int>(ksteps_fp32), static_cast<int>(cs),
                                           static_cast<int>(tiles_alloc), static_cast<int>(c_in),
                                           static_cast<int>(pitch), false);
        return bytes <= static_cast<size_t>(limits.smem_optin - kStaticSmemReserve) && ksteps < (1 << 20);
    };
    int64_t cs = 0, tiles = 0, pitch = 0;
    size_t bytes = 0;
    if (cluster_request > 0) {
        if (cluster_request > kMaxCluster || cluster_request > total_tiles ||
            !try_cluster(cluster_request, bytes, tiles, pitch)) {
            plan.problem = "cluster_size " + std::to_string(cluster_request) + " does not fit this problem";
            if (cluster_request <= total_tiles && !every_cta_has_rows(cluster_request))
                plan.problem += " (" + std::to_string(total_tiles) + " tiles of 16 rows would leave CTAs without rows)";
            return plan;
        }
        cs = cluster_request;
    } else {
        for (int64_t c = 1; c <= kMaxCluster; ++c)
            if (try_cluster(c, bytes, tiles, pitch)) { cs = c; break; }
        if (cs == 0) {
            plan.problem = "a sample needs more than " + std::to_string(kMaxCluster) +
                           " CTAs (flat rows " + std::to_string(flat_rows) + ", C_in*k^3 " + std::to_string(K) +
                           ") within " + std::to_string(limits.smem_optin - kStaticSmemReserve) + " bytes of shared memory each";
            return plan;
        }
    }
    const int64_t warps = (tiles + mt - 1) / mt;
    // The envelope above is the fp32 mode's footprint with one box; a second box is added when it fits
    // (then the next sample's box loads while this one is computed).
    const size_t smem_cap = static_cast<size_t>(limits.smem_optin - kStaticSmemReserve);
    const auto footprint_for = [&](int64_t steps, int64_t box_pitch, bool prefetch) {
        return SmemLayout{nt, split3}.total(static_cast<int>(steps), static_cast<int>(cs), static_cast<int>(warps * mt),
                                            static_cast<int>(c_in), static_cast<int>(box_pitch), prefetch);
    };
    // kh reuse (warp_gemm_kh_reuse): each A fragment feeds the k kernel rows. Its warps own whole lines of
    // W / 16 tiles side by side, so W must be a multiple of 16 and the warps a multiple of W / 16; its weight
    // fragments (k * ceil(C_in k^2 / 8) k-steps, more than the flat GEMM's) must fit beside one box.
    const int64_t tap_steps_reuse = split3 ? (c_in * k * k + 15) / 16 * 2 : (c_in * k * k + 7) / 8;
    const bool kh_reuse = kh_reuse_allowed && kh_reuse_built(nt, split3) && k >= 2 && k <= kKhReuseMaxKernel &&
                          w % 16 == 0 && warps % (w / 16) == 0 &&
                          footprint_for(k * tap_steps_reuse, pitch, false) <= smem_cap;
    const int64_t ksteps_used = kh_reuse ? k * tap_steps_reuse : ksteps;
    const int64_t tap_steps = kh_reuse ? tap_steps_reuse : ksteps;
    const auto footprint = [&](int64_t box_pitch, bool prefetch) {
        return footprint_for(ksteps_used, box_pitch, prefetch);
    };
    const bool prefetch = footprint(pitch, true) <= smem_cap;
    // A wider box pitch where it removes bank conflicts from the A-fragment loads and still fits.
    const TapLayout taps = pick_tap_layout(
        static_cast<int>(c_in), static_cast<int>(k), static_cast<int>(kh_reuse ? 1 : k), static_cast<int>(h),
        static_cast<int>(w), static_cast<int>(tap_steps), pitch, [&](int64_t candidate) {
            return footprint(candidate, prefetch) <= smem_cap &&
                   static_cast<int64_t>(c_in) * candidate < (int64_t{1} << 31);
        });
    pitch = taps.pitch;
    bytes = footprint(pitch, prefetch);

    Params& P = plan.params;
    P.c_in = static_cast<int>(c_in);
    P.c_out = static_cast<int>(c_out);
    P.k = static_cast<int>(k);
    P.d = static_cast<int>(d); P.h = static_cast<int>(h); P.w = static_cast<int>(w);
    P.od = static_cast<int>(od); P.oh = static_cast<int>(oh); P.ow = static_cast<int>(ow);
    P.hw = static_cast<int>(h * w);
    P.plane = static_cast<int>(plane);
    P.flat_rows = static_cast<int>(flat_rows);
    P.tiles_per_cta = static_cast<int>(tiles);
    P.box_pitch = static_cast<int>(pitch);
    P.tap_order = taps.order;
    P.ksteps = static_cast<int>(ksteps_used);
    P.kh_reuse = kh_reuse ? 1 : 0;
    P.tap_steps = static_cast<int>(tap_steps);
    P.warps = static_cast<int>(warps);
    P.prefetch = prefetch ? 1 : 0;
    P.tc_accumulate = split3 && ksteps_used <= kTcAccumulateMaxKsteps ? 1 : 0;
    P.batch = batch;
    P.inv_count = 1.0 / static_cast<double>(od * oh * ow);
    plan.nt = nt;
    plan.mt = static_cast<int>(mt);
    plan.cluster = static_cast<int>(cs);
    plan.smem_bytes = bytes;
    plan.a_wavefronts = taps.wavefronts;
    return plan;
}

// Launch configuration for `clusters` clusters, with the cluster attribute; `attr` must outlive the config's use.
cudaLaunchConfig_t launch_config(const Plan& plan, int64_t clusters, cudaStream_t stream, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(plan.cluster * clusters), 1, 1);
    config.blockDim = dim3(static_cast<unsigned>(plan.params.warps * 32), 1, 1);
    config.dynamicSmemBytes = plan.smem_bytes;
    config.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    return config;
}

// Clusters of this plan's shape that fit on the device at once (0: it cannot run; `why` then says which
// runtime call refused), after raising the kernel's dynamic shared-memory limit (the opt-in maximum less
// its static shared memory) and allowing non-portable cluster sizes; cached per (kernel, device, shape).
using KernelFn = void (*)(Params);

// Tiles per warp the kernel is built for, per n-tile count: 16 / NT (64 accumulators), and for NT = 1, 2 also
// 14 / NT, which makes 16 warps of a CTA hold the 112 tiles that 14 warps of 8 would (4 warps on each of the
// SM's 4 schedulers instead of 4, 4, 3, 3: the KernelBench size's plan). For NT = 2 also 4: where a batch
// leaves SMs idle, more CTAs of fewer tiles per warp. A warp runs its statistics and epilogue once per sample
// as straight-line code unrolled over its tiles (1 900 SASS instructions at 7 tiles in the fp32 mode), which a
// small batch fetches cold: at batches 1-4 of the KernelBench size (14 CTAs of 16 warps of 4 tiles instead of
// 16 CTAs of 8 warps of 7) the fp32 mode took 27.7 -> 21.6 us and the TF32 mode 16.1 -> 15.6 us on an H100
// (results/model_a/NOTES.md, twelfth session). The plan takes it only where it needs no more waves than the
// best plan of the other choices (choose_plan_uncached): at batch 16 it needed 3 waves of 7 clusters against 2
// of 15, and was 6 % (fp32) and 14 % (TF32) slower.
const std::vector<int>& mt_choices(int nt) {
    static const std::vector<int> one{16, 14}, two{8, 7, 4}, four{4};
    return nt == 1 ? one : (nt == 2 ? two : four);
}
// The small-batch choice among them (see above): NT = 2, 4 tiles per warp. It comes last in mt_choices: the
// search admits its plans by comparing their waves with the best of the choices before it.
constexpr bool small_batch_choice(int nt, int mt) { return nt == 2 && mt == 4; }

// The GEMM instantiation a plan runs (see kGemmAny): kGemmKh3TensorCoreSum where it is the plan's GEMM, unless
// `specialised` is false (tests compare the two).
int gemm_of(const Plan& plan, bool split3, bool specialised = true) {
    const Params& P = plan.params;
    return specialised && split3 && kh_reuse_built(plan.nt, split3) && P.kh_reuse && P.k == 3 && P.tc_accumulate
               ? kGemmKh3TensorCoreSum
               : kGemmAny;
}

// The instantiation for a plan's n-tiles, tiles per warp, accuracy mode and GEMM.
template <int NT, int MT>
KernelFn kernel_for_mode(bool split3, int gemm) {
    if (!split3) return fused_conv_instnorm_max_kernel<NT, MT, false, kGemmAny>;
    if constexpr (kh_reuse_built(NT, true)) {
        if (gemm == kGemmKh3TensorCoreSum) return fused_conv_instnorm_max_kernel<NT, MT, true, kGemmKh3TensorCoreSum>;
    }
    return fused_conv_instnorm_max_kernel<NT, MT, true, kGemmAny>;
}
KernelFn kernel_for(const Plan& plan, bool split3, bool specialised = true) {
    const int nt = plan.nt, mt = plan.mt, gemm = gemm_of(plan, split3, specialised);
    if (nt == 1) return mt == 16 ? kernel_for_mode<1, 16>(split3, gemm) : kernel_for_mode<1, 14>(split3, gemm);
    if (nt == 2) {
        if (mt == 8) return kernel_for_mode<2, 8>(split3, gemm);
        return mt == 7 ? kernel_for_mode<2, 7>(split3, gemm) : kernel_for_mode<2, 4>(split3, gemm);
    }
    return kernel_for_mode<4, 4>(split3, gemm);
}

// With one_cta_per_sm, the clusters that fit with at most one CTA on each SM (the query asks for all of an SM's
// shared memory): past that many, clusters share SMs even where other SMs are idle.
// It also sets the attributes the launch needs on the instantiation the plan runs (kernel_for).
int active_clusters(const Plan& plan, bool split3, int device, std::string* why = nullptr,
                    bool one_cta_per_sm = false, bool specialised = true) {
    static std::mutex mutex;
    static std::map<std::tuple<KernelFn, int, int, size_t, bool>, std::pair<int, std::string>> cache;
    const std::lock_guard<std::mutex> lock(mutex);
    const KernelFn kernel = kernel_for(plan, split3, specialised);
    const auto key = std::make_tuple(kernel, device, plan.cluster, plan.smem_bytes, one_cta_per_sm);
    auto it = cache.find(key);
    if (it == cache.end()) {
        std::string failed;
        cudaFuncAttributes attributes{};
        cudaError_t status = cudaFuncGetAttributes(&attributes, kernel);
        if (status != cudaSuccess) failed = "cudaFuncGetAttributes";
        int dynamic_max = 0;
        if (status == cudaSuccess) {
            dynamic_max = device_limits(device).smem_optin - static_cast<int>(attributes.sharedSizeBytes);
            status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_max);
            if (status != cudaSuccess) failed = "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)";
        }
        if (status == cudaSuccess) {
            status = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (status != cudaSuccess) failed = "cudaFuncSetAttribute(NonPortableClusterSizeAllowed)";
        }
        int clusters = 0;
        if (status == cudaSuccess) {
            cudaLaunchAttribute attr[1];
            cudaLaunchConfig_t config = launch_config(plan, 1, nullptr, attr);
            if (one_cta_per_sm) config.dynamicSmemBytes = static_cast<size_t>(dynamic_max);
            status = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
            if (status != cudaSuccess) failed = "cudaOccupancyMaxActiveClusters";
        }
        if (status != cudaSuccess) {
            (void)cudaGetLastError();  // clear the (non-sticky) error so that later calls do not report it
            failed += ": " + std::string(cudaGetErrorString(status));
            clusters = 0;
        }
        it = cache.emplace(key, std::make_pair(clusters, failed)).first;
    }
    if (why != nullptr) *why = it->second.second;
    return it->second.first;
}

// A cluster that cannot be scheduled, in words.
std::string unschedulable(const Plan& plan, const std::string& why) {
    return "a cluster of " + std::to_string(plan.cluster) + " CTAs with " + std::to_string(plan.smem_bytes) +
           " bytes of shared memory each cannot be scheduled on this GPU" + (why.empty() ? "" : " (" + why + ")");
}

// A CTA's work that does not shrink with its tiles, as a share of the plan's estimated time (choose_plan_uncached),
// in tiles of GEMM on one warp scheduler, times the CTA's warps: kCtaWorkCost / warps. What it stands for is fitted,
// not derived. Small batches on an H100 run much slower in CTAs of few warps than the tile count says (a sample of
// 13 tiles: 50 us in 13 CTAs of one warp, 20 us in one CTA of four), and the set-up (each thread prepares
// ksteps * NT / warps weight fragments, of ksteps * NT mma steps per tile) is one such part; the rest was not
// isolated. Any value from 50 to 113 ranked the 22 small-batch cases the model was fitted on equally well
// (results/model_a/NOTES.md, eighth round).
constexpr double kCtaWorkCost = 80.0;

// The plan forward uses. Candidates: every tiles-per-warp choice (mt_choices) and, with cluster_request 0,
// every cluster size from the smallest that fits to 16; the one with the least estimated time wins (see
// `cost`), with waves = ceil(batch / clusters resident at once) from the occupancy API: a cluster must fit
// in one GPC, so e.g. only 15 clusters of 7 CTAs fit on a 132-SM H100, leaving 27 SMs idle. For a small
// batch this spreads a sample over more CTAs.
Plan choose_plan_uncached(c10::IntArrayRef in_size, int64_t c_in, int64_t c_out, c10::IntArrayRef kernel, int device,
                          bool split3, int64_t batch, int64_t cluster_request, int64_t warps_request,
                          int64_t mt_request, bool kh_reuse) {
    // Estimated time, in tiles of GEMM on one warp scheduler: waves x (CTAs sharing the busiest SM) x (tiles of
    // the busiest of the SM's 4 schedulers: ceil(warps / 4) x MT), plus kCtaWorkCost / warps. Only
    // clusters that hold a sample are busy (a batch smaller than the clusters that fit launches one cluster per
    // sample), and they share SMs only past the `spread` clusters that fit one CTA per SM (a cluster must fit
    // in one GPC: e.g. 7 clusters of 16 CTAs on a 132-SM H100). On an H100 at the KernelBench size it picks
    // clusters of 8 CTAs of 16 warps of 7 tiles, the fastest of the configurations measured; for batches of 1 to
    // 64 it picked the fastest plan in 42 of 50 measured cases and one within 6 % of it in the other 8
    // (scripts/plan_sweep_model_a.py; results/model_a/NOTES.md, eighth round).
    const int64_t samples = std::max<int64_t>(batch, 1);
    const auto waves_of = [&](int clusters) { return (samples + clusters - 1) / clusters; };
    const auto cost = [&](const Plan& plan, int clusters, int spread) {
        const int64_t waves = waves_of(clusters);
        const int64_t busy = std::min<int64_t>(samples, clusters);
        const int64_t per_sm = (busy + spread - 1) / spread;
        return static_cast<double>(waves) * per_sm * ((plan.params.warps + 3) / 4) * plan.mt +
               kCtaWorkCost / plan.params.warps;
    };
    const int nt = n_tiles_for(c_out);
    // best: the least estimated time among the regular choices; small: among the small-batch choice, taken only
    // where it needs no more waves than best (or is the only one asked for or possible).
    Plan best, small, first;  // first: the first candidate, whose verdict is reported when none applies
    std::string reason;
    bool found = false, found_small = false, have_first = false;
    double best_cost = 0.0, small_cost = 0.0;
    int64_t best_waves = 0;
    for (const int mt : mt_choices(nt)) {
        if (mt_request > 0 && mt != mt_request) continue;
        Plan plan = make_plan(in_size, c_in, c_out, kernel, device, split3, batch, cluster_request, warps_request, mt,
                              kh_reuse);
        if (!have_first) {
            first = plan;
            have_first = true;
        }
        if (!plan.problem.empty()) continue;
        for (int64_t cs = plan.cluster; cs <= (cluster_request > 0 ? plan.cluster : kMaxCluster); ++cs) {
            Plan candidate = cs == plan.cluster
                                 ? plan
                                 : make_plan(in_size, c_in, c_out, kernel, device, split3, batch, cs, warps_request, mt,
                                             kh_reuse);
            if (!candidate.problem.empty()) continue;  // e.g. CTAs without rows; a larger cs may fit again
            std::string why;
            const int clusters = active_clusters(candidate, split3, device, &why);
            if (clusters < 1) {
                if (reason.empty()) reason = unschedulable(candidate, why);
                continue;
            }
            const int spread = std::max(1, std::min(clusters, active_clusters(candidate, split3, device, nullptr, true)));
            const double c = cost(candidate, clusters, spread);
            if (small_batch_choice(nt, mt)) {  // (evaluated after the regular choices: last in mt_choices)
                if ((!found || waves_of(clusters) <= best_waves) && (!found_small || c < small_cost)) {
                    small = candidate;
                    small_cost = c;
                    found_small = true;
                }
            } else if (!found || c < best_cost) {
                best = candidate;
                best_cost = c;
                best_waves = waves_of(clusters);
                found = true;
            }
        }
    }
    if (found_small && (!found || small_cost < best_cost)) return small;
    if (found) return best;
    if (first.problem.empty()) first.problem = reason.empty() ? unschedulable(first, "") : reason;
    return first;
}

// choose_plan_uncached, remembered per problem (a forward should not pay for the search).
Plan choose_plan(c10::IntArrayRef in_size, int64_t c_in, int64_t c_out, c10::IntArrayRef kernel, int device,
                 bool split3, int64_t batch, int64_t cluster_request, int64_t warps_request, int64_t mt_request,
                 bool kh_reuse) {
    static std::mutex mutex;
    static std::map<std::vector<int64_t>, Plan> cache;
    std::vector<int64_t> key(in_size.begin(), in_size.end());
    key.insert(key.end(), kernel.begin(), kernel.end());
    key.insert(key.end(), {c_in, c_out, device, split3, batch, cluster_request, warps_request, mt_request, kh_reuse});
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end())
        it = cache.emplace(key, choose_plan_uncached(in_size, c_in, c_out, kernel, device, split3, batch,
                                                     cluster_request, warps_request, mt_request, kh_reuse)).first;
    return it->second;
}

// The tiles_per_warp knob: 0 (pick) or one of mt_choices for C_out's n-tiles.
void check_tiles_per_warp(const char* who, int64_t tiles_per_warp, int64_t c_out) {
    const int nt = n_tiles_for(c_out);
    std::string allowed;
    bool ok = tiles_per_warp == 0;
    for (const int mt : mt_choices(nt)) {
        allowed += (allowed.empty() ? "" : ", ") + std::to_string(mt);
        ok = ok || tiles_per_warp == mt;
    }
    TORCH_CHECK(ok, who, ": tiles_per_warp must be 0 (pick) or one of ", allowed, " for C_out ", std::to_string(c_out),
                ", got ", std::to_string(tiles_per_warp));
}

std::string unsupported_reason(std::vector<int64_t> in_size, int64_t batch, int64_t c_in, int64_t c_out,
                               std::vector<int64_t> kernel, int64_t device) {
    TORCH_CHECK(device >= 0 && device < c10::cuda::device_count(), "unsupported_reason: no CUDA device ",
                std::to_string(device));
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    for (const bool split3 : {true, false}) {
        const Plan plan =
            choose_plan(in_size, c_in, c_out, kernel, static_cast<int>(device), split3, batch, 0, 0, 0, true);
        if (!plan.problem.empty()) return plan.problem;
    }
    return "";
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& multiplier,
                      double clamp_min, double clamp_max, double eps, bool allow_tf32, torch::Tensor out,
                      int64_t cluster_size, int64_t warps_per_cta, int64_t tiles_per_warp, bool kh_reuse,
                      bool specialised_gemm) {
    TORCH_CHECK(x.is_cuda(), "forward: x must be a CUDA tensor, got one on ", x.device().str());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "forward: x must be float32, got ", c10::toString(x.scalar_type()));
    TORCH_CHECK(x.dim() == 5, "forward: x must be 5-D (N, C_in, D, H, W), got shape ", str_of(x.sizes()));
    TORCH_CHECK(x.is_contiguous(), "forward: x must be contiguous (NCDHW)");
    const auto check_operand = [&](const char* name, const torch::Tensor& t) {
        TORCH_CHECK(t.device() == x.device(), "forward: ", name, " must be on ", x.device().str(), ", got ",
                    t.device().str());
        TORCH_CHECK(t.scalar_type() == torch::kFloat32, "forward: ", name, " must be float32, got ",
                    c10::toString(t.scalar_type()));
        TORCH_CHECK(t.is_contiguous(), "forward: ", name, " must be contiguous");
    };
    check_operand("weight", weight);
    check_operand("multiplier", multiplier);
    check_operand("out", out);
    const int64_t N = x.size(0), c_in = x.size(1);
    TORCH_CHECK(weight.dim() == 5 && weight.size(1) == c_in,
                "forward: weight must be (C_out, C_in, k, k, k) with C_in = ", std::to_string(c_in), ", got shape ",
                str_of(weight.sizes()));
    const int64_t c_out = weight.size(0), k = weight.size(2);
    TORCH_CHECK(multiplier.numel() == c_out, "forward: multiplier must hold one value per output channel (",
                std::to_string(c_out), "), got shape ", str_of(multiplier.sizes()));
    TORCH_CHECK(eps > 0.0, "forward: eps must be > 0, got ", std::to_string(eps));
    TORCH_CHECK(warps_per_cta >= 0 && warps_per_cta <= kMaxWarps, "forward: warps_per_cta must be 0 (pick) or 1..",
                std::to_string(kMaxWarps), ", got ", std::to_string(warps_per_cta));
    TORCH_CHECK(cluster_size >= 0 && cluster_size <= kMaxCluster, "forward: cluster_size must be 0 (pick) or 1..",
                std::to_string(kMaxCluster), ", got ", std::to_string(cluster_size));
    const int device = x.get_device();
    const c10::cuda::CUDAGuard device_guard(x.device());
    const bool split3 = !allow_tf32;
    check_tiles_per_warp("forward", tiles_per_warp, c_out);
    Plan plan = choose_plan(x.sizes().slice(2), c_in, c_out, weight.sizes().slice(2), device, split3, N, cluster_size,
                            warps_per_cta, tiles_per_warp, kh_reuse);
    TORCH_CHECK(plan.problem.empty(), "forward: outside v3's envelope: ", plan.problem);
    const int64_t od = x.size(2) - k + 1, oh = x.size(3) - k + 1, ow = x.size(4) - k + 1;
    TORCH_CHECK(od * oh * ow > 1, "forward: the conv output has one spatial element per channel; InstanceNorm3d "
                "needs more than one, as in PyTorch");
    TORCH_CHECK(out.dim() == 4 && out.size(0) == N && out.size(1) == od && out.size(2) == oh && out.size(3) == ow,
                "forward: out must have shape (N, Do, Ho, Wo) = ", str_of({N, od, oh, ow}), ", got ",
                str_of(out.sizes()));
    if (N == 0) return out;

    Params& P = plan.params;
    P.x = x.data_ptr<float>();
    P.weight = weight.data_ptr<float>();
    P.multiplier = multiplier.data_ptr<float>();
    P.out = out.data_ptr<float>();
    P.eps = static_cast<float>(eps);
    P.lo = static_cast<float>(clamp_min);
    P.hi = static_cast<float>(clamp_max);

    // Persistent clusters: as many as fit at once (at most one per sample); each loops over its samples.
    std::string why;
    const int active = active_clusters(plan, split3, device, &why, false, specialised_gemm);
    TORCH_CHECK(active >= 1, "forward: ", unschedulable(plan, why));
    const int64_t clusters = std::min<int64_t>(N, active);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t config = launch_config(plan, clusters, stream, attr);
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel_for(plan, split3, specialised_gemm), P));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

// The plan's choices, for notebooks and tests: cluster size, tiles per CTA, shared memory, n-tiles.
std::map<std::string, int64_t> plan_info(std::vector<int64_t> in_size, int64_t batch, int64_t c_in, int64_t c_out,
                                          std::vector<int64_t> kernel, bool allow_tf32, int64_t device,
                                          int64_t cluster_size, int64_t warps_per_cta, int64_t tiles_per_warp,
                                          bool kh_reuse) {
    const c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device));
    check_tiles_per_warp("plan_info", tiles_per_warp, c_out);
    const Plan plan = choose_plan(in_size, c_in, c_out, kernel, static_cast<int>(device), !allow_tf32, batch,
                                  cluster_size, warps_per_cta, tiles_per_warp, kh_reuse);
    TORCH_CHECK(plan.problem.empty(), "plan_info: outside v3's envelope: ", plan.problem);
    return {{"cluster_size", plan.cluster}, {"rows_per_cta", plan.params.tiles_per_cta * 16},
            {"smem_bytes", static_cast<int64_t>(plan.smem_bytes)}, {"n_tiles", plan.nt}, {"m_tiles_per_warp", plan.mt},
            {"k_steps", plan.params.ksteps}, {"warps", plan.params.warps}, {"prefetch", plan.params.prefetch},
            {"active_clusters", active_clusters(plan, !allow_tf32, static_cast<int>(device))},
            {"tap_order", plan.params.tap_order}, {"box_pitch", plan.params.box_pitch},
            {"a_load_wavefronts", plan.a_wavefronts}, {"tc_accumulate", plan.params.tc_accumulate},
            {"kh_reuse", plan.params.kh_reuse}, {"tap_steps", plan.params.tap_steps},
            {"gemm", gemm_of(plan, !allow_tf32)}};
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
std::vector<int64_t> shift_samples(int64_t depth, int64_t rows, int64_t cols) {
    TORCH_CHECK(depth >= 1 && rows >= 1 && cols >= 1 && depth * rows * cols < (int64_t{1} << 31),
                "shift_samples: depth, rows and cols must be >= 1 with a product < 2^31");
    std::vector<int64_t> out;
    for (int j = 0; j < kShiftSamples; ++j)
        out.push_back(shift_sample_offset(j, static_cast<int>(depth), static_cast<int>(rows), static_cast<int>(cols)));
    return out;
}

}  // namespace model_a_v3

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-79 v3: Conv3d -> InstanceNorm(m*y) -> clamp -> *m -> max over channels, one launch";
    m.def("unsupported_reason", &model_a_v3::unsupported_reason,
          "'' when v3 handles this configuration on `device`, else why not", py::arg("in_size"), py::arg("batch"),
          py::arg("c_in"), py::arg("c_out"), py::arg("kernel"), py::arg("device"));
    m.def("forward", &model_a_v3::forward, "out[n,s] = max_c m_c*clamp(instnorm(m_c*conv3d(x))[n,c,s], lo, hi)",
          py::arg("x"), py::arg("weight"), py::arg("multiplier"), py::arg("clamp_min"), py::arg("clamp_max"),
          py::arg("eps"), py::arg("allow_tf32"), py::arg("out"), py::arg("cluster_size") = 0,
          py::arg("warps_per_cta") = 0, py::arg("tiles_per_warp") = 0, py::arg("kh_reuse") = true,
          py::arg("specialised_gemm") = true);
    m.def("plan_info", &model_a_v3::plan_info, "the launch plan v3 picks for these sizes", py::arg("in_size"),
          py::arg("batch"), py::arg("c_in"), py::arg("c_out"), py::arg("kernel"), py::arg("allow_tf32"),
          py::arg("device"), py::arg("cluster_size") = 0, py::arg("warps_per_cta") = 0, py::arg("tiles_per_warp") = 0,
          py::arg("kh_reuse") = true);
    m.def("input_shift_rule", &model_a_v3::input_shift_rule,
          "fp32 mode: input_shift's r from a plane's 16 samples (as floats), computed on the host by the kernel's rule",
          py::arg("samples"));
    m.def("shift_samples", &model_a_v3::shift_samples,
          "fp32 mode: the flat offsets of input_shift's samples in a (depth, rows, cols) plane", py::arg("depth"),
          py::arg("rows"), py::arg("cols"));
}

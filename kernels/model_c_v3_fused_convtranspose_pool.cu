// model_c_v3_fused_convtranspose_pool.cu -- KernelBench L2-74, version 3: the whole model in one launch.
//
// What it computes
//   The reference model (kernels/model_c_convtranspose3d_leaky_pool.py) is
//       y = conv_transpose3d(x, weight, bias, stride, padding, output_padding)
//       out = max_pool3d(leaky(m * leaky(y)), P)                 (leaky(v) = v >= 0 ? v : slope * v)
//   with one multiplier m_c per output channel. This kernel reads x once, computes the transposed
//   conv on tensor cores tile by tile, pools it in registers and writes only `out`: the conv output
//   (32 x 32 x 64 x 64 per sample at the KernelBench size) never reaches device memory.
//
// The math
//   Transposed conv as a gather, per dimension:  y[o] = bias + sum_{ci, k} x[ci, i] * w[ci, co, k]
//   over the taps k with o + padding - k = i * stride, 0 <= i < in_size.
//   Stride phases: which taps reach an output o depends only on (o + padding) mod stride. A pooled
//   output p covers o = p * P + r, r in [0, P). When P is a multiple of the stride (P % s == 0),
//   (o + padding) mod s = (r + padding) mod s is the same for every p: window offset r is one stride
//   phase, an ordinary convolution with the taps k = (r + padding) mod s, + s, + 2s, ... and input
//   index i = p * (P / s) + (r + padding - k) / s. So each of the P^3 window offsets is one implicit
//   GEMM  [pooled positions] x [taps * C_in] x [C_out]  with no wasted (zero) taps; at the KernelBench
//   size (k 3, s 2, padding 1, P 2) the 8 offsets have 1, 2, 2, 4, 2, 4, 4, 8 taps (27 in all).
//   Pooling: the P^3 GEMMs of a tile land in the same registers (same rows = pooled positions), so
//   the max over the window is an element-wise max across them. For slope >= 0, f(v) = leaky(m *
//   leaky(v)) is non-decreasing where m >= 0 and non-increasing where m < 0 (the v2 identity), so the
//   kernel keeps max(sign(m) * y) and applies f once (sign(m) is folded into the staged weights, so the
//   pool is a plain max); for slope < 0 it keeps max(f(y)).
//   Tensor cores: TF32 products with fp32 accumulation, on Hopper's warpgroup instruction wgmma
//   (m64 x n(8 NT) x k8, A from registers, B = the weights from shared memory) when built for sm_90a,
//   else on mma.sync m16n8k8 with the same operands. The fp32-accurate default splits each operand
//   a = a_hi + a_lo into two TF32 numbers and accumulates a_lo*b_hi + a_hi*b_lo + a_hi*b_hi
//   ("3xTF32": about fp32's accuracy at 3x TF32's cost), each k8 step's three products (in the kernel
//   that shares A, each 16-channel entry's six) into a fresh partial sum that joins the accumulator
//   through an fp32 add (the tensor core truncates when it adds to a large running sum). The TF32 mode
//   (allow_tf32) does a_hi*b_hi only, like cuDNN with allow_tf32 (10-bit mantissas, relative error
//   ~1e-4). In the TF32 mode on sm_90a, when the pool equals the stride along W, the box holds
//   16-channel groups and pooled H and W are at least 8, a second kernel
//   (convtranspose_leaky_pool_ss_kernel) reads A from shared memory as well: the staged box, rounded
//   to TF32 in place, is wgmma's A operand as it stands (see the kernel's comment). Where,
//   besides, the pool equals the stride of 2 in every dimension with kernel 2, 3 or 4 the same along all
//   three (kShiftMasks) and 32-channel blocks, a third kernel (convtranspose_leaky_pool_shift_kernel) reads
//   A once per shift of the box and shares it across the window offsets that read that shift (27 (offset,
//   tap) pairs, 8 shifts at the KernelBench size): 8 warps, 8 accumulator sets in registers. It runs the
//   fp32-accurate mode too (A split into hi and lo in registers, two partial-sum sets) wherever the same
//   conditions hold and its hi and lo weights fit beside a full tile (kernel 2 or 3; not kernel 4).
//
// Tiling
//   One CTA = 16 warps = up to 512 pooled positions (a TD x TH x TW box of one sample, picked on the
//   host: 32 along W, then the D x H split that stages the fewest inputs) x a block of 8, 16 or 32
//   output channels (blockIdx.y). A warp owns 32 positions (two m16 tiles) x the channel block (NT n8
//   tiles); on wgmma, a warpgroup's m64 block i is the m16 tile i of its four warps. The CTA's weight
//   block is staged in shared memory once, sign(m) folded in, as wgmma's no-swizzle core matrices per
//   (tap, 8 input channels), split into TF32 hi and lo once in the fp32 mode (weight_chunk_offset).
//   CTAs are persistent: each loops over output tiles, and while it computes one tile, cp.async copies
//   the next tile's input box (zeros outside x; padded channels zeroed once) into the second of two
//   shared-memory buffers. The box interleaves channels (stage_input_box): in groups of 8 (fp32-
//   accurate) or 16 (TF32, when C_in pads to 16), a thread's A elements of a position for one or two
//   k8 steps sit in one 8- or 16-byte word, so a row takes one load per group instead of two or four.
//   Each CTA flattens the window offsets' taps (precomputed per dimension in the kernel parameters)
//   once into a shared-memory list with one entry per (tap, channel group): {input offset, the low word
//   of the weights' wgmma descriptor}, so each window offset's GEMM is one flat loop. The first entry of
//   a window starts its accumulator (wgmma without accumulate; in the fp32 mode the first partial sum
//   is the accumulator), so nothing is zeroed; window offsets without taps (kernel < stride) are folded
//   into the pool's start value. When a warp's 32 rows are one W line (tile W 32, unit step), its A
//   loads and output stores take immediate offsets (window_gemm<LINE>, store_tile<LINE_OUT>). The
//   epilogue applies f as u * (u >= 0 ? c_pos : c_neg) with two per-channel constants.
//   Small tiles (at most 128 or 256 positions, where the input box crowds a tile down: stride 1, or a
//   small problem) would leave 3 or 2 of the 4 warpgroups idle. In the kernel that loads A into
//   registers those take the same rows and a share of the window offsets instead (Params::window_split):
//   warpgroup set k computes window offsets k, k + split, ..., and the partial maxima meet through shared
//   memory (an exact max: the outputs are the same bits as one set walking every offset). The plan splits
//   where that shortens the busiest set's walk over the taps; the maxima may overwrite padded channels,
//   whose zeros their writers put back after the merge.
//   Registers: 128 per thread (the cap for 16 warps); the fp32 kernel with 32-channel blocks spills
//   40 bytes of stores on sm_90a (60 before the window split). That kernel keeps its set-up and pooling
//   code inline: written as the helpers the A-from-shared-memory kernel calls (stage_channel_tables,
//   pool_window, ...), ptxas allocated its registers differently and it spilled 90-108 bytes, 2.7 % slower.
//
// Speed (H100 80GB HBM3, KernelBench size): the run of record is results/model_c/timing.csv (notebook 03);
//   results/model_c/NOTES.md has the measured steps, the dropped ones and what should come next.

// Shapes and layouts
//   x          : (N, C_in, D, H, W) float32, contiguous (NCDHW), CUDA
//   weight     : (C_in, C_out, kD, kH, kW) float32, contiguous (nn.ConvTranspose3d's layout)
//   bias, m    : C_out float32 values each, contiguous
//   out        : (N, C_out, D'/P, H'/P, W'/P) float32, contiguous, with D' = (D-1)s - 2pad + k + out_pad;
//                every element is written
//
// Envelope (checked; `unsupported_reason` says why a configuration is outside, and the Python
//   wrapper then runs v2 instead)
//   groups 1, dilation 1 (what nn.ConvTranspose3d in the model uses), any N >= 0, C_in, C_out >= 1,
//   kernel 1..7, stride 1..P with P % stride == 0 in every dimension, padding and output_padding as
//   PyTorch allows, 1 <= P <= 8, any slope, C_out x the pooled output's D x H x W below 2^31, fewer
//   than 2^31 tiles, and the weight block plus two input boxes fitting in the GPU's shared memory
//   (232,448 bytes on an H100). The KernelBench configuration takes 226,576 bytes fp32-accurate (the
//   weights twice, hi and lo, beside 16-channel boxes) and 171,280 in TF32, with 512-position tiles. When
//   the weights crowd out the boxes, the plan narrows the channel block (32 -> 16 -> 8 channels) or
//   shrinks the tile (idle warps), whichever leaves a CTA more outputs per tile; a configuration that
//   fits in neither way runs v2. The TF32 kernel with A from shared memory needs full 512-position tiles
//   of 8 x 8 (h, w) blocks, as does the kernel that shares A; where they do not fit (or the other
//   conditions above fail), the kernel that loads A into registers runs (describe_plan says which).
//
// How to load it
//   torch.utils.cpp_extension.load_inline(name="model_c_v3", cpp_sources="",
//       cuda_sources=open("model_c_v3_fused_convtranspose_pool.cu").read(),
//       extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"])
//   (sm_90a: the wgmma code, runs on an H100 only; for other GPUs of compute capability 8.0 or newer
//   build for their own arch, e.g. compute_80/sm_80, which uses mma.sync)
//   ext.unsupported_reason(in_size, c_in, c_out, kernel, stride, padding, output_padding, pool, device,
//                          allow_tf32=False) -> "" when the fused path applies, else the reason
//   ext.forward(x, weight, bias, m, stride, padding, output_padding, pool, slope, allow_tf32, out,
//               channels_per_block=0, smem_a=True, share_a=True, split_windows=True) -> out
//       (channels per CTA: 8, 16, 32, or 0 to pick from C_out; smem_a=False keeps the TF32 mode on the
//       kernel that loads A into registers, share_a=False on the kernel that reads A from shared memory per
//       window offset, and the fp32-accurate mode on the kernel that loads A into registers, for comparison;
//       split_windows=False keeps a small tile's window offsets on one warpgroup set)
//   ext.describe_plan(in_size, batch, c_in, c_out, kernel, stride, padding, output_padding, pool, device,
//                     allow_tf32=False, channels_per_block=0, smem_a=True, share_a=True, split_windows=True)
//       -> {'problem', 'wgmma', 'kernel', 'tile', 'channels_per_block', 'channel_group', 'smem_bytes', 'tiles',
//           'window_split'}

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
#include <utility>
#include <vector>

namespace model_c_v3 {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 32;                  // two m16 tiles
constexpr int kRows = kWarps * kRowsPerWarp;      // pooled positions per CTA tile
constexpr int kMaxPool = 8;
constexpr int kMaxKernel = 7;

// The staged weight block, per (tap, chunk of 8 input channels): the k8 x (8 NT) slice of B as
// wgmma's K-major core matrices without swizzle, [n group (NT)][k half (2)][8 channels n][4 k]: each
// core matrix is 8 rows of 16 bytes, 128 bytes contiguous. In the fp32-accurate mode the chunk holds
// B's TF32 high part, then its low part (B = hi + lo, split once when staged); in the TF32 mode only
// the rounded B. mma.sync's B fragments read the same layout without bank conflicts (lane (g, t)
// reads n = g, k = t: offset 4 g + t covers the 32 banks once).
template <int NT, bool SPLIT3>
__host__ __device__ constexpr int weight_chunk_floats() { return 64 * NT * (SPLIT3 ? 2 : 1); }

// Offset of B's element (k, n) (k < 8, n < 8 NT) inside a chunk's high (or only) part.
__host__ __device__ constexpr int weight_chunk_offset(int k, int n) {
    return ((n / 8) * 2 + k / 4) * 32 + (n % 8) * 4 + k % 4;
}

// Division by a divisor known on the host, for numerators below 2^31 (Granlund and Montgomery's
// round-up method): n / d = (umulhi(n, mul) + n) >> shift with shift = ceil(log2 d) and
// mul = floor(2^32 (2^shift - d) / d) + 1; three instructions instead of ~20.
struct FastDiv {
    uint32_t mul = 1, shift = 0;  // d = 1
};

inline FastDiv make_fast_div(uint32_t d) {
    FastDiv f;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
    return f;
}

__device__ __forceinline__ int fast_div(int n, FastDiv f) {
    return static_cast<int>((__umulhi(static_cast<uint32_t>(n), f.mul) + static_cast<uint32_t>(n)) >> f.shift);
}

struct Params {
    const float* x;
    const float* weight;
    const float* bias;
    const float* multiplier;
    float* out;
    int in_channels, out_channels, ci_padded, taps;
    int in_size[3];    // D, H, W of x
    int kernel[3], stride[3], padding[3];
    int pool;
    int pooled[3];     // pooled output size per dimension
    int tile[3];       // pooled positions per CTA tile per dimension (powers of two, product <= kRows)
    int tile_log2[3];  // log2 of tile[]
    int tiles[3];      // tiles per dimension
    FastDiv tiles_div[3];  // division by tiles[]
    int c_min[3];      // lowest (r + padding - k) / stride over the window offsets r and taps k
    // Per dimension, the taps of window offset r are entries tap_start[d][r] .. tap_start[d][r + 1] - 1:
    // kernel index tap_k and box-relative input offset tap_c = (r + padding - k) / stride - c_min.
    int tap_start[3][kMaxPool + 1];
    int tap_k[3][kMaxPool * kMaxKernel];
    int tap_c[3][kMaxPool * kMaxKernel];
    int extent[3];     // input box extent per dimension
    FastDiv line_div, plane_div;  // division by extent[2] and extent[1] (box positions -> d, h, w)
    int quad_stride;   // floats between the four t planes of a channel group in the staged box (= 8 mod 32)
    int group_stride;  // floats between channel groups in the staged box (4 * quad_stride)
    int rows;          // tile[0] * tile[1] * tile[2]
    int windows;       // pool^3 window offsets
    int tap_entries;   // taps over all window offsets (x channel groups: the length of the CTA's tap list)
    int empty_windows; // 1 when some window offsets have no taps (kernel < stride): y = bias there
    int num_tiles;     // N * tiles[0] * tiles[1] * tiles[2] (< 2^31, checked)
    int window_split;  // 1, 2 or 4: warpgroups that share a tile's rows, each taking every window_split-th window
                       // offset (the A-in-registers kernel, where a small tile leaves warpgroups idle)
    float slope;
};

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float leaky(float v, float slope) { return v >= 0.f ? v : v * slope; }

// max that propagates NaN, as PyTorch's max_pool3d does (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// 4-byte asynchronous global -> shared copy; `valid` false writes a zero instead (src not read).
// `dst` is a shared-memory address (as from __cvta_generic_to_shared).
__device__ __forceinline__ void cp_async_f32(uint32_t dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

// Round to TF32 (10-bit mantissa, round to nearest, ties away): the bits an mma.sync .tf32 operand takes.
__device__ __forceinline__ uint32_t to_tf32(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

// v rounded to nearest (ties away) for an mma .tf32 operand: the tensor core ignores the low 13 bits,
// so adding half of their range is enough (CUTLASS calls this round_half_ulp_truncate). The add is done
// in float, v + 2^(e - 11) with 2^e the binade of v (two instructions), so that NaN stays NaN and
// infinities stay infinite: an integer add of 2^12 carries a NaN whose payload fills the top mantissa
// bits (0x7fffffff, the NaN CUDA's arithmetic produces) into the sign bit and hands the tensor core -0,
// a finite output where PyTorch's is NaN.
__device__ __forceinline__ float tf32_round(float v) {
    const float binade = __uint_as_float(__float_as_uint(v) & 0xff800000u);  // +-2^e; +-inf for NaN and inf
    return fmaf(binade, 0x1p-11f, v);
}
__device__ __forceinline__ uint32_t round_tf32_bits(float v) { return __float_as_uint(tf32_round(v)); }

// v = hi + lo for 3xTF32. hi: v rounded to nearest (ties away) at TF32's 10 mantissa bits by an
// integer add and mask (2 instructions; cvt.rna compiles to 3 on sm_90). lo = v - hi is exact in
// fp32; passed as is, the tensor core reads its top 19 bits, so hi + lo misses v by <= 2^-21 |v|,
// unbiased in sign. Infinities stay infinite in hi (their lo is NaN, as with cvt.rna).
__device__ __forceinline__ void split_tf32(float v, uint32_t& hi, uint32_t& lo) {
    hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(v - __uint_as_float(hi));
}

// d += a * b for one 16x8x8 tile. Fragments (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
//   a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4);   b0 (k=t, n=g)  b1 (k=t+4, n=g);
//   d0 (g, 2t)  d1 (g, 2t+1)  d2 (g+8, 2t)  d3 (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Hopper's warpgroup MMA (sm_90a): four warps (128 threads, warpgroup-aligned) issue one
// m64 x n(8 NT) x k8 product together. A comes from registers (per warp, mma.m16n8k8's A fragment of
// its 16 rows); B from shared memory through a descriptor; D (fp32) stays in registers, per warp the
// NT n8-tile fragments of mma.m16n8k8 in order. The instructions are asynchronous: wgmma_fence()
// orders register writes before them, wgmma_commit() closes a group, wgmma_wait<N>() waits until at
// most N groups are in flight. scripts/probes/wgmma_tf32.cu checks this recipe against a matmul.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MODEL_C_WGMMA 1
// Descriptor of a no-swizzle K-major operand at `smem`: start address, LBO = 128 B (the step between
// the two k halves of a core-matrix pair), SBO = 256 B (the step between 8-channel n groups), all >> 4.
// The low word (address, LBO) is what varies: the tap list stores it, k steps add to it (the address
// field never carries: shared memory ends below 2^18 bytes); the high word is the constant SBO.
__device__ __forceinline__ uint32_t weight_descriptor_low(const float* smem) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    return ((a & 0x3ffff) >> 4) | ((128 >> 4) << 16);
}
constexpr uint32_t kDescriptorHigh = 256 >> 4;
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// d = a * b (ACCUMULATE false: d is only written, so it needs no value before) or d += a * b, for the
// warpgroup's m64 x n(8 NT) x k8 tile; b by its descriptor's low word. TIED (with ACCUMULATE false): d = a * b
// in the form that reads and writes d (scale-d = 0 ignores what it reads, so d may hold no value yet): the
// product lands in d's own registers. The fp32-accurate shift kernel needs it: with d as a fresh output,
// ptxas gave every partial sum registers of its own and spilled ~500 bytes (marking the accumulators written
// first, with an empty asm, still left 24-44 bytes of spills).
template <int NT, bool ACCUMULATE, bool TIED = false>
__device__ __forceinline__ void wgmma_tf32(float (&d)[NT][4], const uint32_t (&a)[4], uint32_t b_desc_low) {
    static_assert(NT == 1 || NT == 2 || NT == 4, "NT is 1, 2 or 4");
    if constexpr (NT == 1 && (ACCUMULATE || TIED)) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %10, 0;\nmov.b32 hi, %9;\n"
            "mov.b64 desc, {%8, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, desc, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 1) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %10, 0;\nmov.b32 hi, %9;\n"
            "mov.b64 desc, {%8, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, desc, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 2 && (ACCUMULATE || TIED)) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %14, 0;\nmov.b32 hi, %13;\n"
            "mov.b64 desc, {%12, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, "
            "desc, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
              "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 2) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %14, 0;\nmov.b32 hi, %13;\n"
            "mov.b64 desc, {%12, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, "
            "desc, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]),
              "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 4 && (ACCUMULATE || TIED)) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %22, 0;\nmov.b32 hi, %21;\n"
            "mov.b64 desc, {%20, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, desc, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
              "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
              "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
              "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 4) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 desc;\nsetp.ne.b32 p, %22, 0;\nmov.b32 hi, %21;\n"
            "mov.b64 desc, {%20, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, desc, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]),
              "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]),
              "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]),
              "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_desc_low), "n"(kDescriptorHigh),
              "n"(ACCUMULATE ? 1 : 0));
    }
}

// The same product with A from shared memory too (the TF32 path that reads the input box in place,
// convtranspose_leaky_pool_ss_kernel): A by a no-swizzle K-major descriptor, {a_desc_low, a_desc_high}.
// Only the descriptors' low words vary per instruction; a_desc_high (SBO) is uniform over the CTA.
template <int NT, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_tf32_ss(float (&d)[NT][4], uint32_t a_desc_low, uint32_t a_desc_high,
                                              uint32_t b_desc_low) {
    static_assert(NT == 1 || NT == 2 || NT == 4, "NT is 1, 2 or 4");
    if constexpr (NT == 1 && ACCUMULATE) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %8, 0;\nmov.b32 hi, %7;\n"
            "mov.b64 ad, {%4, %5};\nmov.b64 bd, {%6, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, ad, bd, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 1) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %8, 0;\nmov.b32 hi, %7;\n"
            "mov.b64 ad, {%4, %5};\nmov.b64 bd, {%6, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, ad, bd, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 2 && ACCUMULATE) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %12, 0;\nmov.b32 hi, %11;\n"
            "mov.b64 ad, {%8, %9};\nmov.b64 bd, {%10, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, ad, bd, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
              "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 2) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %12, 0;\nmov.b32 hi, %11;\n"
            "mov.b64 ad, {%8, %9};\nmov.b64 bd, {%10, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, ad, bd, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]),
              "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 4 && ACCUMULATE) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %20, 0;\nmov.b32 hi, %19;\n"
            "mov.b64 ad, {%16, %17};\nmov.b64 bd, {%18, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, ad, bd, p, 1, 1;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
              "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
              "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
              "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    } else if constexpr (NT == 4) {
        asm volatile(
            "{\n.reg .pred p;\n.reg .b32 hi;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, %20, 0;\nmov.b32 hi, %19;\n"
            "mov.b64 ad, {%16, %17};\nmov.b64 bd, {%18, hi};\n"
            "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, ad, bd, p, 1, 1;\n}\n"
            : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]),
              "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]),
              "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]),
              "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3])
            : "r"(a_desc_low), "r"(a_desc_high), "r"(b_desc_low), "n"(kDescriptorHigh), "n"(ACCUMULATE ? 1 : 0));
    }
}
#endif

// Whether the loaded binary has the wgmma code (sm_90a), for the host to pick the kernel: this kernel,
// never launched, declares a different launch bound in the sm_90a device pass, and the host reads it
// with cudaFuncGetAttributes (DeviceLimits; no memory copy, so also safe during CUDA graph capture).
#if defined(MODEL_C_WGMMA)
constexpr int kWgmmaProbeThreads = 128;
#else
constexpr int kWgmmaProbeThreads = 64;
#endif
__global__ void __launch_bounds__(kWgmmaProbeThreads) wgmma_build_probe() {}

// x as a warp-uniform value: the compiler may then keep it, and what is computed from it, in uniform
// registers (the wgmma descriptors must be there; from ordinary registers each use costs moves). The
// warp must be converged.
__device__ __forceinline__ uint32_t warp_uniform(uint32_t x) { return __shfl_sync(0xffffffffu, x, 0); }

// Where tile `tile` sits: sample n, first pooled position p0, first input index lo of its box.
struct TileOrigin {
    int n;
    int p0[3];
    int lo[3];
};

__device__ __forceinline__ TileOrigin locate_tile(const Params& p, int tile) {
    TileOrigin o;
    for (int d = 2; d >= 0; --d) {
        const int rest = fast_div(tile, p.tiles_div[d]);
        o.p0[d] = (tile - rest * p.tiles[d]) * p.tile[d];
        o.lo[d] = o.p0[d] * (p.pool / p.stride[d]) + p.c_min[d];
        tile = rest;
    }
    o.n = tile;
    return o;
}

// The staged input box, channels interleaved for wide A loads. Channels go in groups of 4 * LANES
// (LANES = 4 when QUAD, else 2); channel c of group q sits in plane t = c % 4 at lane j = c / 4:
//     box[q * group_stride + t * quad_stride + position * LANES + j]
// so the thread with mma column t finds, at one position, the LANES channels t, t + 4, t + 8, ... it
// needs as A for one (LANES 2) or two (LANES 4) k8 steps in one 8- or 16-byte load: k = c % 8 as in
// the weight chunks, k step c / 8. quad_stride = 8 mod 32 floats makes those loads conflict-free
// when a warp's rows are consecutive positions.
template <bool QUAD>
__host__ __device__ constexpr int box_lanes() { return QUAD ? 4 : 2; }

// Start copying a tile's input box into `box` (cp.async, zero outside x). Threads take the box's
// (d, h, w) positions in order (coalesced along w); each works out its position's source and bounds
// once, then copies it for every input channel with two pointer steps per copy. The padded channels
// (c >= C_in) are zeroed once per kernel, not here.
template <bool QUAD, int THREADS = kThreads>
__device__ __forceinline__ void stage_input_box(const Params& p, const TileOrigin& o, float* box) {
    constexpr int kLanes = box_lanes<QUAD>(), kGroup = 4 * kLanes;
    const int64_t channel_stride = static_cast<int64_t>(p.in_size[0]) * p.in_size[1] * p.in_size[2];
    const float* x_n = p.x + static_cast<int64_t>(o.n) * p.in_channels * channel_stride;
    const int line = p.extent[2], positions = p.extent[0] * p.extent[1] * line;
    const uint32_t box_addr = static_cast<uint32_t>(__cvta_generic_to_shared(box));
    const uint32_t quad_bytes = 4u * p.quad_stride, group_bytes = 4u * p.group_stride;
    const int full_groups = p.in_channels / kGroup, rest = p.in_channels - full_groups * kGroup;
    for (int e = threadIdx.x; e < positions; e += THREADS) {
        const int row = fast_div(e, p.line_div), ew = e - row * line;
        const int ed = fast_div(row, p.plane_div), eh = row - ed * p.extent[1];
        const int id = o.lo[0] + ed, ih = o.lo[1] + eh, iw = o.lo[2] + ew;
        const bool ok = static_cast<unsigned>(id) < static_cast<unsigned>(p.in_size[0]) &&
                        static_cast<unsigned>(ih) < static_cast<unsigned>(p.in_size[1]) &&
                        static_cast<unsigned>(iw) < static_cast<unsigned>(p.in_size[2]);
        const float* src = ok ? x_n + (static_cast<int64_t>(id) * p.in_size[1] + ih) * p.in_size[2] + iw : p.x;
        const int64_t src_step = ok ? channel_stride : 0;  // outside x: zero-fill, src never read
        uint32_t dst = box_addr + 4u * kLanes * e;
        for (int q = 0; q < full_groups; ++q, dst += group_bytes)
#pragma unroll
            for (int c = 0; c < kGroup; ++c, src += src_step)
                cp_async_f32(dst + (c % 4) * quad_bytes + 4u * (c / 4), src, ok);
#pragma unroll
        for (int c = 0; c < kGroup; ++c, src += src_step)  // the last, partial group
            if (c < rest) cp_async_f32(dst + (c % 4) * quad_bytes + 4u * (c / 4), src, ok);
    }
}

// Taps of window offset r = (rd, rh, rw): the product of the per-dimension counts.
__host__ __device__ __forceinline__ int tap_count(const Params& p, int r) {
    const int rd = r / (p.pool * p.pool), rh = (r / p.pool) % p.pool, rw = r % p.pool;
    return (p.tap_start[0][rd + 1] - p.tap_start[0][rd]) * (p.tap_start[1][rh + 1] - p.tap_start[1][rh]) *
           (p.tap_start[2][rw + 1] - p.tap_start[2][rw]);
}

// The CTA's tap list in shared memory, built once: one entry per (tap, channel group) of each window
// offset, in order; window offset r owns entries list_start[r] .. list_start[r + 1] - 1. An entry is
// {offset of the group's input in the box (floats), its weight chunks: the low word of their wgmma
// descriptor, or (mma.sync) their offset in w_s}, so the GEMM loop is one flat loop over entries.
template <int WEIGHT_FLOATS_PER_CI, int LANES>
__device__ void build_tap_list(const Params& p, const float* w_s, int* list_start, int2* list) {
    const int groups = p.ci_padded / (4 * LANES);
    for (int r = threadIdx.x; r < p.windows; r += kThreads) {
        int start = 0;
        for (int q = 0; q < r; ++q) start += tap_count(p, q) * groups;
        list_start[r] = start;
        if (r == p.windows - 1) list_start[p.windows] = start + tap_count(p, r) * groups;
        const int rd = r / (p.pool * p.pool), rh = (r / p.pool) % p.pool, rw = r % p.pool;
        for (int jd = p.tap_start[0][rd]; jd < p.tap_start[0][rd + 1]; ++jd)
            for (int jh = p.tap_start[1][rh]; jh < p.tap_start[1][rh + 1]; ++jh)
                for (int jw = p.tap_start[2][rw]; jw < p.tap_start[2][rw + 1]; ++jw)
                    for (int q = 0; q < groups; ++q) {
                        // input index = p * step + (r + padding - k) / stride: the box-relative part
                        const int shift =
                            (p.tap_c[0][jd] * p.extent[1] + p.tap_c[1][jh]) * p.extent[2] + p.tap_c[2][jw];
                        const int tap = (p.tap_k[0][jd] * p.kernel[1] + p.tap_k[1][jh]) * p.kernel[2] + p.tap_k[2][jw];
                        const int weights = (tap * p.ci_padded + q * 4 * LANES) * WEIGHT_FLOATS_PER_CI;  // in w_s
                        const int input = shift * LANES + q * p.group_stride;
#if defined(MODEL_C_WGMMA)
                        list[start++] = make_int2(input, static_cast<int>(weight_descriptor_low(w_s + weights)));
#else
                        list[start++] = make_int2(input, weights);
#endif
                    }
    }
}

// One channel group of one tap: the A elements of its one (LANES 2) or two (LANES 4) k8 steps, one 8-
// or 16-byte load per row, rounded (TF32) or split (3xTF32), then their products. `b` locates the
// group's weight chunks: on wgmma the low word of their descriptor, on mma.sync their offset in w_s.
// FIRST: the window's first group, whose first k step starts acc (no zeroing pass, no add).
template <int NT, bool SPLIT3, bool QUAD, bool FIRST>
__device__ __forceinline__ void group_mma(float (&acc)[2][NT][4], const float* xa, const int (&rows)[4], uint32_t b,
                                          const float* w_s, int g, int t) {
    constexpr int kLanes = box_lanes<QUAD>(), kSteps = kLanes / 2;
    constexpr int kChunk = weight_chunk_floats<NT, SPLIT3>();
    using Lanes = typename std::conditional<QUAD, float4, float2>::type;
    // v[i][j]: row i's channel t + 4 j of the group; k step s takes lanes 2 s (k = t) and 2 s + 1 (k = t + 4).
    float v[4][kLanes];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const Lanes l = *reinterpret_cast<const Lanes*>(xa + rows[i]);
        v[i][0] = l.x;
        v[i][1] = l.y;
        if constexpr (QUAD) {
            v[i][2] = l.z;
            v[i][3] = l.w;
        }
    }
    // A fragments of the warp's two m16 tiles per k step: rows g, g + 8 at k = t, t + 4.
    uint32_t a_hi[kSteps][2][4], a_lo[kSteps][2][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const float f[4] = {v[2 * mt][2 * s], v[2 * mt + 1][2 * s], v[2 * mt][2 * s + 1], v[2 * mt + 1][2 * s + 1]};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (SPLIT3) split_tf32(f[j], a_hi[s][mt][j], a_lo[s][mt][j]);
                else a_hi[s][mt][j] = round_tf32_bits(f[j]);
            }
        }
#if defined(MODEL_C_WGMMA)
    // Warpgroup m64 block mt = m-tile mt of its four warps. No branch may separate a wgmma from its
    // wait (ptxas would serialize them all, C7520): FIRST and s are compile-time.
    constexpr uint32_t kStepDesc = kChunk * sizeof(float) >> 4;   // the next k step's chunk
    constexpr uint32_t kLoDesc = 64 * NT * sizeof(float) >> 4;    // B's low part after its high part
    if constexpr (SPLIT3) {
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const uint32_t hi = b + s * kStepDesc, lo = hi + kLoDesc;
            // Small terms first, into a fresh partial sum that joins the accumulator through an IEEE
            // (round-to-nearest) add: the tensor core truncates when it adds products to a large
            // running sum, and that bias, repeated over the K loop, costs ~4x fp32's error. The
            // window's first k step is a partial sum of its own: it goes to acc directly.
            wgmma_fence();
            if (FIRST && s == 0) {
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    wgmma_tf32<NT, false>(acc[mt], a_lo[s][mt], hi);
                    wgmma_tf32<NT, true>(acc[mt], a_hi[s][mt], lo);
                    wgmma_tf32<NT, true>(acc[mt], a_hi[s][mt], hi);
                }
                wgmma_commit();
                wgmma_wait<0>();
            } else {
                float part[2][NT][4];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    wgmma_tf32<NT, false>(part[mt], a_lo[s][mt], hi);
                    wgmma_tf32<NT, true>(part[mt], a_hi[s][mt], lo);
                    wgmma_tf32<NT, true>(part[mt], a_hi[s][mt], hi);
                }
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int j = 0; j < 4; ++j) acc[mt][nt][j] += part[mt][nt][j];
            }
        }
    } else {
        // All k steps of the group in one commit: the tensor core orders the products into acc.
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                if (FIRST && s == 0) wgmma_tf32<NT, false>(acc[mt], a_hi[s][mt], b + s * kStepDesc);
                else wgmma_tf32<NT, true>(acc[mt], a_hi[s][mt], b + s * kStepDesc);
            }
        wgmma_commit();
        wgmma_wait<0>();
    }
#else
    if (FIRST) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.f;
    }
    const float* wb = w_s + b + 4 * g + t;  // B fragments: lane (g, t) reads n = g, k = t and t + 4
#pragma unroll
    for (int s = 0; s < kSteps; ++s, wb += kChunk)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const uint32_t b0_hi = __float_as_uint(wb[nt * 64]), b1_hi = __float_as_uint(wb[nt * 64 + 32]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                if (SPLIT3) {
                    // Small terms first, into a fresh partial sum (see the wgmma branch).
                    const uint32_t b0_lo = __float_as_uint(wb[64 * NT + nt * 64]),
                                   b1_lo = __float_as_uint(wb[64 * NT + nt * 64 + 32]);
                    float part[4] = {0.f, 0.f, 0.f, 0.f};
                    mma_tf32(part, a_lo[s][mt], b0_hi, b1_hi);
                    mma_tf32(part, a_hi[s][mt], b0_lo, b1_lo);
                    mma_tf32(part, a_hi[s][mt], b0_hi, b1_hi);
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[mt][nt][j] += part[j];
                } else {
                    mma_tf32(acc[mt][nt], a_hi[s][mt], b0_hi, b1_hi);
                }
            }
        }
#endif
}

// One window offset's implicit GEMM: acc = A B over its `count` >= 1 (tap, channel group) entries (see
// build_tap_list), written from scratch. box_t = the input box + t * quad_stride (+ the warp's first
// row offset when LINE). LINE: the warp's 32 rows are 32 consecutive box positions (tile W 32, unit
// step along W), so the row offsets are constants and each load takes an immediate.
template <int NT, bool SPLIT3, bool QUAD, bool LINE>
__device__ __forceinline__ void window_gemm(float (&acc)[2][NT][4], const int2* entries, int count, const float* box_t,
                                            const int (&row_base)[4], const float* w_s, int g, int t) {
    constexpr int kLanes = box_lanes<QUAD>();
    int rows[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) rows[i] = LINE ? 8 * kLanes * i : row_base[i];
    const int2 first = entries[0];
    group_mma<NT, SPLIT3, QUAD, true>(acc, box_t + first.x, rows, static_cast<uint32_t>(first.y), w_s, g, t);
    for (int e = 1; e < count; ++e) {
        const int2 entry = entries[e];
        group_mma<NT, SPLIT3, QUAD, false>(acc, box_t + entry.x, rows, static_cast<uint32_t>(entry.y), w_s, g, t);
    }
}

// The tile's outputs, stored. POOL_FIRST: best holds the max of sign(m) (y - bias); f is applied here as
// f(u) = u * (u >= 0 ? c_pos : c_neg) with u = sign(m) best + bias, c_pos = m (m >= 0) or slope m, c_neg =
// slope^2 m (m >= 0) or slope m: leaky(m leaky(u)) for slope >= 0 with the cases worked out per channel
// (f_s holds {sign(m), bias, c_pos, c_neg}). Else best already holds max f(y). This thread's rows
// i = 0..3 are accumulator rows g, g + 8 of m-tiles 0 and 1, best[i / 2][nt][2 (i % 2) + c], and its
// channels 2 t + c of each n8 tile nt. LINE_OUT: the rows lie on one W line 8 apart (tile W 32), so one
// pointer per channel and immediate offsets; else one 32-bit offset per row.
template <int NT, bool LINE_OUT, bool POOL_FIRST>
__device__ __forceinline__ void store_tile(const Params& p, const float (&best)[2][NT][4], float* out_tile,
                                           const uint32_t (&in_plane)[4], const bool (&row_ok)[4], const float4* f_s,
                                           int co0, int t, int plane) {
    float* base = out_tile + static_cast<int64_t>(2 * t) * plane + (LINE_OUT ? in_plane[0] : 0u);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int n_local = nt * 8 + 2 * t + c;
            if (co0 + n_local >= p.out_channels) continue;
            const float4 k = f_s[n_local];
            float* dst = base + static_cast<int64_t>(nt * 8 + c) * plane;
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[i] = best[i / 2][nt][2 * (i % 2) + c];
                if (POOL_FIRST) {
                    const float u = fmaf(k.x, v[i], k.y);
                    v[i] = u * (u >= 0.f ? k.z : k.w);
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (row_ok[i]) {
                    if (LINE_OUT) dst[8 * i] = v[i];
                    else dst[in_plane[i]] = v[i];
                }
        }
}

// The CTA's weight block for the kernel that reads A from the box (TF32): B(k, n) = sign(m[co0 + n]) *
// weight[ci][co0 + n][tap] (so the pool is a plain max of sign(m) y), rounded to TF32, in chunk (tap, k
// step). A thread per (ci, n), walking the taps (contiguous in `weight`). k follows the box's order, not
// ci % 8 as in the register kernel: in a 16-channel group, plane t = c % 4 holds channels t, t + 4, t + 8,
// t + 12 in one 16-byte word, and planes 2 s and 2 s + 1 are k step s's two k halves, so channel c is
// k = (t % 2) * 4 + c / 4 of k step t / 2.
template <int NT>
__device__ __forceinline__ void stage_weights_box_order(const Params& p, float* w_s, int co0) {
    constexpr int kChannels = 8 * NT, kChunk = weight_chunk_floats<NT, false>();
    for (int pair = threadIdx.x; pair < p.ci_padded * kChannels; pair += kThreads) {
        const int n = pair % kChannels, ci = pair / kChannels;
        const bool ok = ci < p.in_channels && co0 + n < p.out_channels;
        const float sign = ok && __ldg(p.multiplier + co0 + n) < 0.f ? -1.f : 1.f;
        const float* src = p.weight + (static_cast<int64_t>(ci) * p.out_channels + co0 + n) * p.taps;
        const int c = ci % 16, plane = c % 4;
        const int step = (ci / 16) * 2 + plane / 2, k = (plane % 2) * 4 + c / 4;
        float* dst = w_s + step * kChunk + weight_chunk_offset(k, n);
        const int tap_step = (p.ci_padded / 8) * kChunk;
        for (int tap = 0; tap < p.taps; ++tap, dst += tap_step)
            dst[0] = __uint_as_float(to_tf32(ok ? __ldg(src + tap) * sign : 0.f));
    }
#if defined(MODEL_C_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes -> wgmma reads
#endif
}

// Whether float e of a staged box (stage_input_box's layout) holds a padded channel (c >= C_in). Those sit in
// the last channel group; the staging never writes them.
template <int LANES>
__device__ __forceinline__ bool padded_channel_float(const Params& p, int e) {
    const int last = (p.ci_padded / (4 * LANES) - 1) * p.group_stride;
    if (e < last) return false;
    const int rest = e - last, plane = rest / p.quad_stride;
    return (p.ci_padded - 4 * LANES) + 4 * ((rest - plane * p.quad_stride) % LANES) + plane >= p.in_channels;
}

// The padded channels of both boxes stay zero for the whole kernel (the staging never writes them): zero them
// once.
template <int LANES, int THREADS = kThreads>
__device__ __forceinline__ void zero_padded_channels(const Params& p, float* x_s, int box_floats) {
    if (p.in_channels == p.ci_padded) return;
    for (int e = (p.ci_padded / (4 * LANES) - 1) * p.group_stride + threadIdx.x; e < box_floats; e += THREADS)
        if (padded_channel_float<LANES>(p, e)) {
            x_s[e] = 0.f;
            x_s[box_floats + e] = 0.f;
        }
}

// The block's bias and multiplier (kept out of registers), read in the epilogue and, for a negative slope,
// each time a window offset is pooled; and the epilogue's per-channel constants (store_tile):
// {sign(m), bias, c_pos, c_neg}.
template <int CHANNELS, int THREADS = kThreads>
__device__ __forceinline__ void stage_channel_tables(const Params& p, int co0, float* bias_s, float* mult_s,
                                                     float4* f_s) {
    for (int n = threadIdx.x; n < CHANNELS; n += THREADS) {
        const bool ok = co0 + n < p.out_channels;
        bias_s[n] = ok ? __ldg(p.bias + co0 + n) : 0.f;
        mult_s[n] = ok ? __ldg(p.multiplier + co0 + n) : 0.f;
        const float m = mult_s[n], b = bias_s[n], s = p.slope;
        f_s[n] = make_float4(m >= 0.f ? 1.f : -1.f, b, m >= 0.f ? m : s * m, m >= 0.f ? s * s * m : s * m);
    }
}

// The pool's start: -inf, or, when some window offsets have no taps (kernel < stride), what they
// contribute: y = bias, i.e. acc = 0 (pool-first) or f(bias). Layout of best/acc: this thread's rows g,
// g + 8 of m-tiles (or m64 blocks' warp rows) 0 and 1 at [mt][nt][2 h + c], channel nt * 8 + 2 t + c.
template <int NT>
__device__ __forceinline__ void pool_start(const Params& p, float (&best)[2][NT][4], bool pool_first,
                                           const float* mult_s, const float* bias_s, int t) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const float m = mult_s[nt * 8 + 2 * t + c], b = bias_s[nt * 8 + 2 * t + c];
            const float start = !p.empty_windows ? -INFINITY
                                : pool_first      ? 0.f
                                                  : leaky(m * leaky(b, p.slope), p.slope);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) best[mt][nt][2 * h + c] = start;
        }
}

// Pool one window offset's products into `best`. The staged weights carry sign(m), so acc holds
// sign(m) * y (bias excluded) and the sign-selected pool is a plain max; for slope < 0 (f not
// monotone) it takes the max of f(y) over the window.
template <int NT>
__device__ __forceinline__ void pool_window(const Params& p, float (&best)[2][NT][4], const float (&acc)[2][NT][4],
                                            bool pool_first, const float* mult_s, const float* bias_s, int t) {
    if (pool_first) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) best[mt][nt][j] = nan_max(best[mt][nt][j], acc[mt][nt][j]);
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float m = mult_s[nt * 8 + 2 * t + c], b = bias_s[nt * 8 + 2 * t + c];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const float y = m >= 0.f ? acc[mt][nt][2 * h + c] : -acc[mt][nt][2 * h + c];
                        float& q = best[mt][nt][2 * h + c];
                        q = nan_max(q, leaky(m * leaky(y + b, p.slope), p.slope));
                    }
            }
    }
}

// store_tile for rows anywhere in the output: row_out[i] points at row i's element of this thread's first
// channel (2 t of the block), so a store is that pointer plus the channel's plane offset, the same for
// every thread (uniform: one register per channel, no per-store address arithmetic).
template <int NT, bool POOL_FIRST>
__device__ __forceinline__ void store_rows(const Params& p, const float (&best)[2][NT][4], float* const (&row_out)[4],
                                           const bool (&row_ok)[4], const float4* f_s, int co0, int t, int plane) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int n_local = nt * 8 + 2 * t + c;
            if (co0 + n_local >= p.out_channels) continue;
            const float4 k = f_s[n_local];
            const int64_t channel = static_cast<int64_t>(nt * 8 + c) * plane;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v = best[i / 2][nt][2 * (i % 2) + c];
                if (POOL_FIRST) {
                    const float u = fmaf(k.x, v, k.y);
                    v = u * (u >= 0.f ? k.z : k.w);
                }
                if (row_ok[i]) row_out[i][channel] = v;
            }
        }
}

// ---------------------------------------------------------------------------------------------
// Kernel. grid = (persistent CTAs over output tiles, channel blocks of 8 * NT); kThreads threads.
// Dynamic shared memory: the weight block [taps][ci_padded / 8] chunks (weight_chunk_floats each), two
// input boxes [ci_padded / (4 LANES)][4][quad_stride] (stage_input_box; the next tile's is copied in
// while this one's is used), the
// block's bias and multiplier, then the tap list (starts, padded to an even count, and int2 entries).
// Built for sm_90a, the products run on wgmma; otherwise on mma.sync (same operands and layouts).
// ---------------------------------------------------------------------------------------------
template <int NT, bool SPLIT3, bool QUAD>
__global__ void __launch_bounds__(kThreads, 1)
convtranspose_leaky_pool_kernel(const Params p) {
    constexpr int kChannels = 8 * NT;
    constexpr int kLanes = box_lanes<QUAD>();
    constexpr int kChunk = weight_chunk_floats<NT, SPLIT3>();
    extern __shared__ __align__(128) float smem[];
    float* w_s = smem;
    float* x_s = smem + static_cast<size_t>(p.taps) * (p.ci_padded / 8) * kChunk;

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int co0 = blockIdx.y * kChannels;

    // Start copying the first tile's input box, then stage the weight block (once) while it flies.
    int tile = blockIdx.x;
    if (tile < p.num_tiles) stage_input_box<QUAD>(p, locate_tile(p, tile), x_s);
    cp_async_commit();

    // B(k = ci, n) of tap `tap` = sign(m[co0 + n]) * weight[ci][co0 + n][tap], in chunk (tap, ci / 8).
    // A thread per (ci, n), walking the taps (contiguous in `weight`).
    for (int pair = threadIdx.x; pair < p.ci_padded * kChannels; pair += kThreads) {
        const int n = pair % kChannels, ci = pair / kChannels;
        const bool ok = ci < p.in_channels && co0 + n < p.out_channels;
        const float sign = ok && __ldg(p.multiplier + co0 + n) < 0.f ? -1.f : 1.f;  // acc = sign(m) * y
        const float* src = p.weight + (static_cast<int64_t>(ci) * p.out_channels + co0 + n) * p.taps;
        float* dst = w_s + (ci / 8) * kChunk + weight_chunk_offset(ci % 8, n);
        const int tap_step = (p.ci_padded / 8) * kChunk;
        for (int tap = 0; tap < p.taps; ++tap, dst += tap_step) {
            const float v = ok ? __ldg(src + tap) * sign : 0.f;
            if (SPLIT3) {
                uint32_t hi, lo;
                split_tf32(v, hi, lo);
                dst[0] = __uint_as_float(hi);
                dst[64 * NT] = __uint_as_float(lo);
            } else {
                dst[0] = __uint_as_float(to_tf32(v));
            }
        }
    }
#if defined(MODEL_C_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes -> wgmma reads
#endif


    // The block's bias and multiplier (kept out of registers), read in the epilogue and, for a negative
    // slope, each time a window offset is pooled.
    const int box_floats = (p.ci_padded / (4 * kLanes)) * p.group_stride;
    zero_padded_channels<kLanes>(p, x_s, box_floats);
    float* bias_s = x_s + 2 * box_floats;
    float* mult_s = bias_s + kChannels;
    float4* f_s = reinterpret_cast<float4*>(mult_s + kChannels);  // 16-byte aligned: box_floats = 0 mod 32
    for (int n = threadIdx.x; n < kChannels; n += kThreads) {
        const bool ok = co0 + n < p.out_channels;
        bias_s[n] = ok ? __ldg(p.bias + co0 + n) : 0.f;
        mult_s[n] = ok ? __ldg(p.multiplier + co0 + n) : 0.f;
        // The epilogue's per-channel constants (store_tile): {sign(m), bias, c_pos, c_neg}.
        const float m = mult_s[n], b = bias_s[n], s = p.slope;
        f_s[n] = make_float4(m >= 0.f ? 1.f : -1.f, b, m >= 0.f ? m : s * m, m >= 0.f ? s * s * m : s * m);
    }
    int* list_start = reinterpret_cast<int*>(f_s + kChannels);
    int2* list = reinterpret_cast<int2*>(list_start + ((p.windows + 2) & ~1));
    build_tap_list<kChunk / 8, kLanes>(p, w_s, list_start, list);  // visible after the loop's first barrier
    const bool pool_first = p.slope >= 0.f;  // the monotone rewrite (uniform across the grid)

    const int step_d = p.pool / p.stride[0], step_h = p.pool / p.stride[1], step_w = p.pool / p.stride[2];
    const bool line_rows = p.tile[2] == kRowsPerWarp && step_w == 1;  // see window_gemm
    // Window split (tiles of at most 128 or 256 rows): the warpgroups that would sit idle take the same rows
    // and a share of the window offsets, r = phase, phase + split, ...; the partial maxima meet in shared
    // memory after the GEMMs (an exact max, so the outputs are those of one warpgroup walking every offset).
    const int split = p.window_split;
    const int row_warps = kWarps / split;    // warps per row set (a multiple of 4: whole warpgroups)
    const int row_warp = warp % row_warps;   // this warp's rows are row_warp * 32 .. + 31
    const int phase = warp / row_warps;      // uniform per warpgroup
    const int warps_with_rows = (p.rows + kRowsPerWarp - 1) / kRowsPerWarp;  // <= row_warps
    // Sets 1.. leave 8 NT partial maxima per lane at partial_at (floats from the box's start, 32 apart).
    // restore_mask: which of them land on a padded channel, whose zero the set puts back after the merge.
    static_assert(8 * NT <= 32, "restore_mask holds one bit per partial maximum");
    const int partial_at = ((phase - 1) * warps_with_rows + row_warp) * 32 * 8 * NT + lane;
    uint32_t restore_mask = 0u;
    if (split > 1 && phase > 0 && row_warp < warps_with_rows && p.in_channels < p.ci_padded)
        for (int i = 0; i < 8 * NT; ++i)
            if (padded_channel_float<kLanes>(p, partial_at + 32 * i)) restore_mask |= 1u << i;

    for (int buf = 0; tile < p.num_tiles; tile += static_cast<int>(gridDim.x), buf ^= 1) {
        const int next = tile + static_cast<int>(gridDim.x);
        if (next < p.num_tiles) stage_input_box<QUAD>(p, locate_tile(p, next), x_s + (buf ^ 1) * box_floats);
        cp_async_commit();
        cp_async_wait<1>();  // this thread's copies for `tile` have landed ...
        __syncthreads();     // ... and everyone's (the first pass: the weights too)
        const TileOrigin o = locate_tile(p, tile);
        const float* box = x_s + buf * box_floats;
        // A small tile leaves whole warpgroups without rows (uniform per warpgroup, as wgmma needs) unless
        // the window split gives them some; rows past the tile in a busy warpgroup compute on box position 0
        // and are not stored.
        const bool busy = (row_warp / 4) * 4 * kRowsPerWarp < p.rows;
        float best[2][NT][4];  // this warp's pool over its window offsets
        if (busy) {
            // This thread's four rows (pooled positions): g, g + 8, g + 16, g + 24 of the warp's 32.
            int row_base[4];  // offset of the row's (p * step) in the input box (floats)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = row_warp * kRowsPerWarp + g + 8 * i;
                const int rw = r & (p.tile[2] - 1), rh = (r >> p.tile_log2[2]) & (p.tile[1] - 1),
                      rd = r >> (p.tile_log2[2] + p.tile_log2[1]);
                row_base[i] =
                    r < p.rows ? kLanes * ((rd * step_d * p.extent[1] + rh * step_h) * p.extent[2] + rw * step_w) : 0;
            }

            // The pool's start: -inf, or, when some window offsets have no taps (kernel < stride), what
            // they contribute: y = bias, i.e. acc = 0 (pool-first) or f(bias). (Every phase starts there: a
            // max is unchanged by a value counted twice.)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const float m = mult_s[nt * 8 + 2 * t + c], b = bias_s[nt * 8 + 2 * t + c];
                    const float start = !p.empty_windows ? -INFINITY
                                        : pool_first      ? 0.f
                                                          : leaky(m * leaky(b, p.slope), p.slope);
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int h = 0; h < 2; ++h) best[mt][nt][2 * h + c] = start;
                }


            // One implicit GEMM per window offset (= stride phase) with taps, pooled into `best` as it
            // finishes.
            for (int r = phase; r < p.windows; r += split) {
                const int first = list_start[r], count = list_start[r + 1] - first;
                if (count == 0) continue;  // in best's start
                float acc[2][NT][4];       // written by window_gemm
                const float* box_t = box + t * p.quad_stride;
                if (line_rows)
                    window_gemm<NT, SPLIT3, QUAD, true>(acc, list + first, count, box_t + row_base[0], row_base, w_s, g,
                                                        t);
                else
                    window_gemm<NT, SPLIT3, QUAD, false>(acc, list + first, count, box_t, row_base, w_s, g, t);

                // Pool this window offset into `best`. The staged weights carry sign(m), so acc holds
                // sign(m) * y (bias excluded) and the sign-selected pool is a plain max.
                if (pool_first) {
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int j = 0; j < 4; ++j) best[mt][nt][j] = nan_max(best[mt][nt][j], acc[mt][nt][j]);
                } else {  // slope < 0: f is not monotone, take the max of f(y) over the window
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int c = 0; c < 2; ++c) {
                            const float m = mult_s[nt * 8 + 2 * t + c], b = bias_s[nt * 8 + 2 * t + c];
#pragma unroll
                            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                                for (int h = 0; h < 2; ++h) {
                                    const float y = m >= 0.f ? acc[mt][nt][2 * h + c] : -acc[mt][nt][2 * h + c];
                                    float& q = best[mt][nt][2 * h + c];
                                    q = nan_max(q, leaky(m * leaky(y + b, p.slope), p.slope));
                                }
                        }
                }
            }
        }
        if (split > 1) {  // uniform: the phases' partial maxima meet in phase 0's registers
            // Phases 1.. leave their partial maxima (per phase and warp with rows: 8 NT values x 32 lanes) at the
            // start of this tile's box, free once every warp's GEMMs are done. Every float they overwrite is
            // staged anew with the box's next tile, or is a plane's padding, which nothing reads, or is a padded
            // channel (c >= C_in: zeroed once, never staged), whose zero its writer puts back after the merge.
            float* partial = x_s + buf * box_floats;
            __syncthreads();
            if (phase > 0 && row_warp < warps_with_rows) {
                float* dst = partial + partial_at;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                        for (int j = 0; j < 4; ++j) dst[32 * ((mt * NT + nt) * 4 + j)] = best[mt][nt][j];
            }
            __syncthreads();
            if (phase == 0 && row_warp < warps_with_rows)
                for (int other = 1; other < split; ++other) {
                    const float* src = partial + ((other - 1) * warps_with_rows + row_warp) * 32 * 8 * NT + lane;
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                            for (int j = 0; j < 4; ++j)
                                best[mt][nt][j] = nan_max(best[mt][nt][j], src[32 * ((mt * NT + nt) * 4 + j)]);
                }
        }
        if (busy && phase == 0) {
            // f once (pool-first) and store. Per row, its offset in an output channel plane (32-bit: the
            // plan keeps C_out x plane below 2^31) and whether it is inside the output.
            const int plane = p.pooled[0] * p.pooled[1] * p.pooled[2];
            uint32_t in_plane[4];
            bool row_ok[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = row_warp * kRowsPerWarp + g + 8 * i;
                const int pw = o.p0[2] + (r & (p.tile[2] - 1)),
                          ph = o.p0[1] + ((r >> p.tile_log2[2]) & (p.tile[1] - 1)),
                          pd = o.p0[0] + (r >> (p.tile_log2[2] + p.tile_log2[1]));
                row_ok[i] = r < p.rows && pd < p.pooled[0] && ph < p.pooled[1] && pw < p.pooled[2];
                in_plane[i] = (static_cast<uint32_t>(pd) * p.pooled[1] + ph) * p.pooled[2] + pw;
            }
            float* out_tile = p.out + (static_cast<int64_t>(o.n) * p.out_channels + co0) * plane;
            const bool line_out = p.tile[2] == kRowsPerWarp;
            if (line_out && pool_first)
                store_tile<NT, true, true>(p, best, out_tile, in_plane, row_ok, f_s, co0, t, plane);
            else if (line_out)
                store_tile<NT, true, false>(p, best, out_tile, in_plane, row_ok, f_s, co0, t, plane);
            else if (pool_first)
                store_tile<NT, false, true>(p, best, out_tile, in_plane, row_ok, f_s, co0, t, plane);
            else
                store_tile<NT, false, false>(p, best, out_tile, in_plane, row_ok, f_s, co0, t, plane);
        }
        __syncthreads();  // every read of this box is done before the next iteration refills it
        // The padded channels this set's partial maxima overwrote get their zeros back. The next iteration's
        // staging writes other floats of this box, and its next reader (two tiles on) comes after two barriers.
        if (restore_mask) {
            float* dst = x_s + buf * box_floats + partial_at;
#pragma unroll
            for (int i = 0; i < 8 * NT; ++i)
                if (restore_mask >> i & 1u) dst[32 * i] = 0.f;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The TF32 kernel with A from shared memory (sm_90a; the host picks it when it applies, see make_plan).
// The box of 16-channel groups (stage_input_box<true>) is, as it stands, wgmma's no-swizzle K-major A
// operand: a core matrix is 8 consecutive box positions x one plane's 16-byte words (4 channels), so with
// a unit step along W (pool = stride) 8 consecutive pooled positions of a line are a core matrix, and an
// m64 block is an 8 (h) x 8 (w) patch of pooled positions whose 8 core matrices along M are box lines
// step_h apart (SBO), the two k halves of a k step adjacent planes (LBO). A tap moves the whole block
// by a constant: its descriptor is the block's plus the entry's box offset. Nothing passes through
// registers, so a window offset's products are issued back to back with one wait (in batches of 8, 4, 2,
// 1 entries: a runtime loop between a wgmma and its wait would serialize them, C7520). The box is rounded
// to TF32 in place once per tile, each thread the positions it copied. No block-wide barrier per tile: a
// thread rounds its share of the next box as soon as its own products of this tile are done and arrives
// on that buffer's mbarrier; a warpgroup starts a tile when all threads have arrived for its box (which
// also means everyone is done reading the other buffer, so its next copies may start). A warpgroup that
// finishes early runs ahead into the next tile instead of idling at a barrier while the others store.
// Tile: 8 blocks of 64 (TD x TH x TW with TH, TW multiples of 8), a warpgroup's blocks 2 wg and 2 wg + 1,
// per warp the accumulator rows of mma.m16n8k8 in the block (rows 16 w4 + g, + 8 = lines 2 w4, 2 w4 + 1
// at w = g). The epilogue stores through per-row pointers (store_rows).
// ---------------------------------------------------------------------------------------------
#if defined(MODEL_C_WGMMA)
// N entries of a window offset's tap list, all products issued, one wait. FRESH: the first product starts acc.
template <int NT, int N, bool FRESH>
__device__ __forceinline__ void window_batch_ss(float (&acc)[2][NT][4], const int2* entries,
                                                const uint32_t (&a_desc_low)[2], uint32_t a_desc_high,
                                                uint32_t plane_units) {
    constexpr uint32_t kStepB = weight_chunk_floats<NT, false>() * sizeof(float) >> 4;  // next k step's chunk
    int2 entry[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
        const int2 loaded = entries[e];
        entry[e] = make_int2(static_cast<int>(warp_uniform(loaded.x)), static_cast<int>(warp_uniform(loaded.y)));
    }
    wgmma_fence();
#pragma unroll
    for (int e = 0; e < N; ++e) {
        const uint32_t shift = static_cast<uint32_t>(entry[e].x) >> 2;  // floats -> 16-byte units
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const uint32_t a = a_desc_low[mt] + shift + 2 * s * plane_units;
                const uint32_t b = static_cast<uint32_t>(entry[e].y) + s * kStepB;
                if (FRESH && e == 0 && s == 0) wgmma_tf32_ss<NT, false>(acc[mt], a, a_desc_high, b);
                else wgmma_tf32_ss<NT, true>(acc[mt], a, a_desc_high, b);
            }
    }
    wgmma_commit();
    wgmma_wait<0>();
}

// One window offset's GEMM over its count >= 1 entries, written from scratch into acc.
template <int NT>
__device__ __forceinline__ void window_gemm_ss(float (&acc)[2][NT][4], const int2* entries, int count,
                                               const uint32_t (&a_desc_low)[2], uint32_t a_desc_high,
                                               uint32_t plane_units) {
    int done;
    if (count >= 8) {
        window_batch_ss<NT, 8, true>(acc, entries, a_desc_low, a_desc_high, plane_units);
        done = 8;
    } else if (count >= 4) {
        window_batch_ss<NT, 4, true>(acc, entries, a_desc_low, a_desc_high, plane_units);
        done = 4;
    } else if (count >= 2) {
        window_batch_ss<NT, 2, true>(acc, entries, a_desc_low, a_desc_high, plane_units);
        done = 2;
    } else {
        window_batch_ss<NT, 1, true>(acc, entries, a_desc_low, a_desc_high, plane_units);
        done = 1;
    }
    while (done < count) {
        const int left = count - done;
        if (left >= 8) {
            window_batch_ss<NT, 8, false>(acc, entries + done, a_desc_low, a_desc_high, plane_units);
            done += 8;
        } else if (left >= 4) {
            window_batch_ss<NT, 4, false>(acc, entries + done, a_desc_low, a_desc_high, plane_units);
            done += 4;
        } else if (left >= 2) {
            window_batch_ss<NT, 2, false>(acc, entries + done, a_desc_low, a_desc_high, plane_units);
            done += 2;
        } else {
            window_batch_ss<NT, 1, false>(acc, entries + done, a_desc_low, a_desc_high, plane_units);
            done += 1;
        }
    }
}

// A shared-memory barrier object (mbarrier) that completes a phase when `count` threads have arrived;
// waiting on a phase's parity blocks only the waiting thread (no block-wide barrier).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
                 "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
                 : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n@!done bra WAIT_%=;\n}\n"
        ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(parity) : "memory");
}

// Round the box positions this thread copied (stage_input_box<true>: positions threadIdx.x + k kThreads)
// to TF32 in place, round_tf32_bits with the low 13 bits cleared (idempotent; NaN stays NaN); its own
// cp.async copies have landed (cp_async_wait), so no barrier is needed before.
__device__ __forceinline__ void round_box_tf32(const Params& p, float* box) {
    const int positions = p.extent[0] * p.extent[1] * p.extent[2], groups = p.ci_padded / 16;
    for (int e = threadIdx.x; e < positions; e += kThreads)
        for (int q = 0; q < groups; ++q)
#pragma unroll
            for (int plane = 0; plane < 4; ++plane) {
                uint4* word = reinterpret_cast<uint4*>(box + q * p.group_stride + plane * p.quad_stride + 4 * e);
                uint4 v = *word;
                v.x = round_tf32_bits(__uint_as_float(v.x)) & 0xffffe000u;
                v.y = round_tf32_bits(__uint_as_float(v.y)) & 0xffffe000u;
                v.z = round_tf32_bits(__uint_as_float(v.z)) & 0xffffe000u;
                v.w = round_tf32_bits(__uint_as_float(v.w)) & 0xffffe000u;
                *word = v;
            }
}
#endif

template <int NT>
__global__ void __launch_bounds__(kThreads, 1) convtranspose_leaky_pool_ss_kernel(const Params p) {
#if defined(MODEL_C_WGMMA)
    constexpr int kChannels = 8 * NT, kLanes = 4;
    constexpr int kChunk = weight_chunk_floats<NT, false>();
    extern __shared__ __align__(128) float smem[];
    float* w_s = smem;
    float* x_s = smem + static_cast<size_t>(p.taps) * (p.ci_padded / 8) * kChunk;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4, w4 = warp % 4;
    const int wg = static_cast<int>(warp_uniform(warp / 4));  // so the A descriptors are uniform
    const int co0 = blockIdx.y * kChannels;
    const int box_floats = (p.ci_padded / 16) * p.group_stride;
    float* bias_s = x_s + 2 * box_floats;
    float* mult_s = bias_s + kChannels;
    float4* f_s = reinterpret_cast<float4*>(mult_s + kChannels);
    int* list_start = reinterpret_cast<int*>(f_s + kChannels);
    int2* list = reinterpret_cast<int2*>(list_start + ((p.windows + 2) & ~1));
    // box_ready[b]: all threads have rounded their share of buffer b's box (and, the first time, staged the
    // weights, tables and tap list). A thread arrives after its own products of the previous tile, so the
    // phase also means every warpgroup is done reading the other buffer.
    uint64_t* box_ready = reinterpret_cast<uint64_t*>(list + p.tap_entries * (p.ci_padded / 16));
    if (threadIdx.x == 0) {
        mbarrier_init(&box_ready[0], kThreads);
        mbarrier_init(&box_ready[1], kThreads);
    }
    // Before the barrier: the rounding passes read whole 16-byte words, padded channels included.
    zero_padded_channels<kLanes>(p, x_s, box_floats);
    __syncthreads();

    int tile = blockIdx.x;
    if (tile < p.num_tiles) stage_input_box<true>(p, locate_tile(p, tile), x_s);
    cp_async_commit();
    stage_weights_box_order<NT>(p, w_s, co0);
    stage_channel_tables<kChannels>(p, co0, bias_s, mult_s, f_s);
    build_tap_list<kChunk / 8, kLanes>(p, w_s, list_start, list);
    const bool pool_first = p.slope >= 0.f;

    // This warpgroup's two m64 blocks: block bk = 2 wg + mt of the tile, (bd, bh, bw) in blocks of 1 x 8 x 8.
    const int step_d = p.pool / p.stride[0], step_h = p.pool / p.stride[1];  // step along W is 1
    const int blocks_w = p.tile[2] / 8, blocks_h = p.tile[1] / 8;
    const uint32_t plane_units = static_cast<uint32_t>(p.quad_stride) / 4;  // LBO: planes are k halves
    const uint32_t a_desc_high = static_cast<uint32_t>(step_h * p.extent[2]);  // SBO: box lines per block row
    uint32_t block_pos[2];  // box position of the block's first row
    int row_d[4], row_h[4], row_w[4];  // this thread's rows (2 mt + h) in the tile
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const int bk = 2 * wg + mt;
        const int bd = bk / (blocks_w * blocks_h), bh = (bk / blocks_w) % blocks_h * 8, bw = (bk % blocks_w) * 8;
        block_pos[mt] = static_cast<uint32_t>((bd * step_d * p.extent[1] + bh * step_h) * p.extent[2] + bw);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            row_d[2 * mt + h] = bd;
            row_h[2 * mt + h] = bh + 2 * w4 + h;
            row_w[2 * mt + h] = bw + g;
        }
    }
    const int plane = p.pooled[0] * p.pooled[1] * p.pooled[2];

    cp_async_wait<0>();
    round_box_tf32(p, x_s);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma reads
    mbarrier_arrive(&box_ready[0]);
    for (int buf = 0, round = 0; tile < p.num_tiles; tile += static_cast<int>(gridDim.x), buf ^= 1, ++round) {
        mbarrier_wait(&box_ready[buf], (round >> 1) & 1);
        float* box = x_s + buf * box_floats;
        const int next = tile + static_cast<int>(gridDim.x);
        if (next < p.num_tiles) stage_input_box<true>(p, locate_tile(p, next), x_s + (buf ^ 1) * box_floats);
        cp_async_commit();
        const TileOrigin o = locate_tile(p, tile);
        const uint32_t box_units = (static_cast<uint32_t>(__cvta_generic_to_shared(box)) & 0x3ffff) >> 4;
        const uint32_t a_desc_low[2] = {(box_units + block_pos[0]) | (plane_units << 16),
                                        (box_units + block_pos[1]) | (plane_units << 16)};

        float best[2][NT][4];
        pool_start<NT>(p, best, pool_first, mult_s, bias_s, t);
        for (int r = 0; r < p.windows; ++r) {
            const int first = list_start[r], count = list_start[r + 1] - first;
            if (count == 0) continue;
            float acc[2][NT][4];
            window_gemm_ss<NT>(acc, list + first, count, a_desc_low, a_desc_high, plane_units);
            pool_window<NT>(p, best, acc, pool_first, mult_s, bias_s, t);
        }
        // This thread's products of `tile` are done: round its share of the next box (its copies were
        // issued before the products and have landed by now), then let the others know.
        cp_async_wait<0>();
        if (next < p.num_tiles) {
            round_box_tf32(p, x_s + (buf ^ 1) * box_floats);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        mbarrier_arrive(&box_ready[buf ^ 1]);

        float* const out_t = p.out + (static_cast<int64_t>(o.n) * p.out_channels + co0 + 2 * t) * plane;
        float* row_out[4];
        bool row_ok[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pd = o.p0[0] + row_d[i], ph = o.p0[1] + row_h[i], pw = o.p0[2] + row_w[i];
            row_ok[i] = pd < p.pooled[0] && ph < p.pooled[1] && pw < p.pooled[2];
            row_out[i] = out_t + (static_cast<uint32_t>(pd) * p.pooled[1] + ph) * p.pooled[2] + pw;
        }
        if (pool_first) store_rows<NT, true>(p, best, row_out, row_ok, f_s, co0, t, plane);
        else store_rows<NT, false>(p, best, row_out, row_ok, f_s, co0, t, plane);
    }
#endif
}


// ---------------------------------------------------------------------------------------------
// The kernel that shares A across window offsets (sm_90a; pool 2 = stride 2 in every dimension).
// With a unit step, a window offset's tap is a shift of the box; different (offset, tap) pairs read the
// same shift (KernelBench: 27 pairs, 8 shifts). This kernel walks the shifts: per m64 block and 16-channel
// group, each shift's A (two 16-byte loads per thread, rounded in registers) is loaded once and multiplied
// by the weights of every window offset that reads it, each offset into its own accumulator set (8 sets,
// 8 * 4 * NT registers: 8 warps per CTA for the 255-register cap). Which offsets read which shift is a
// compile-time pattern (one per dimension, the same for all three), so the whole sequence is straight-line
// code: A in three register buffers, `wgmma_wait<2>` before a buffer is reloaded, no branch between a
// `wgmma` and its wait. Weights staged once in the sequence's order: [group][entry][k step] chunks. The
// fp32-accurate mode (SPLIT3) walks the same sequence with A split into hi and lo and the weights staged as
// hi and lo (shift_block_gemm_3xtf32).
// ---------------------------------------------------------------------------------------------
constexpr int kShiftWarps = 8;
constexpr int kShiftThreads = kShiftWarps * 32;
// The patterns built (launch_shift), by kernel size and padding: kernel 2: 9 (padding even), 17 (odd);
// kernel 3: 19 (even), 25 (odd: KernelBench); kernel 4: 27 (even). (Kernel 4 with an odd padding reads
// three shifts per dimension: its boxes and weights do not fit beside each other with 16 channels.)
constexpr int kShiftMasks[] = {9, 17, 19, 25, 27};
// The fp32-accurate mode is built for all but kernel 4 (27): its 64 taps' weights, hi and lo, take 256 KB.
__host__ __device__ constexpr bool shift_fp32_built(int mask) { return mask != 27; }

// Pattern bit 3 r + s: window offset r (0, 1) reads box shift s (0, 1, 2) in a dimension.
__host__ __device__ constexpr bool pattern_uses(int mask, int r, int s) { return ((mask >> (3 * r + s)) & 1) != 0; }
__host__ __device__ constexpr int pattern_fanout(int mask, int s) {
    return (pattern_uses(mask, 0, s) ? 1 : 0) + (pattern_uses(mask, 1, s) ? 1 : 0);
}
// Entries ((3-D shift, window offset) pairs) before 3-D shift s3 = 9 sd + 3 sh + sw, in the kernel's order.
__host__ __device__ constexpr int pattern_entries_before(int mask, int s3) {
    int n = 0;
    for (int i = 0; i < s3; ++i) n += pattern_fanout(mask, i / 9) * pattern_fanout(mask, i / 3 % 3) * pattern_fanout(mask, i % 3);
    return n;
}
__host__ __device__ constexpr int pattern_groups_before(int mask, int s3) {
    int n = 0;
    for (int i = 0; i < s3; ++i)
        n += pattern_fanout(mask, i / 9) * pattern_fanout(mask, i / 3 % 3) * pattern_fanout(mask, i % 3) > 0 ? 1 : 0;
    return n;
}
__host__ __device__ constexpr bool pattern_reads(int mask, int s3, int r3);
// Entry index of (3-D shift s3, window offset r3).
__host__ __device__ constexpr int pattern_entry(int mask, int s3, int r3) {
    int n = pattern_entries_before(mask, s3);
    for (int i = 0; i < r3; ++i) n += pattern_reads(mask, s3, i) ? 1 : 0;
    return n;
}
__host__ __device__ constexpr int pattern_first_shift(int mask, int r) {
    return pattern_uses(mask, r, 0) ? 0 : pattern_uses(mask, r, 1) ? 1 : 2;
}
__host__ __device__ constexpr bool pattern_reads(int mask, int s3, int r3) {
    return pattern_uses(mask, r3 / 4, s3 / 9) && pattern_uses(mask, r3 / 2 % 2, s3 / 3 % 3) &&
           pattern_uses(mask, r3 % 2, s3 % 3);
}
__host__ __device__ constexpr int pattern_last_shift(int mask, int r) {
    return pattern_uses(mask, r, 2) ? 2 : pattern_uses(mask, r, 1) ? 1 : 0;
}
// The shift group after which window offset r3's products are complete.
__host__ __device__ constexpr int pattern_last_group(int mask, int r3) {
    return pattern_groups_before(mask, 9 * pattern_last_shift(mask, r3 / 4) + 3 * pattern_last_shift(mask, r3 / 2 % 2) +
                                           pattern_last_shift(mask, r3 % 2));
}
// The window offset pooled first (the earliest complete), which starts `best`.
__host__ __device__ constexpr int pattern_first_pooled(int mask) {
    int first = 0;
    for (int r3 = 1; r3 < 8; ++r3)
        if (pattern_last_group(mask, r3) < pattern_last_group(mask, first)) first = r3;
    return first;
}

// The fp32-accurate kernel walks the same sequence one entry at a time (shift_block_gemm_3xtf32).
// 3-D shift of window offset r3's first and last entries.
__host__ __device__ constexpr int pattern_first_shift3(int mask, int r3) {
    return 9 * pattern_first_shift(mask, r3 / 4) + 3 * pattern_first_shift(mask, r3 / 2 % 2) +
           pattern_first_shift(mask, r3 % 2);
}
__host__ __device__ constexpr int pattern_last_shift3(int mask, int r3) {
    return 9 * pattern_last_shift(mask, r3 / 4) + 3 * pattern_last_shift(mask, r3 / 2 % 2) +
           pattern_last_shift(mask, r3 % 2);
}
// Entry e as 8 s3 + r3 (its 3-D shift and window offset).
__host__ __device__ constexpr int pattern_pair(int mask, int e) {
    for (int s3 = 0; s3 < 27; ++s3)
        for (int r3 = 0; r3 < 8; ++r3)
            if (pattern_reads(mask, s3, r3) && e-- == 0) return 8 * s3 + r3;
    return -1;
}
// Whether entry e writes a fresh partial sum (else, the window offset's first entry in the first channel
// group, it starts the accumulator), and which of the two partial-sum register sets it takes: they alternate
// over the entries that write one.
__host__ __device__ constexpr bool pattern_partial(int mask, int e, bool first_group) {
    return !(first_group && pattern_pair(mask, e) / 8 == pattern_first_shift3(mask, pattern_pair(mask, e) % 8));
}
__host__ __device__ constexpr int pattern_partial_slot(int mask, int e, bool first_group) {
    int n = 0;
    for (int i = 0; i < e; ++i) n += pattern_partial(mask, i, first_group) ? 1 : 0;
    return n % 2;
}
// The window offset whose products complete first in entry order (it starts `best`).
__host__ __device__ constexpr int pattern_first_done(int mask) {
    int first = 0;
    for (int r3 = 1; r3 < 8; ++r3)
        if (pattern_entry(mask, pattern_last_shift3(mask, r3), r3) <
            pattern_entry(mask, pattern_last_shift3(mask, first), first))
            first = r3;
    return first;
}

#if defined(MODEL_C_WGMMA)
// The weight block in the shift kernel's order: chunk (q, e, s) = 16-channel group q, entry e (shift-major,
// window offsets in order within a shift), k step s; B(k = ci % 8, n) as in the register kernel.
// f(integral_constant<int, I>) for I = 0 .. N - 1, in order, each I a constant expression: the shift
// sequence must be resolved at compile time (accumulator sets and operand buffers are registers).
template <typename F, int... I>
__device__ __forceinline__ void static_for_each(F&& f, std::integer_sequence<int, I...>) {
    (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
    static_for_each(f, std::make_integer_sequence<int, N>{});
}

template <int NT, int MASK, bool SPLIT3>
__device__ __forceinline__ void stage_weights_shift_order(const Params& p, float* w_s, int co0) {
    constexpr int kChannels = 8 * NT, kChunk = weight_chunk_floats<NT, SPLIT3>();
    constexpr int kEntries = pattern_entries_before(MASK, 27);
    // k_of[d][r][s]: the kernel index of window offset r's tap that reads shift s along dimension d.
    int k_of[3][2][3];
#pragma unroll
    for (int d = 0; d < 3; ++d)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int sh = 0; sh < 3; ++sh) {
                k_of[d][r][sh] = 0;
                for (int j = p.tap_start[d][r]; j < p.tap_start[d][r + 1]; ++j)
                    if (p.tap_c[d][j] == sh) k_of[d][r][sh] = p.tap_k[d][j];
            }
    for (int pair = threadIdx.x; pair < p.ci_padded * kChannels; pair += kShiftThreads) {
        const int n = pair % kChannels, ci = pair / kChannels;
        const bool ok = ci < p.in_channels && co0 + n < p.out_channels;
        const float sign = ok && __ldg(p.multiplier + co0 + n) < 0.f ? -1.f : 1.f;
        const float* src = p.weight + (static_cast<int64_t>(ok ? ci : 0) * p.out_channels + (ok ? co0 + n : 0)) * p.taps;
        float* dst = w_s + ((ci / 16) * kEntries * 2 + (ci / 8) % 2) * kChunk + weight_chunk_offset(ci % 8, n);
        float v[kEntries];  // all loads first, then the stores: one memory round trip per pair
        static_for<27 * 8>([&](auto i_constant) {
            constexpr int s3 = decltype(i_constant)::value / 8, r3 = decltype(i_constant)::value % 8;
            if constexpr (pattern_reads(MASK, s3, r3)) {
                constexpr int e = pattern_entry(MASK, s3, r3);
                const int tap = (k_of[0][r3 / 4][s3 / 9] * p.kernel[1] + k_of[1][r3 / 2 % 2][s3 / 3 % 3]) * p.kernel[2] +
                                k_of[2][r3 % 2][s3 % 3];
                v[e] = __ldg(src + tap);
            }
        });
#pragma unroll
        for (int e = 0; e < kEntries; ++e) {
            const float w = ok ? v[e] * sign : 0.f;
            if constexpr (SPLIT3) {  // B = hi + lo, the low part after the high part (as in the register kernel)
                uint32_t hi, lo;
                split_tf32(w, hi, lo);
                dst[e * 2 * kChunk] = __uint_as_float(hi);
                dst[e * 2 * kChunk + 64 * NT] = __uint_as_float(lo);
            } else {
                dst[e * 2 * kChunk] = __uint_as_float(to_tf32(w));
            }
        }
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes -> wgmma reads
}

// One m64 block, one 16-channel group: every window offset's products, shift by shift. a0: this thread's
// row g word (plane t) at shift 0; row g + 8 is one box line further (line floats); a shift moves it by
// sd * plane_floats + sh * line_floats + 4 sw. b_q: descriptor low word of the group's first chunk.
// FIRST: group 0, where each window offset's first product starts its accumulator. POOL: the last group
// with the pool-first epilogue: a window offset is max-pooled into `best` as soon as its products are done,
// while the later shifts' products run.
template <int NT, int MASK, bool FIRST, bool POOL>
__device__ __forceinline__ void shift_block_gemm(float (&acc)[8][NT][4], float (&best)[NT][4], const float* a0,
                                                 int line_floats, int plane_floats, uint32_t b_q) {
    constexpr uint32_t kChunkUnits = weight_chunk_floats<NT, false>() * sizeof(float) >> 4;
    constexpr int kBuffers = 3;
    constexpr int kGroups = pattern_groups_before(MASK, 27);
    uint32_t a[kBuffers][2][4];
    // Pool the window offsets whose last group is `done` (complete: waited for).
    auto pool_done = [&](auto done_constant) {
        constexpr int done = decltype(done_constant)::value;
        static_for<8>([&](auto r3_constant) {
            constexpr int r3 = decltype(r3_constant)::value;
            if constexpr (pattern_last_group(MASK, r3) == done) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        best[nt][j] = r3 == pattern_first_pooled(MASK) ? acc[r3][nt][j] : nan_max(best[nt][j], acc[r3][nt][j]);
            }
        });
    };
    static_for<27>([&](auto s3_constant) {
        constexpr int s3 = decltype(s3_constant)::value;
        constexpr int fanout = pattern_fanout(MASK, s3 / 9) * pattern_fanout(MASK, s3 / 3 % 3) * pattern_fanout(MASK, s3 % 3);
        if constexpr (fanout > 0) {
            constexpr int group = pattern_groups_before(MASK, s3), buf = group % kBuffers;
            if constexpr (group >= kBuffers) {
                wgmma_wait<kBuffers - 1>();  // the group that used this buffer is done
                if constexpr (POOL) pool_done(std::integral_constant<int, group - kBuffers>{});
            }
            const float* src = a0 + (s3 / 9) * plane_floats + (s3 / 3 % 3) * line_floats + 4 * (s3 % 3);
            const float4 v0 = *reinterpret_cast<const float4*>(src);
            const float4 v1 = *reinterpret_cast<const float4*>(src + line_floats);
            a[buf][0][0] = round_tf32_bits(v0.x);
            a[buf][0][1] = round_tf32_bits(v1.x);
            a[buf][0][2] = round_tf32_bits(v0.y);
            a[buf][0][3] = round_tf32_bits(v1.y);
            a[buf][1][0] = round_tf32_bits(v0.z);
            a[buf][1][1] = round_tf32_bits(v1.z);
            a[buf][1][2] = round_tf32_bits(v0.w);
            a[buf][1][3] = round_tf32_bits(v1.w);
            // Pin the rounded operands before the fence (else the front end may sink the adds past it, and
            // ptxas injects a warpgroup.arrive before each wgmma that reads them, C7519).
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[buf][ks][j]));
            wgmma_fence();
            static_for<8>([&](auto r3_constant) {
                constexpr int r3 = decltype(r3_constant)::value;
                if constexpr (pattern_reads(MASK, s3, r3)) {
                    constexpr int e = pattern_entry(MASK, s3, r3);
                    constexpr bool first = FIRST && s3 == 9 * pattern_first_shift(MASK, r3 / 4) +
                                                              3 * pattern_first_shift(MASK, r3 / 2 % 2) +
                                                              pattern_first_shift(MASK, r3 % 2);
                    wgmma_tf32<NT, !first>(acc[r3], a[buf][0], b_q + (2 * e) * kChunkUnits);
                    wgmma_tf32<NT, true>(acc[r3], a[buf][1], b_q + (2 * e + 1) * kChunkUnits);
                }
            });
            wgmma_commit();
        }
    });
    wgmma_wait<0>();
    if constexpr (POOL)
        static_for<kBuffers>([&](auto i) {
            constexpr int done = kGroups - kBuffers + decltype(i)::value;
            if constexpr (done >= 0) pool_done(std::integral_constant<int, done>{});
        });
}

// The fp32-accurate (3xTF32) version of shift_block_gemm. Each shift's A is loaded once and split into TF32
// hi and lo parts in registers; each (shift, window offset) entry then issues its six products (per k step
// a_lo b_hi, a_hi b_lo, a_hi b_hi) into a fresh partial sum that joins the offset's accumulator through an
// fp32 add, as in the register kernel (accumulated straight into the running sum, the tensor core's
// truncation costs ~4x fp32's error). A partial sum spans the entry's 16 channels (two k steps). With 8
// accumulator sets (8 * 4 * NT registers) there is room for two partial-sum sets, not eight: the entries go
// one commit group each, and after entry e is issued, entry e - 1 is waited for (wgmma_wait<1>), added and,
// when it was its window offset's last, pooled. An offset's first entry in the first channel group (FIRST)
// writes its accumulator directly. Two A buffers: when a shift's A is loaded, only the previous shift's
// last entry can still be reading.
template <int NT, int MASK, bool FIRST, bool POOL>
__device__ __forceinline__ void shift_block_gemm_3xtf32(float (&acc)[8][NT][4], float (&best)[NT][4], const float* a0,
                                                        int line_floats, int plane_floats, uint32_t b_q) {
    constexpr uint32_t kChunkUnits = weight_chunk_floats<NT, true>() * sizeof(float) >> 4;
    constexpr uint32_t kLoUnits = 64 * NT * sizeof(float) >> 4;  // B's low part after its high part
    constexpr int kEntries = pattern_entries_before(MASK, 27);
    uint32_t a_hi[2][2][4], a_lo[2][2][4];  // [buffer][k step][fragment]
    float part[2][NT][4];
    // Entry e's products are complete: join its partial sum, pool its window offset if that was the last.
    auto finish = [&](auto e_constant) {
        constexpr int e = decltype(e_constant)::value;
        constexpr int s3 = pattern_pair(MASK, e) / 8, r3 = pattern_pair(MASK, e) % 8;
        if constexpr (pattern_partial(MASK, e, FIRST)) {
            constexpr int slot = pattern_partial_slot(MASK, e, FIRST);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[r3][nt][j] += part[slot][nt][j];
        }
        if constexpr (POOL && s3 == pattern_last_shift3(MASK, r3)) {
            constexpr bool first_done = r3 == pattern_first_done(MASK);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    best[nt][j] = first_done ? acc[r3][nt][j] : nan_max(best[nt][j], acc[r3][nt][j]);
        }
    };
    static_for<kEntries>([&](auto e_constant) {
        constexpr int e = decltype(e_constant)::value;
        constexpr int s3 = pattern_pair(MASK, e) / 8, r3 = pattern_pair(MASK, e) % 8;
        constexpr int buf = pattern_groups_before(MASK, s3) % 2;
        if constexpr (e == 0 || pattern_pair(MASK, e - 1) / 8 != s3) {  // a new shift: load and split its A
            const float* src = a0 + (s3 / 9) * plane_floats + (s3 / 3 % 3) * line_floats + 4 * (s3 % 3);
            const float4 v0 = *reinterpret_cast<const float4*>(src);
            const float4 v1 = *reinterpret_cast<const float4*>(src + line_floats);
            split_tf32(v0.x, a_hi[buf][0][0], a_lo[buf][0][0]);
            split_tf32(v1.x, a_hi[buf][0][1], a_lo[buf][0][1]);
            split_tf32(v0.y, a_hi[buf][0][2], a_lo[buf][0][2]);
            split_tf32(v1.y, a_hi[buf][0][3], a_lo[buf][0][3]);
            split_tf32(v0.z, a_hi[buf][1][0], a_lo[buf][1][0]);
            split_tf32(v1.z, a_hi[buf][1][1], a_lo[buf][1][1]);
            split_tf32(v0.w, a_hi[buf][1][2], a_lo[buf][1][2]);
            split_tf32(v1.w, a_hi[buf][1][3], a_lo[buf][1][3]);
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a_hi[buf][ks][j]), "+r"(a_lo[buf][ks][j]));
        }
        constexpr bool partial = pattern_partial(MASK, e, FIRST);
        auto products = [&](float(&d)[NT][4]) {
            static_for<2>([&](auto ks_constant) {
                constexpr int ks = decltype(ks_constant)::value;
                const uint32_t hi = b_q + (2 * e + ks) * kChunkUnits, lo = hi + kLoUnits;
                wgmma_tf32<NT, ks != 0, true>(d, a_lo[buf][ks], hi);  // small terms first; k step 0 starts d (tied)
                wgmma_tf32<NT, true>(d, a_hi[buf][ks], lo);
                wgmma_tf32<NT, true>(d, a_hi[buf][ks], hi);
            });
        };
        wgmma_fence();
        constexpr int slot = pattern_partial_slot(MASK, e, FIRST);
        products(partial ? part[slot] : acc[r3]);
        wgmma_commit();
        if constexpr (e > 0) {
            wgmma_wait<1>();
            finish(std::integral_constant<int, e - 1>{});
        }
    });
    wgmma_wait<0>();
    finish(std::integral_constant<int, kEntries - 1>{});
}

// One m64 block's products for channel group q, in either mode (FIRST: q = 0; POOL: the last group, pool-first).
template <int NT, int MASK, bool SPLIT3, bool FIRST, bool POOL>
__device__ __forceinline__ void shift_group_gemm(float (&acc)[8][NT][4], float (&best)[NT][4], const float* a0,
                                                 int line_floats, int plane_floats, uint32_t b_q) {
    if constexpr (SPLIT3) shift_block_gemm_3xtf32<NT, MASK, FIRST, POOL>(acc, best, a0, line_floats, plane_floats, b_q);
    else shift_block_gemm<NT, MASK, FIRST, POOL>(acc, best, a0, line_floats, plane_floats, b_q);
}
#endif

// SPLIT3: the fp32-accurate mode (3xTF32, weights staged as hi and lo), else TF32.
template <int NT, int MASK, bool SPLIT3, bool POOL_FIRST>
__global__ void __launch_bounds__(kShiftThreads, 1) convtranspose_leaky_pool_shift_kernel(const Params p) {
#if defined(MODEL_C_WGMMA)
    constexpr int kChannels = 8 * NT, kLanes = 4;
    constexpr int kChunk = weight_chunk_floats<NT, SPLIT3>();
    constexpr int kEntries = pattern_entries_before(MASK, 27);
    constexpr uint32_t kGroupUnits = 2 * kEntries * (kChunk * sizeof(float) >> 4);
    extern __shared__ __align__(128) float smem[];
    float* w_s = smem;
    float* x_s = smem + static_cast<size_t>(p.taps) * (p.ci_padded / 8) * kChunk;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4, w4 = warp % 4;
    const int wg = static_cast<int>(warp_uniform(warp / 4));
    const int co0 = blockIdx.y * kChannels;
    const int groups = p.ci_padded / 16;
    const int box_floats = groups * p.group_stride;
    float* bias_s = x_s + 2 * box_floats;
    float* mult_s = bias_s + kChannels;
    float4* f_s = reinterpret_cast<float4*>(mult_s + kChannels);
    int* list_start = reinterpret_cast<int*>(f_s + kChannels);
    int2* list = reinterpret_cast<int2*>(list_start + ((p.windows + 2) & ~1));
    uint64_t* box_ready = reinterpret_cast<uint64_t*>(list + p.tap_entries * (p.ci_padded / 16));
    if (threadIdx.x == 0) {
        mbarrier_init(&box_ready[0], kShiftThreads);
        mbarrier_init(&box_ready[1], kShiftThreads);
    }
    zero_padded_channels<kLanes, kShiftThreads>(p, x_s, box_floats);
    __syncthreads();

    int tile = blockIdx.x;
    if (tile < p.num_tiles) stage_input_box<true, kShiftThreads>(p, locate_tile(p, tile), x_s);
    cp_async_commit();
    stage_weights_shift_order<NT, MASK, SPLIT3>(p, w_s, co0);
    stage_channel_tables<kChannels, kShiftThreads>(p, co0, bias_s, mult_s, f_s);
    const uint32_t b_desc = weight_descriptor_low(w_s);

    const int blocks_w = p.tile[2] / 8, blocks_h = p.tile[1] / 8;
    const int line_floats = 4 * p.extent[2], plane_floats = 4 * p.extent[1] * p.extent[2];
    const int plane = p.pooled[0] * p.pooled[1] * p.pooled[2];

    cp_async_wait<0>();
    mbarrier_arrive(&box_ready[0]);
    for (int buf = 0, round = 0; tile < p.num_tiles; tile += static_cast<int>(gridDim.x), buf ^= 1, ++round) {
        mbarrier_wait(&box_ready[buf], (round >> 1) & 1);
        const float* box = x_s + buf * box_floats;
        const int next = tile + static_cast<int>(gridDim.x);
        if (next < p.num_tiles) stage_input_box<true, kShiftThreads>(p, locate_tile(p, next), x_s + (buf ^ 1) * box_floats);
        cp_async_commit();
        const TileOrigin o = locate_tile(p, tile);
        float* const out_t = p.out + (static_cast<int64_t>(o.n) * p.out_channels + co0 + 2 * t) * plane;
        for (int i = 0; i < 4; ++i) {
            const int bk = 2 * i + wg;
            const int bd = bk / (blocks_w * blocks_h), bh = (bk / blocks_w) % blocks_h * 8, bw = (bk % blocks_w) * 8;
            const float* a0 = box + t * p.quad_stride + 4 * ((bd * p.extent[1] + bh + 2 * w4) * p.extent[2] + bw + g);
            float acc[8][NT][4], best[NT][4];
            if (groups == 1) {
                shift_group_gemm<NT, MASK, SPLIT3, true, POOL_FIRST>(acc, best, a0, line_floats, plane_floats, b_desc);
            } else {
                shift_group_gemm<NT, MASK, SPLIT3, true, false>(acc, best, a0, line_floats, plane_floats, b_desc);
                for (int q = 1; q < groups - 1; ++q)
                    shift_group_gemm<NT, MASK, SPLIT3, false, false>(acc, best, a0 + q * p.group_stride, line_floats,
                                                             plane_floats, b_desc + q * kGroupUnits);
                shift_group_gemm<NT, MASK, SPLIT3, false, POOL_FIRST>(acc, best, a0 + (groups - 1) * p.group_stride,
                                                              line_floats, plane_floats,
                                                              b_desc + (groups - 1) * kGroupUnits);
            }
            // POOL_FIRST: best is the max over the 8 window offsets; else the max of f. Then f and the stores:
            // this thread's rows g (line 2 w4) and g + 8 (the next line).
            if constexpr (!POOL_FIRST) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const float m = mult_s[nt * 8 + 2 * t + c], b = bias_s[nt * 8 + 2 * t + c];
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            float v = -INFINITY;
#pragma unroll
                            for (int r3 = 0; r3 < 8; ++r3) {
                                const float y = m >= 0.f ? acc[r3][nt][2 * h + c] : -acc[r3][nt][2 * h + c];
                                v = nan_max(v, leaky(m * leaky(y + b, p.slope), p.slope));
                            }
                            best[nt][2 * h + c] = v;
                        }
                    }
            }
            const int pd = o.p0[0] + bd, ph = o.p0[1] + bh + 2 * w4, pw = o.p0[2] + bw + g;
            const bool ok0 = pd < p.pooled[0] && ph < p.pooled[1] && pw < p.pooled[2];
            const bool ok1 = pd < p.pooled[0] && ph + 1 < p.pooled[1] && pw < p.pooled[2];
            float* const row0 = out_t + (static_cast<uint32_t>(pd) * p.pooled[1] + ph) * p.pooled[2] + pw;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int n_local = nt * 8 + 2 * t + c;
                    if (co0 + n_local >= p.out_channels) continue;
                    const float4 k = f_s[n_local];
                    float v0 = best[nt][c], v1 = best[nt][2 + c];
                    if constexpr (POOL_FIRST) {
                        const float u0 = fmaf(k.x, v0, k.y), u1 = fmaf(k.x, v1, k.y);
                        v0 = u0 * (u0 >= 0.f ? k.z : k.w);
                        v1 = u1 * (u1 >= 0.f ? k.z : k.w);
                    }
                    float* dst = row0 + static_cast<int64_t>(nt * 8 + c) * plane;
                    if (ok0) dst[0] = v0;
                    if (ok1) dst[p.pooled[2]] = v1;
                }
        }
        cp_async_wait<0>();
        mbarrier_arrive(&box_ready[buf ^ 1]);
    }
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side: the plan (tile shape, shared memory), the envelope, the launcher.
// ---------------------------------------------------------------------------------------------

inline std::string str_of(c10::IntArrayRef sizes) {
    std::string text = "(";
    for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
    return text + ")";
}

inline int next_pow2(int64_t v) {
    int r = 1;
    while (r < v && r < (1 << 20)) r *= 2;
    return r;
}

// Per-device limits, read once per device (a forward should not pay for runtime queries).
struct DeviceLimits {
    int smem_optin = 0;  // most dynamic shared memory one block may opt in to (bytes)
    int sms = 0;         // multiprocessors
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
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&limits.sms, cudaDevAttrMultiProcessorCount, device));
        int major = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        if (major == 9) {  // an sm_90a image loads on 9.0 only; ask the loaded image (wgmma_build_probe)
            const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
            cudaFuncAttributes probe{};
            C10_CUDA_CHECK(cudaFuncGetAttributes(&probe, wgmma_build_probe));
            limits.wgmma = probe.maxThreadsPerBlock == 128;
        }
        it = cache.emplace(device, limits).first;
    }
    return it->second;
}

// Resident blocks per SM for `kernel` with `smem_bytes` of dynamic shared memory, after raising the
// kernel's shared-memory limit to the device's maximum; both done once per (kernel, device, bytes).
template <typename Kernel>
int blocks_per_sm(Kernel kernel, size_t smem_bytes, int device, int threads = kThreads) {
    static std::mutex mutex;
    static std::map<std::tuple<const void*, int, size_t>, int> cache;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, smem_bytes);
    auto it = cache.find(key);
    if (it == cache.end()) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            device_limits(device).smem_optin));
        int per_sm = 0;
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
        it = cache.emplace(key, std::max(per_sm, 1)).first;
    }
    return it->second;
}

struct Plan {
    Params params{};
    int nt = 4;
    bool quad = false;  // the box in groups of 16 channels (one 16-byte A load per two k8 steps), else 8
    bool smem_a = false;  // TF32 with A read from the box by descriptor (convtranspose_leaky_pool_ss_kernel)
    int shift_mask = -1;  // >= 0: TF32 with A shared across window offsets (convtranspose_leaky_pool_shift_kernel)
    size_t smem_bytes = 0;
    int64_t num_tiles = 0;  // params.num_tiles before the 2^31 check
    std::string problem;  // empty when the fused path applies
};

// Everything but the pointers, from the sizes. `problem` says why the fused path does not apply.
Plan make_plan(c10::IntArrayRef in_size, int64_t batch, int64_t c_in, int64_t c_out, c10::IntArrayRef kernel,
               c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef output_padding, int64_t pool,
               bool allow_tf32, int device, int64_t channels_per_block = 0, bool smem_a = true,
               bool share_a = true, bool split_windows = true) {
    Plan plan;
    Params& p = plan.params;
    auto fail = [&](std::string why) { plan.problem = std::move(why); return plan; };
    if (in_size.size() != 3 || kernel.size() != 3 || stride.size() != 3 || padding.size() != 3 ||
        output_padding.size() != 3)
        return fail("in_size, kernel, stride, padding and output_padding must each hold 3 values");
    if (c_in < 1 || c_out < 1) return fail("C_in and C_out must be >= 1");
    if (pool < 1 || pool > kMaxPool) return fail("pool must be in [1, " + std::to_string(kMaxPool) + "]");
    int64_t out_size[3];
    for (int d = 0; d < 3; ++d) {
        if (kernel[d] < 1 || kernel[d] > kMaxKernel)
            return fail("kernel sizes must be in [1, " + std::to_string(kMaxKernel) + "], got " + str_of(kernel));
        if (stride[d] < 1 || pool % stride[d] != 0)
            return fail("the fused path needs pool (" + std::to_string(pool) +
                        ") to be a multiple of every stride, got stride " + str_of(stride));
        if (padding[d] < 0 || output_padding[d] < 0 || output_padding[d] >= stride[d])
            return fail("padding must be >= 0 and 0 <= output_padding < stride, got padding " + str_of(padding) +
                        ", output_padding " + str_of(output_padding));
        if (in_size[d] < 1) return fail("the input's spatial sizes must be >= 1, got " + str_of(in_size));
        out_size[d] = (in_size[d] - 1) * stride[d] - 2 * padding[d] + kernel[d] + output_padding[d];
        if (out_size[d] < pool)
            return fail("the pool window (" + std::to_string(pool) + ") is larger than the conv output");
        if (in_size[d] >= (1 << 30) || out_size[d] >= (1 << 30)) return fail("spatial sizes must be < 2^30");
    }
    p.in_channels = static_cast<int>(c_in);
    p.out_channels = static_cast<int>(c_out);
    p.ci_padded = static_cast<int>((c_in + 7) / 8 * 8);
    p.taps = static_cast<int>(kernel[0] * kernel[1] * kernel[2]);
    p.pool = static_cast<int>(pool);
    for (int d = 0; d < 3; ++d) {
        p.in_size[d] = static_cast<int>(in_size[d]);
        p.kernel[d] = static_cast<int>(kernel[d]);
        p.stride[d] = static_cast<int>(stride[d]);
        p.padding[d] = static_cast<int>(padding[d]);
        p.pooled[d] = static_cast<int>(out_size[d] / pool);
    }
    if (static_cast<int64_t>(p.pooled[0]) * p.pooled[1] * p.pooled[2] * c_out > INT32_MAX)
        return fail("C_out x the pooled output's D x H x W must be below 2^31 (32-bit offsets per sample)");
    // Input offsets c = (r + padding - k) / stride over the window offsets r and their taps k span
    // [c_min, c_max]; a tile of T pooled positions reads (T - 1) * (P / stride) + c_max - c_min + 1 inputs.
    int c_max[3];
    for (int d = 0; d < 3; ++d) {
        int lo = 1 << 30, hi = -(1 << 30);
        for (int r = 0; r < p.pool; ++r)
            for (int k = (r + p.padding[d]) % p.stride[d]; k < p.kernel[d]; k += p.stride[d]) {
                lo = std::min(lo, (r + p.padding[d] - k) / p.stride[d]);  // exact division
                hi = std::max(hi, (r + p.padding[d] - k) / p.stride[d]);
            }
        if (lo > hi) lo = hi = 0;  // no tap reaches any window offset (only the bias does)
        p.c_min[d] = lo;
        c_max[d] = hi;
        int j = 0;
        for (int r = 0; r < p.pool; ++r) {
            p.tap_start[d][r] = j;
            for (int k = (r + p.padding[d]) % p.stride[d]; k < p.kernel[d]; k += p.stride[d], ++j) {
                p.tap_k[d][j] = k;
                p.tap_c[d][j] = (r + p.padding[d] - k) / p.stride[d] - lo;
            }
        }
        p.tap_start[d][p.pool] = j;
    }
    if (channels_per_block != 0 && channels_per_block != 8 && channels_per_block != 16 && channels_per_block != 32)
        return fail("channels_per_block must be 0 (automatic), 8, 16 or 32, got " + std::to_string(channels_per_block));
    p.windows = p.pool * p.pool * p.pool;
    p.tap_entries = p.tap_start[0][p.pool] * p.tap_start[1][p.pool] * p.tap_start[2][p.pool];
    p.empty_windows = 0;
    for (int d = 0; d < 3; ++d)
        for (int r = 0; r < p.pool; ++r)
            if (p.tap_start[d][r + 1] == p.tap_start[d][r]) p.empty_windows = 1;
    const size_t smem_limit = static_cast<size_t>(device_limits(device).smem_optin);
    // 16-channel groups when C_in pads to them and the mode loads two k steps at once (TF32; the
    // fp32-accurate mode has no registers to spare for a second step's hi and lo parts).
    plan.quad = allow_tf32 && p.ci_padded % 16 == 0;

    // Tile for a channel block of 8 * nt: 32 positions along W (or the output's next power of two), then
    // the (TD, TH) split of the remaining rows that stages the fewest inputs plus computes the fewest rows
    // in all. kRows rows when the two input boxes fit in shared memory beside the weights, else 256,
    // 128, ... (idle warps). False when not even kRowsPerWarp rows fit.
    // A_FROM_SMEM (the shared-memory A kernel): only full 512-position tiles of 8 x 8 (h, w) blocks.
    auto fit_tile = [&](Plan& cand, int nt, bool a_from_smem) {
        Params& q = cand.params;
        cand.nt = nt;
        const int lanes = cand.quad ? 4 : 2;
        const size_t weight_floats = static_cast<size_t>(q.taps) * q.ci_padded * 8 * nt * (allow_tf32 ? 1 : 2);
        auto extent_of = [&](int d, int tile) { return (tile - 1) * (q.pool / q.stride[d]) + c_max[d] - q.c_min[d] + 1; };
        for (int max_rows = kRows; max_rows >= (a_from_smem ? kRows : kRowsPerWarp); max_rows /= 2) {
            q.tile[2] = std::min(max_rows, std::min(32, next_pow2(q.pooled[2])));
            if (a_from_smem) q.tile[2] = std::max(q.tile[2], 8);
            double best_cost = -1.0;
            for (int th = a_from_smem ? 8 : 1; th * q.tile[2] <= max_rows; th *= 2) {
                if (th > next_pow2(q.pooled[1])) break;  // (a_from_smem: pooled H >= 8)
                const int td = a_from_smem ? max_rows / (th * q.tile[2])
                                           : std::min(max_rows / (th * q.tile[2]), next_pow2(q.pooled[0]));
                const double tiles = static_cast<double>((q.pooled[0] + td - 1) / td) * ((q.pooled[1] + th - 1) / th);
                const double cost = tiles * (static_cast<double>(td) * th * q.tile[2] +
                                             static_cast<double>(extent_of(0, td)) * extent_of(1, th) *
                                                 extent_of(2, q.tile[2]));
                if (best_cost < 0 || cost < best_cost) {
                    best_cost = cost;
                    q.tile[0] = td;
                    q.tile[1] = th;
                }
            }
            q.rows = q.tile[0] * q.tile[1] * q.tile[2];
            int64_t num_tiles = batch;
            for (int d = 0; d < 3; ++d) {
                q.tile_log2[d] = 0;
                while ((1 << q.tile_log2[d]) < q.tile[d]) ++q.tile_log2[d];
                q.tiles[d] = (q.pooled[d] + q.tile[d] - 1) / q.tile[d];
                num_tiles *= q.tiles[d];
                q.extent[d] = extent_of(d, q.tile[d]);
                q.tiles_div[d] = make_fast_div(static_cast<uint32_t>(q.tiles[d]));
            }
            q.line_div = make_fast_div(static_cast<uint32_t>(q.extent[2]));
            q.plane_div = make_fast_div(static_cast<uint32_t>(q.extent[1]));
            cand.num_tiles = num_tiles;
            q.num_tiles = static_cast<int>(std::min<int64_t>(num_tiles, INT32_MAX));
            const int64_t box = static_cast<int64_t>(q.extent[0]) * q.extent[1] * q.extent[2];
            // Box layout (stage_input_box): channel groups of 4 * lanes, each four t planes of quad_stride
            // floats, = 8 mod 32 for conflict-free A loads.
            q.quad_stride = static_cast<int>(((box * lanes + 23) / 32) * 32 + 8);
            q.group_stride = 4 * q.quad_stride;
            const size_t box_floats = static_cast<size_t>(q.ci_padded / (4 * lanes)) * q.group_stride;
            cand.smem_bytes = sizeof(float) * (weight_floats + 2 * box_floats + 6 * 8 * nt) +
                              sizeof(int) * ((q.windows + 2) & ~1) +
                              sizeof(int2) * static_cast<size_t>(q.tap_entries) * (q.ci_padded / (4 * lanes)) +
                              (a_from_smem ? 2 * sizeof(uint64_t) : 0);  // its kernel's two mbarriers
            if (cand.smem_bytes <= smem_limit) return true;
        }
        return false;
    };

    // Channel block: as asked, or (automatic) the widest useful one, 8, 16 or 32 channels; when its
    // weights leave too little room for the input boxes, a narrower block with taller tiles if that
    // gives a CTA more outputs per tile (the fp32-accurate mode stages the weights twice, hi and lo).
    const int widest = channels_per_block ? static_cast<int>(channels_per_block / 8) : c_out <= 8 ? 1 : c_out <= 16 ? 2 : 4;
    const int narrowest = channels_per_block ? widest : 1;
    Plan chosen;
    int64_t chosen_outputs = -1;
    size_t smallest_smem = 0;
    for (int nt = widest; nt >= narrowest; nt /= 2) {
        Plan cand = plan;
        if (!fit_tile(cand, nt, false)) {
            if (smallest_smem == 0 || cand.smem_bytes < smallest_smem) smallest_smem = cand.smem_bytes;
            continue;
        }
        const int64_t outputs = static_cast<int64_t>(cand.params.rows) * std::min<int64_t>(8 * nt, c_out);
        if (outputs > chosen_outputs) {
            chosen = cand;
            chosen_outputs = outputs;
        }
    }
    // TF32 with A from shared memory where it applies: a wgmma build, 16-channel groups, a unit step
    // along W (pool = stride) and pooled H and W of at least 8 (8 x 8 blocks), in the same channel block.
    if (chosen_outputs > 0 && smem_a && allow_tf32 && chosen.quad && device_limits(device).wgmma &&
        p.stride[2] == p.pool && p.pooled[1] >= 8 && p.pooled[2] >= 8) {
        Plan cand = plan;
        if (fit_tile(cand, chosen.nt, true)) {
            cand.smem_a = true;
            chosen = cand;
        }
    }
    // A shared across window offsets: pool 2 = stride 2 everywhere, the same shift pattern in every dimension,
    // one this build has (kShiftMasks; every window offset has taps), 32-channel blocks. TF32: where A from
    // shared memory applies, in its plan. fp32-accurate: where that kernel's conditions hold (a wgmma build,
    // 16-channel groups, pooled H and W >= 8) and a full 512-position tile fits beside the hi and lo weights.
    auto shift_pattern = [&]() {
        int masks[3] = {0, 0, 0};
        bool ok = p.pool == 2;
        for (int d = 0; d < 3 && ok; ++d) {
            ok = p.stride[d] == 2;
            for (int r = 0; r < 2 && ok; ++r)
                for (int j = p.tap_start[d][r]; j < p.tap_start[d][r + 1] && ok; ++j) {
                    ok = p.tap_c[d][j] < 3;
                    if (ok) masks[d] |= 1 << (3 * r + p.tap_c[d][j]);
                }
        }
        ok = ok && masks[0] == masks[1] && masks[1] == masks[2] && (masks[0] & 7) && (masks[0] >> 3);
        for (const int mask : kShiftMasks)
            if (ok && masks[0] == mask) return mask;
        return -1;
    };
    if (chosen.smem_a && share_a && chosen.nt == 4) chosen.shift_mask = shift_pattern();
    if (chosen_outputs > 0 && share_a && !allow_tf32 && widest == 4 && p.ci_padded % 16 == 0 &&
        device_limits(device).wgmma && p.pooled[1] >= 8 && p.pooled[2] >= 8 && shift_pattern() >= 0 &&
        shift_fp32_built(shift_pattern())) {
        Plan cand = plan;
        cand.quad = true;  // the shift kernel's box: 16-channel groups, one 16-byte load per row and shift
        if (fit_tile(cand, 4, true)) {
            cand.shift_mask = shift_pattern();
            chosen = cand;
        }
    }
    if (chosen_outputs > 0) {
        if (chosen.num_tiles > INT32_MAX)
            return fail("the batch is too large for one launch (" + std::to_string(chosen.num_tiles) +
                        " tiles, at most 2^31 - 1)");
        // Window split (the kernel that loads A into registers): a tile of at most 128 (256) rows keeps 1 (2)
        // of the 4 warpgroups busy; the others take the same rows and a share of the window offsets (set k:
        // offsets k, k + split, ...). The smallest split whose busiest set walks the fewest taps, among those
        // that shorten that walk at all (offsets without taps, kernel < stride, may leave nothing to share)
        // and whose partial maxima fit in one input box.
        Params& q = chosen.params;
        q.window_split = 1;
        if (split_windows && !chosen.smem_a && chosen.shift_mask < 0) {
            const int busy_groups = (q.rows + 4 * kRowsPerWarp - 1) / (4 * kRowsPerWarp);
            const int warps_with_rows = (q.rows + kRowsPerWarp - 1) / kRowsPerWarp;
            const int64_t box_floats = static_cast<int64_t>(q.ci_padded / (4 * (chosen.quad ? 4 : 2))) * q.group_stride;
            auto busiest_set_taps = [&](int split) {
                int most = 0;
                for (int set = 0; set < split; ++set) {
                    int taps = 0;
                    for (int r = set; r < q.windows; r += split) taps += tap_count(q, r);
                    most = std::max(most, taps);
                }
                return most;
            };
            int fewest = busiest_set_taps(1);
            for (int split = 2; split <= (kWarps / 4) / busy_groups; split *= 2) {
                const int taps = busiest_set_taps(split);
                if (taps < fewest && static_cast<int64_t>(split - 1) * warps_with_rows * 32 * 8 * chosen.nt <= box_floats) {
                    q.window_split = split;
                    fewest = taps;
                }
            }
        }
        return chosen;
    }
    return fail("the weight block, two input boxes and the tap list need " + std::to_string(smallest_smem) +
                " bytes of shared memory even with " + std::to_string(kRowsPerWarp) + "-position tiles and " +
                std::to_string(8 * narrowest) + "-channel blocks, more than the GPU's " + std::to_string(smem_limit) +
                " (C_in * kernel volume too large)");
}

std::string unsupported_reason(std::vector<int64_t> in_size, int64_t c_in, int64_t c_out, std::vector<int64_t> kernel,
                               std::vector<int64_t> stride, std::vector<int64_t> padding,
                               std::vector<int64_t> output_padding, int64_t pool, int64_t device, bool allow_tf32) {
    return make_plan(in_size, 1, c_in, c_out, kernel, stride, padding, output_padding, pool, allow_tf32,
                     static_cast<int>(device)).problem;
}

// The plan forward would run, for notebooks and tests: which kernel, the tile, the channel block and the
// shared memory per CTA.
py::dict describe_plan(std::vector<int64_t> in_size, int64_t batch, int64_t c_in, int64_t c_out,
                       std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding,
                       std::vector<int64_t> output_padding, int64_t pool, int64_t device, bool allow_tf32,
                       int64_t channels_per_block, bool smem_a, bool share_a, bool split_windows) {
    const Plan plan = make_plan(in_size, batch, c_in, c_out, kernel, stride, padding, output_padding, pool,
                                allow_tf32, static_cast<int>(device), channels_per_block, smem_a, share_a,
                                split_windows);
    py::dict d;
    d["problem"] = plan.problem;
    d["wgmma"] = device_limits(static_cast<int>(device)).wgmma;
    if (!plan.problem.empty()) return d;
    d["kernel"] = !allow_tf32 ? (plan.shift_mask >= 0 ? "3xTF32, A shared across window offsets"
                                                      : "3xTF32, A from registers")
                  : plan.shift_mask >= 0 ? "TF32, A shared across window offsets"
                  : plan.smem_a ? "TF32, A from shared memory" : "TF32, A from registers";
    d["tile"] = std::vector<int>{plan.params.tile[0], plan.params.tile[1], plan.params.tile[2]};
    d["channels_per_block"] = 8 * plan.nt;
    d["channel_group"] = plan.quad ? 16 : 8;
    d["smem_bytes"] = plan.smem_bytes;
    d["tiles"] = plan.num_tiles;
    d["window_split"] = plan.params.window_split;
    return d;
}

void check_tensor(const torch::Tensor& t, const char* name, const torch::Tensor& x) {
    TORCH_CHECK(t.device() == x.device(), "forward: ", name, " must be on ", x.device().str(), ", got ",
                t.device().str());
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, "forward: ", name, " must be float32, got ",
                c10::toString(t.scalar_type()));
    TORCH_CHECK(t.is_contiguous(), "forward: ", name, " must be contiguous");
}

// The kernel that shares A across window offsets, when the plan's pattern is MASK (32-channel blocks).
template <int MASK>
bool launch_shift(const Plan& plan, bool allow_tf32, cudaStream_t stream, int device) {
    if (plan.shift_mask != MASK) return false;
    const bool pool_first = plan.params.slope >= 0.f;
    auto kernel = pool_first ? convtranspose_leaky_pool_shift_kernel<4, MASK, false, true>
                             : convtranspose_leaky_pool_shift_kernel<4, MASK, false, false>;
    if constexpr (shift_fp32_built(MASK))
        if (!allow_tf32)
            kernel = pool_first ? convtranspose_leaky_pool_shift_kernel<4, MASK, true, true>
                                : convtranspose_leaky_pool_shift_kernel<4, MASK, true, false>;
    TORCH_CHECK(allow_tf32 || shift_fp32_built(MASK), "forward: no fp32-accurate shift kernel for pattern ",
                std::to_string(MASK));
    const int64_t channel_blocks = (plan.params.out_channels + 31) / 32;
    const int64_t resident = static_cast<int64_t>(blocks_per_sm(kernel, plan.smem_bytes, device, kShiftThreads)) *
                             device_limits(device).sms;
    const int64_t grid_x = std::max<int64_t>(1, std::min<int64_t>(plan.params.num_tiles,
                                                         (resident + channel_blocks - 1) / channel_blocks));
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(channel_blocks));
    kernel<<<grid, kShiftThreads, plan.smem_bytes, stream>>>(plan.params);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
}

template <int NT>
void launch(const Plan& plan, bool allow_tf32, cudaStream_t stream, int device) {
    if constexpr (NT == 4)
        if (plan.shift_mask >= 0) {
            const bool launched = launch_shift<9>(plan, allow_tf32, stream, device) ||
                                  launch_shift<17>(plan, allow_tf32, stream, device) ||
                                  launch_shift<19>(plan, allow_tf32, stream, device) ||
                                  launch_shift<25>(plan, allow_tf32, stream, device) ||
                                  launch_shift<27>(plan, allow_tf32, stream, device);
            TORCH_CHECK(launched, "forward: no shift kernel for pattern ", plan.shift_mask, " (kShiftMasks)");
            return;
        }
    const auto kernel = !allow_tf32    ? convtranspose_leaky_pool_kernel<NT, true, false>
                        : plan.smem_a ? convtranspose_leaky_pool_ss_kernel<NT>
                        : plan.quad   ? convtranspose_leaky_pool_kernel<NT, false, true>
                                      : convtranspose_leaky_pool_kernel<NT, false, false>;
    const int64_t channel_blocks = (plan.params.out_channels + 8 * NT - 1) / (8 * NT);
    const int64_t resident = static_cast<int64_t>(blocks_per_sm(kernel, plan.smem_bytes, device)) *
                             device_limits(device).sms;
    const int64_t grid_x = std::max<int64_t>(1, std::min<int64_t>(plan.params.num_tiles,
                                                         (resident + channel_blocks - 1) / channel_blocks));
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(channel_blocks));
    kernel<<<grid, kThreads, plan.smem_bytes, stream>>>(plan.params);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                      const torch::Tensor& multiplier, std::vector<int64_t> stride, std::vector<int64_t> padding,
                      std::vector<int64_t> output_padding, int64_t pool, double slope, bool allow_tf32,
                      const torch::Tensor& out, int64_t channels_per_block, bool smem_a, bool share_a,
                      bool split_windows) {
    TORCH_CHECK(x.is_cuda(), "forward: x must be a CUDA tensor, got one on ", x.device().str());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "forward: x must be float32, got ",
                c10::toString(x.scalar_type()));
    TORCH_CHECK(x.dim() == 5, "forward: x must be 5-D (N, C_in, D, H, W), got shape ", str_of(x.sizes()));
    TORCH_CHECK(x.is_contiguous(), "forward: x must be contiguous (NCDHW)");
    check_tensor(weight, "weight", x);
    check_tensor(bias, "bias", x);
    check_tensor(multiplier, "multiplier", x);
    check_tensor(out, "out", x);
    TORCH_CHECK(weight.dim() == 5 && weight.size(0) == x.size(1),
                "forward: weight must be (C_in, C_out, kD, kH, kW) with C_in = x.size(1) = ",
                std::to_string(x.size(1)), ", got shape ", str_of(weight.sizes()));
    const int64_t N = x.size(0), c_in = x.size(1), c_out = weight.size(1);
    TORCH_CHECK(bias.numel() == c_out, "forward: bias must hold one value per output channel (",
                std::to_string(c_out), "), got shape ", str_of(bias.sizes()));
    TORCH_CHECK(multiplier.numel() == c_out, "forward: multiplier must hold one value per output channel (",
                std::to_string(c_out), "), got shape ", str_of(multiplier.sizes()));
    const int device = x.get_device();
    const c10::cuda::CUDAGuard device_guard(x.device());
    Plan plan = make_plan(x.sizes().slice(2), N, c_in, c_out, weight.sizes().slice(2), stride, padding,
                          output_padding, pool, allow_tf32, device, channels_per_block, smem_a, share_a,
                          split_windows);
    TORCH_CHECK(plan.problem.empty(), "forward: outside the fused envelope: ", plan.problem);
    const Params& p = plan.params;
    TORCH_CHECK(out.dim() == 5 && out.size(0) == N && out.size(1) == c_out && out.size(2) == p.pooled[0] &&
                    out.size(3) == p.pooled[1] && out.size(4) == p.pooled[2],
                "forward: out must have shape (N, C_out, D'/P, H'/P, W'/P) = ",
                str_of(std::vector<int64_t>{N, c_out, p.pooled[0], p.pooled[1], p.pooled[2]}), ", got ", str_of(out.sizes()));
    if (out.numel() == 0) return out;
    plan.params.x = x.data_ptr<float>();
    plan.params.weight = weight.data_ptr<float>();
    plan.params.bias = bias.data_ptr<float>();
    plan.params.multiplier = multiplier.data_ptr<float>();
    plan.params.out = out.data_ptr<float>();
    plan.params.slope = static_cast<float>(slope);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    switch (plan.nt) {
        case 1: launch<1>(plan, allow_tf32, stream, device); break;
        case 2: launch<2>(plan, allow_tf32, stream, device); break;
        default: launch<4>(plan, allow_tf32, stream, device); break;
    }
    return out;
}

}  // namespace model_c_v3

// ---------------------------------------------------------------------------------------------
// Binding
// ---------------------------------------------------------------------------------------------
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "KernelBench L2-74 v3: ConvTranspose3d -> leaky -> *m -> leaky -> MaxPool3d in one launch";
    m.def("unsupported_reason", &model_c_v3::unsupported_reason,
          "'' when the fused kernel handles this configuration on `device`, else why not",
          py::arg("in_size"), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel"), py::arg("stride"),
          py::arg("padding"), py::arg("output_padding"), py::arg("pool"), py::arg("device"),
          py::arg("allow_tf32") = false);
    m.def("forward", &model_c_v3::forward,
          "out = maxpool3d(leaky(m * leaky(conv_transpose3d(x, weight, bias))), pool); allow_tf32 = 1xTF32, "
          "else 3xTF32 (fp32-accurate)",
          py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("multiplier"), py::arg("stride"),
          py::arg("padding"), py::arg("output_padding"), py::arg("pool"), py::arg("slope"), py::arg("allow_tf32"),
          py::arg("out"), py::arg("channels_per_block") = 0, py::arg("smem_a") = true, py::arg("share_a") = true,
          py::arg("split_windows") = true);
    m.def("describe_plan", &model_c_v3::describe_plan,
          "the plan forward would run: {'problem': '' or why not, 'kernel', 'tile', 'channels_per_block', "
          "'channel_group', 'smem_bytes', 'tiles', 'window_split', 'wgmma'}",
          py::arg("in_size"), py::arg("batch"), py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel"),
          py::arg("stride"), py::arg("padding"), py::arg("output_padding"), py::arg("pool"), py::arg("device"),
          py::arg("allow_tf32") = false, py::arg("channels_per_block") = 0, py::arg("smem_a") = true,
          py::arg("share_a") = true, py::arg("split_windows") = true);
}

// The probes' shared pieces (scripts/probes/wgmma_chain.cu, alu_beside_wgmma.cu): wgmma.m64n128k8 TF32 products
// from shared memory, as model B's by-phase kernel issues them (kernels/model_b_v3_fused_conv_groupnorm_pool.cu).
// Included inside each probe's anonymous namespace; needs <cstdint> and <cstdio>.
#pragma once

__device__ __forceinline__ uint32_t smem_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

#define ACC4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define ACC32(d, o) ACC4(d, o + 0), ACC4(d, o + 1), ACC4(d, o + 2), ACC4(d, o + 3), ACC4(d, o + 4), ACC4(d, o + 5), \
                    ACC4(d, o + 6), ACC4(d, o + 7)

// d += A * B, m64n128k8; descriptors as in the kernel (A: LBO 128 bytes, SBO 256; B: SBO 128).
__device__ __forceinline__ void mma_n128(float (&d)[16][4], uint32_t a_low, uint32_t b_low) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 ad, bd;\nsetp.ne.b32 p, 1, 0;\n"
        "mov.b64 ad, {%64, %66};\nmov.b64 bd, {%65, %67};\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, ad, bd, p, 1, 1;\n}\n"
        : ACC32(d, 0), ACC32(d, 8)
        : "r"(a_low), "r"(b_low), "n"(256 >> 4), "n"(128 >> 4));
}

// Prints device 0's name and returns its SM count (each probe runs one CTA per SM).
inline int print_device() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    printf("%s (%d SMs)\n", prop.name, sms);
    return sms;
}

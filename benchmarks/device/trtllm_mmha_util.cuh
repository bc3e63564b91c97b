// Helpers of benchmarks/device/trtllm_mmha_bench.cu that do not touch TensorRT-LLM: error checks, random fills,
// the FP32 reference attention, the read-bandwidth kernel, the per-configuration buffers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#define CK(call)                                                                                                       \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static constexpr int DH = 128;
static constexpr int PAGE = 64; // tokens per block of the paged cache (v0.5 build.py --tokens_per_block default)

__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (float) (x >> 40) / (float) (1ull << 24) * 2.0f - 1.0f; // [-1, 1)
}

template <typename E>
__global__ void fill_kernel(E* p, size_t n, uint32_t seed, float amp)
{
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
        p[i] = E(amp * hash_uniform(i, seed));
}

template <>
__global__ void fill_kernel<uint16_t>(uint16_t* p, size_t n, uint32_t seed, float amp)
{
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    {
        __half h = __float2half(amp * hash_uniform(i, seed));
        p[i] = *reinterpret_cast<uint16_t*>(&h);
    }
}

template <typename E>
void fill(E* p, size_t n, uint32_t seed, float amp)
{
    fill_kernel<E><<<2048, 256>>>(p, n, seed, amp);
    CK(cudaGetLastError());
}

template <typename E>
__device__ __forceinline__ float to_f(E x)
{
    return float(x);
}

template <>
__device__ __forceinline__ float to_f<uint16_t>(uint16_t x)
{
    return __half2float(*reinterpret_cast<__half*>(&x));
}

// FP32 reference: one block per (sequence, query head); attention over the cache positions [0, tlength] (the kernel
// has written the new token's K/V at position tlength), scores scaled by 1/sqrt(Dh), cache values dequantized.
template <typename T, typename Tc>
__global__ void reference_kernel(const T* q, int q_stride, const int8_t* kv, size_t bytes_per_seq, int max_len,
    int heads, int kv_heads, int tlength, float dequant, float* out, const int64_t* table, int blocks_per_seq)
{
    int const b = blockIdx.y, h = blockIdx.x, hk = h / (heads / kv_heads);
    extern __shared__ float sm[]; // [tlength + 1] scores, then [DH] q
    float* qs = sm + tlength + 1;
    for (int d = threadIdx.x; d < DH; d += blockDim.x)
        qs[d] = to_f(q[(size_t) b * q_stride + h * DH + d]);
    __syncthreads();
    // token t's row of K (kvi 0) or V (kvi 1): contiguous [Hkv, max_len, Dh] per sequence, or (paged, table given)
    // a block of PAGE tokens [Hkv, PAGE, Dh] named by table[(b x 2 + kvi) x blocks_per_seq + t / PAGE]
    auto row = [&](int kvi, int t) -> const Tc*
    {
        if (table == nullptr)
            return reinterpret_cast<const Tc*>(kv + (size_t) b * bytes_per_seq * 2 + kvi * bytes_per_seq)
                + ((size_t) hk * max_len + t) * DH;
        const Tc* blk = reinterpret_cast<const Tc*>(table[((size_t) b * 2 + kvi) * blocks_per_seq + t / PAGE]);
        return blk + ((size_t) hk * PAGE + t % PAGE) * DH;
    };
    for (int t = threadIdx.x; t <= tlength; t += blockDim.x)
    {
        float s = 0.f;
        const Tc* kr = row(0, t);
        for (int d = 0; d < DH; ++d)
            s += qs[d] * to_f(kr[d]) * dequant;
        sm[t] = s * rsqrtf((float) DH);
    }
    __syncthreads();
    __shared__ float mx, sum;
    if (threadIdx.x == 0)
    {
        mx = -1e30f;
        for (int t = 0; t <= tlength; ++t)
            mx = fmaxf(mx, sm[t]);
        sum = 0.f;
        for (int t = 0; t <= tlength; ++t)
            sum += expf(sm[t] - mx);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < DH; d += blockDim.x)
    {
        float o = 0.f;
        for (int t = 0; t <= tlength; ++t)
            o += expf(sm[t] - mx) * to_f(row(1, t)[d]) * dequant;
        out[((size_t) b * heads + h) * DH + d] = o / sum;
    }
}

// Read ceiling: each thread streams 16-byte loads and folds them into one word.
__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink)
{
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    {
        uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u)
        *sink = acc;
}

struct Config
{
    const char* model;
    int heads, kv_heads, batch, input_len, max_len, cached;
    const char* set = "blog"; // "blog": the launch blog's rows; "small_batch": batches of 1-16, outside them
};

struct Buffers
{
    void* qkv = nullptr;   // [batch, (H + 2 Hkv) Dh] of T
    void* out = nullptr;   // [batch, H Dh] of T
    int* seq_lens = nullptr;
    int* in_lens = nullptr;
    float* scales = nullptr; // [orig_quant, quant_orig]
    std::vector<int8_t*> layers;
    std::vector<int64_t*> tables; // paged: per layer, [batch, 2, blocks_per_seq] block addresses
};

static void setup(const Config& c, size_t qelem, size_t cache_bytes, int nlayers, Buffers& b)
{
    size_t const stride = (size_t) (c.heads + 2 * c.kv_heads) * DH;
    CK(cudaMalloc(&b.qkv, c.batch * stride * qelem));
    CK(cudaMalloc(&b.out, (size_t) c.batch * c.heads * DH * qelem));
    CK(cudaMalloc(&b.seq_lens, c.batch * sizeof(int)));
    CK(cudaMalloc(&b.in_lens, c.batch * sizeof(int)));
    CK(cudaMalloc(&b.scales, 2 * sizeof(float)));
    std::vector<int> sl(c.batch, c.cached + 1), il(c.batch, c.input_len);
    CK(cudaMemcpy(b.seq_lens, sl.data(), c.batch * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.in_lens, il.data(), c.batch * sizeof(int), cudaMemcpyHostToDevice));
    float sc[2] = {2.0f, 0.5f}; // orig -> quant x2, quant -> orig x0.5
    CK(cudaMemcpy(b.scales, sc, sizeof(sc), cudaMemcpyHostToDevice));
    for (int i = 0; i < nlayers; ++i)
    {
        int8_t* p;
        CK(cudaMalloc(&p, cache_bytes));
        b.layers.push_back(p);
    }
}

static void teardown(Buffers& b)
{
    CK(cudaFree(b.qkv));
    CK(cudaFree(b.out));
    CK(cudaFree(b.seq_lens));
    CK(cudaFree(b.in_lens));
    CK(cudaFree(b.scales));
    for (auto p : b.layers)
        CK(cudaFree(p));
    for (auto p : b.tables)
        CK(cudaFree(p));
    b = Buffers();
}

// Paged: each layer's pool holds batch x 2 x blocks_per_seq blocks of block_bytes, placed in a shuffled order (as an
// allocator hands them out); the table maps (sequence, K/V, block) to its address.
static void setup_tables(Buffers& b, int batch, int blocks_per_seq, size_t block_bytes, unsigned seed)
{
    size_t const n = (size_t) batch * 2 * blocks_per_seq;
    std::vector<size_t> slot(n);
    for (size_t i = 0; i < n; ++i)
        slot[i] = i;
    uint64_t x = seed * 2654435761ull + 1;
    for (size_t i = n - 1; i > 0; --i) // Fisher-Yates with a 64-bit LCG
    {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(slot[i], slot[(x >> 33) % (i + 1)]);
    }
    std::vector<int64_t> host(n);
    for (auto pool : b.layers)
    {
        for (size_t i = 0; i < n; ++i)
            host[i] = reinterpret_cast<int64_t>(pool + slot[i] * block_bytes);
        int64_t* t;
        CK(cudaMalloc(&t, n * sizeof(int64_t)));
        CK(cudaMemcpy(t, host.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
        b.tables.push_back(t);
    }
}


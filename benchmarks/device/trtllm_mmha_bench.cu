// Decode-step timing of TensorRT-LLM v0.5.0's decoder masked multi-head attention kernel on one GPU.
//
// Our harness around NVIDIA's kernel. The kernel's sources are NOT part of this project: they are read from a
// checkout of NVIDIA/TensorRT-LLM's release/0.5.0 tree (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention*
// and the headers of cpp/tensorrt_llm/common they include), kept out of git; see
// simulator/validation/data/h200_masked_mha/README.md for the commit and how the measurement was made.
//
// What it does, per configuration (query heads, K/V heads, batch, cached tokens, query dtype, cache dtype):
//   - fills the kernel's Masked_multihead_attention_params as the v0.5 GPT attention plugin does for a generation
//     step (fused QKV input with stride (H + 2 Hkv) x Dh, no bias, GPT-NeoX RoPE over all 128 dims as Llama, beam 1,
//     multi-block mode off, sequence_lengths = cached + 1, context_lengths = the row's input length);
//   - uses a contiguous cache (KVLinearBuffer: per sequence [K | V], each [Hkv, max_len, Dh]), in the query dtype or
//     FP8 e4m3 with the scale pair kv_scale_orig_quant / kv_scale_quant_orig, filled with random values;
//   - launches the plugin's own path for beam 1 without multi-block mode (mmha_launch_kernel_dispatch_8bits_kv_cache
//     <T, KVLinearBuffer, params, 128, 256 threads, no beams, no multi-block>), back to back, rotating over several
//     cache buffers (layers) so that repeated launches do not read the L2, timed with CUDA events (median of reps);
//   - KVLinearBuffer computes a sequence's offset in int32 (seq x bytes_per_seq x 2), so a layer cache over 2 GiB is
//     launched in batch chunks that stay under it (the sum of the chunks' launches is the step; `chunks` says how
//     many).
// Before timing: a correctness check against a plain FP32 reference (every output written, relative L2 error),
// and a read-bandwidth ceiling (a streaming 16-byte-load reduction over 4 GiB).
// Output: one JSON object per line on stdout. Modes: no argument (every configuration, contiguous cache), --quick
// (the last decode step only), --paged (the paged cache, KVBlockArray with 64-token blocks: fp16 queries, each blog
// row's first and last step). Helpers that do not touch TensorRT-LLM: trtllm_mmha_util.cuh.

// CUDA 13's CCCL dropped cub::Max, which the kernel's multi-block path names (that path is compiled, not run here):
// the same functor under the old name, so the 2023 sources build unchanged.
#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
namespace cub
{
using Max = ::cuda::maximum<>;
}
#include "tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderMaskedMultiheadAttentionLaunch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace tensorrt_llm::kernels;

#include "trtllm_mmha_util.cuh"

template <typename T>
static const char* tname()
{
    return std::is_same<T, uint16_t>::value ? "fp16" : "bf16";
}

template <typename T>
struct Runner
{
    const Config& c;
    bool fp8;
    Buffers& buf;
    size_t elem, bytes_per_seq;
    int chunk;

    bool paged;
    int blocks_per_seq;

    Runner(const Config& c_, bool fp8_, Buffers& b, bool paged_ = false)
        : c(c_)
        , fp8(fp8_)
        , buf(b)
        , paged(paged_)
    {
        elem = fp8 ? 1 : sizeof(T);
        blocks_per_seq = (c.max_len + PAGE - 1) / PAGE;
        bytes_per_seq = (size_t) (paged ? blocks_per_seq * PAGE : c.max_len) * c.kv_heads * DH * elem;
        // the paged cache addresses blocks through 64-bit pointers: no 32-bit offset to keep under 2 GiB
        chunk = paged ? c.batch : (int) std::min<size_t>(c.batch, ((size_t) 1 << 31) / (2 * bytes_per_seq) - 1);
    }

    size_t block_bytes() const
    {
        return (size_t) c.kv_heads * PAGE * DH * elem;
    }

    int chunks() const
    {
        return (c.batch + chunk - 1) / chunk;
    }

    void launch(int layer, bool rope, cudaStream_t s)
    {
        int const stride = (c.heads + 2 * c.kv_heads) * DH;
        for (int b0 = 0; b0 < c.batch; b0 += chunk)
        {
            int const nb = std::min(chunk, c.batch - b0);
            Masked_multihead_attention_params<T> p;
            memset(&p, 0, sizeof(p));
            T const* qkv = reinterpret_cast<T const*>(buf.qkv) + (size_t) b0 * stride;
            p.out = reinterpret_cast<T*>(buf.out) + (size_t) b0 * c.heads * DH;
            p.q = qkv;
            p.k = qkv + c.heads * DH;
            p.v = qkv + (c.heads + c.kv_heads) * DH;
            p.stride = stride;
            p.batch_size = nb;
            p.beam_width = 1;
            p.memory_max_len = c.max_len;
            p.length_per_sample = buf.seq_lens + b0;
            p.input_lengths = buf.in_lens + b0;
            p.timestep = c.cached;
            p.num_heads = c.heads;
            p.num_kv_heads = c.kv_heads;
            p.hidden_size_per_head = DH;
            if (rope)
            {
                p.position_embedding_type = PositionEmbeddingType::kROPE_GPT_NEOX;
                p.rotary_embedding_dim = DH;
                p.rotary_embedding_base = 10000.f;
                p.rotary_embedding_scale_type = RotaryScalingType::kNONE;
                p.rotary_embedding_scale = 1.f;
                p.rotary_embedding_max_positions = 4096;
            }
            p.inv_sqrt_dh = 1.f / sqrtf((float) DH);
            p.fp8_kv_cache = fp8;
            if (fp8)
            {
                p.kv_scale_orig_quant = buf.scales;
                p.kv_scale_quant_orig = buf.scales + 1;
            }
            p.multi_processor_count = 132;
            if (paged)
            {
                KVBlockArray kv(nb, blocks_per_seq, PAGE, (int32_t) (c.kv_heads * DH * elem));
                kv.data = buf.tables[layer];
                mmha::mmha_launch_kernel_dispatch_8bits_kv_cache<T, KVBlockArray, Masked_multihead_attention_params<T>,
                    DH, 256, false, false>(p, kv, s, c.cached);
                continue;
            }
            KVLinearBuffer kv(nb, 1, c.max_len, (int32_t) (c.kv_heads * DH * elem));
            kv.data = buf.layers[layer] + (size_t) b0 * 2 * bytes_per_seq;
            mmha::mmha_launch_kernel_dispatch_8bits_kv_cache<T, KVLinearBuffer, Masked_multihead_attention_params<T>,
                DH, 256, false, false>(p, kv, s, c.cached);
        }
    }
};

template <typename T>
static void fill_layers(Buffers& b, size_t cache_bytes, bool fp8)
{
    for (size_t i = 0; i < b.layers.size(); ++i)
    {
        if (fp8)
            fill(reinterpret_cast<__nv_fp8_e4m3*>(b.layers[i]), cache_bytes, 17 + i, 2.0f);
        else
            fill(reinterpret_cast<T*>(b.layers[i]), cache_bytes / sizeof(T), 17 + i, 1.0f);
    }
}

// Correctness: kernel (no RoPE) against the FP32 reference on one layer.
template <typename T>
static double check(const Config& c, bool fp8, bool paged)
{
    Buffers b;
    Runner<T> r(c, fp8, b, paged);
    size_t const cache_bytes = (size_t) c.batch * 2 * r.bytes_per_seq;
    setup(c, sizeof(T), cache_bytes, 1, b);
    if (paged)
        setup_tables(b, c.batch, r.blocks_per_seq, r.block_bytes(), 7);
    fill_layers<T>(b, cache_bytes, fp8);
    fill(reinterpret_cast<T*>(b.qkv), (size_t) c.batch * (c.heads + 2 * c.kv_heads) * DH, 5, 1.0f);
    size_t const nout = (size_t) c.batch * c.heads * DH;
    CK(cudaMemset(b.out, 0xFF, nout * sizeof(T))); // NaN poison
    r.launch(0, false, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float* ref;
    CK(cudaMalloc(&ref, nout * sizeof(float)));
    size_t const smem = (c.cached + 1 + DH) * sizeof(float);
    dim3 grid(c.heads, c.batch);
    int const q_stride = (c.heads + 2 * c.kv_heads) * DH;
    int64_t const* table = paged ? b.tables[0] : nullptr;
    if (fp8)
        reference_kernel<T, __nv_fp8_e4m3><<<grid, 128, smem>>>(reinterpret_cast<T*>(b.qkv), q_stride, b.layers[0],
            r.bytes_per_seq, c.max_len, c.heads, c.kv_heads, c.cached, 0.5f, ref, table, r.blocks_per_seq);
    else
        reference_kernel<T, T><<<grid, 128, smem>>>(reinterpret_cast<T*>(b.qkv), q_stride, b.layers[0],
            r.bytes_per_seq, c.max_len, c.heads, c.kv_heads, c.cached, 1.0f, ref, table, r.blocks_per_seq);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<T> o(nout);
    std::vector<float> rf(nout);
    CK(cudaMemcpy(o.data(), b.out, nout * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(rf.data(), ref, nout * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < nout; ++i)
    {
        float v;
        if (std::is_same<T, uint16_t>::value)
            v = __half2float(*reinterpret_cast<const __half*>(&o[i]));
        else
            v = __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&o[i]));
        if (!std::isfinite(v))
            return -1.0; // unwritten (poison) or NaN
        num += (double) (v - rf[i]) * (v - rf[i]);
        den += (double) rf[i] * rf[i];
    }
    CK(cudaFree(ref));
    teardown(b);
    return std::sqrt(num / den);
}

template <typename T>
static void time_config(const Config& c, bool fp8, int reps, bool paged = false)
{
    Buffers b;
    Runner<T> r(c, fp8, b, paged);
    size_t const cache_bytes = (size_t) c.batch * 2 * r.bytes_per_seq;
    // Enough layers that a launch never finds its cache in the 60 MB L2: >= 4 and >= 2 GB in all, <= 48 GB.
    int nl = (int) std::max<size_t>(4, (2ull << 30) / cache_bytes + 1);
    nl = (int) std::min<size_t>(nl, std::max<size_t>(2, (48ull << 30) / cache_bytes));
    setup(c, sizeof(T), cache_bytes, nl, b);
    if (paged)
        setup_tables(b, c.batch, r.blocks_per_seq, r.block_bytes(), 11);
    fill_layers<T>(b, cache_bytes, fp8);
    fill(reinterpret_cast<T*>(b.qkv), (size_t) c.batch * (c.heads + 2 * c.kv_heads) * DH, 5, 1.0f);
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    for (int i = 0; i < 2 * nl; ++i)
        r.launch(i % nl, true, s);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    // launches per rep: >= 2 ms of work by a first estimate, a multiple of the layer count
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < nl; ++i)
        r.launch(i, true, s);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms0;
    CK(cudaEventElapsedTime(&ms0, e0, e1));
    int const per = std::max(nl, (int) std::ceil(2.0 / (ms0 / nl) / nl) * nl);
    std::vector<double> t;
    for (int rep = 0; rep < reps; ++rep)
    {
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < per; ++i)
            r.launch(i % nl, true, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1e-3 / per);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    double const med = t[t.size() / 2];
    double const tokens = (double) c.batch * (c.cached + 1);
    double const unique = tokens * c.kv_heads * DH * 2 * r.elem;
    double const per_qhead = tokens * c.heads * DH * 2 * r.elem;
    printf("{\"kind\": \"mmha\", \"set\": \"%s\", \"layout\": \"%s\", \"model\": \"%s\", \"heads\": %d, "
           "\"kv_heads\": %d, \"batch\": %d, \"input_len\": %d, "
           "\"max_len\": %d, \"cached\": %d, \"q_dtype\": \"%s\", \"cache_dtype\": \"%s\", \"chunks\": %d, "
           "\"layers_rotated\": %d, \"launches_per_rep\": %d, \"reps\": %d, \"t_s_median\": %.9g, \"t_s_min\": %.9g, "
           "\"t_s_max\": %.9g, \"kv_bytes_unique\": %.0f, \"kv_bytes_per_query_head\": %.0f, "
           "\"unique_Bps\": %.6g, \"per_query_head_Bps\": %.6g}\n",
        c.set, paged ? "paged" : "linear", c.model, c.heads, c.kv_heads, c.batch, c.input_len, c.max_len, c.cached,
        tname<T>(), fp8 ? "fp8_e4m3" : tname<T>(),
        r.chunks(), nl, per, reps, med, t.front(), t.back(), unique, per_qhead, unique / med, per_qhead / med);
    fflush(stdout);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaStreamDestroy(s));
    teardown(b);
}

static void read_ceiling(int reps)
{
    size_t const bytes = 4ull << 30;
    uint4* p;
    unsigned* sink;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&sink, 4));
    fill(reinterpret_cast<int8_t*>(p), bytes, 3, 100.f);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int i = 0; i < reps + 2; ++i)
    {
        CK(cudaEventRecord(e0));
        read_kernel<<<132 * 16, 512>>>(p, bytes / 16, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2)
            t.push_back(ms * 1e-3);
    }
    std::sort(t.begin(), t.end());
    printf("{\"kind\": \"read_ceiling\", \"bytes\": %zu, \"t_s_median\": %.9g, \"Bps\": %.6g}\n", bytes,
        t[t.size() / 2], bytes / t[t.size() / 2]);
    fflush(stdout);
    CK(cudaFree(p));
    CK(cudaFree(sink));
}

// The blog's rows (NVIDIA/TensorRT-LLM docs/source/blogs/H200launch.md): per row, the cached lengths timed are the
// first, middle and last decode steps (and more for the 2048-token outputs).
static std::vector<Config> blog_configs()
{
    std::vector<Config> v;
    auto add = [&](const char* m, int h, int hk, int b, int in, int out, std::vector<int> cached)
    {
        for (int x : cached)
            v.push_back({m, h, hk, b, in, in + out, x});
    };
    add("llama2-13b", 40, 40, 1024, 128, 128, {128, 192, 255});
    add("llama2-13b", 40, 40, 128, 128, 2048, {128, 640, 1152, 1664, 2175});
    add("llama2-13b", 40, 40, 64, 2048, 128, {2048, 2112, 2175});
    add("llama2-70b", 64, 8, 512, 128, 128, {128, 192, 255});
    add("llama2-70b-tp2", 32, 4, 512, 128, 2048, {128, 640, 1152, 1664, 2175});
    add("llama2-70b", 64, 8, 64, 2048, 128, {2048, 2112, 2175});
    add("llama2-70b", 64, 8, 32, 2048, 128, {2048, 2112, 2175});
    // outside the blog's rows: few CTAs (40-1024), where the model's GPU-wide rates are not measured otherwise
    for (int b : {1, 4, 16})
    {
        v.push_back({"llama2-13b", 40, 40, b, 2048, 2176, 2048, "small_batch"});
        v.push_back({"llama2-70b", 64, 8, b, 2048, 2176, 2048, "small_batch"});
    }
    return v;
}

int main(int argc, char** argv)
{
    std::string const mode = argc > 1 ? argv[1] : "";
    bool const quick = mode == "--quick";
    bool const paged_only = mode == "--paged"; // only the paged cache: fp16 queries, each row's first and last step
    int const reps = quick ? 3 : 7;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("{\"kind\": \"device\", \"name\": \"%s\", \"sms\": %d, \"l2_bytes\": %d, \"cc\": \"%d.%d\"}\n", prop.name,
        prop.multiProcessorCount, prop.l2CacheSize, prop.major, prop.minor);
    // correctness on small shapes (MHA and GQA, both dtypes, caches and layouts), before any timing
    std::vector<Config> small = {{"check-mha", 40, 40, 3, 100, 300, 257}, {"check-gqa", 64, 8, 2, 100, 300, 190}};
    bool ok = true;
    for (int paged = 0; paged < 2; ++paged)
        for (auto const& c : small)
            for (int f = 0; f < 2; ++f)
            {
                double e16 = check<uint16_t>(c, f, paged), eb = check<__nv_bfloat16>(c, f, paged);
                printf("{\"kind\": \"check\", \"layout\": \"%s\", \"model\": \"%s\", \"cache\": \"%s\", "
                       "\"rel_l2_fp16\": %.3g, \"rel_l2_bf16\": %.3g}\n",
                    paged ? "paged" : "linear", c.model, f ? "fp8_e4m3" : "16-bit", e16, eb);
                // 16-bit cache: FP32 accumulation, 16-bit output; FP8: the new token's K/V quantized too
                double const tol = f ? 5e-2 : 2e-2;
                ok = ok && e16 >= 0 && eb >= 0 && e16 < tol && eb < tol;
            }
    if (!ok)
    {
        fprintf(stderr, "correctness check failed\n");
        return 3;
    }
    read_ceiling(reps);
    for (auto const& c : blog_configs())
    {
        if (paged_only)
        {
            if (std::string(c.set) == "blog" && (c.cached == c.input_len || c.cached == c.max_len - 1))
            {
                time_config<uint16_t>(c, false, reps, true);
                time_config<uint16_t>(c, true, reps, true);
            }
            continue;
        }
        if (quick && c.cached != c.max_len - 1)
            continue;
        time_config<uint16_t>(c, false, reps);
        time_config<uint16_t>(c, true, reps);
        time_config<__nv_bfloat16>(c, false, reps);
        time_config<__nv_bfloat16>(c, true, reps);
    }
    read_ceiling(reps);
    return 0;
}

// Constrained beam top-k with early termination (recache issue 8, xGR §6).
//
// Step 1, recache_beam_candidates (one block per beam): score the beam's
// allowed next tokens (its trie node's children) as beam_score + log_prob,
// keep its best K as sorted 64-bit keys in the workspace [BW, K].
// Step 2, recache_beam_select (one block): global best BW of the BW x K
// candidates. A sample (best m of every beam) gives a lower bound on the
// final threshold; each beam keeps only its prefix at or above it (binary
// search = early termination), and the survivors are sorted. If too many
// survive, the bound is raised by bisection. Host mirror and references:
// kernels/src/beam_mirror.rs, kernels/src/beam.rs.
//
// Key = ord(score) << 32 | (0xffffffff - (beam * vocab + token)): larger is
// better, ties go to the lower (beam, token); 0 = no candidate. NaN scores
// order like -inf. Scores are one fp32 add, bit-identical to the CPU.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define SORT_N 2048     // per-beam sort buffer (K <= SORT_N / 2)
#define SELECT_CAP 4096 // selection buffer; BW <= SELECT_CAP / 2
#define MAX_BW 2048

__device__ __forceinline__ u32 score_ord(float s) {
    if (s != s) s = __int_as_float(0xff800000);  // NaN -> -inf
    u32 b = __float_as_uint(s);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float ord_score(u32 o) {
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

__device__ __forceinline__ u32 next_pow2(u32 n) {
    u32 p = 1;
    while (p < n) p <<= 1;
    return p;
}

// Block-wide bitonic sort of buf[0..n), n a power of two, descending.
__device__ void bitonic_desc(u64* buf, u32 n) {
    for (u32 k = 2; k <= n; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
                const u32 p = i ^ j;
                if (p > i) {
                    const u64 a = buf[i], b = buf[p];
                    const bool desc = (i & k) == 0;
                    if (desc ? (a < b) : (a > b)) { buf[i] = b; buf[p] = a; }
                }
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void __launch_bounds__(512) recache_beam_candidates(
    const float* __restrict__ log_probs, i64 row_stride, int vocab,
    const float* __restrict__ beam_scores, const int* __restrict__ beam_node,
    const int* __restrict__ row_ptr, const int* __restrict__ child_token, int num_nodes,
    int K, u64* __restrict__ cand)
{
    __shared__ u64 buf[SORT_N];
    const int b = blockIdx.x;
    const int node = beam_node[b];
    int begin = 0, n = 0;
    if (node >= 0 && node < num_nodes) {
        begin = row_ptr[node];
        n = max(row_ptr[node + 1] - begin, 0);
    }
    const float bs = beam_scores[b];
    const float* lp = log_probs + (i64)b * row_stride;
    const u32 flat0 = (u32)b * (u32)vocab;
    // Chunks of up to SORT_N - K fresh candidates are sorted together with the
    // best K so far (buf[0..kept) is already sorted from the previous round).
    const int chunk = SORT_N - K;
    int kept = 0, done = 0;
    do {
        const int take = min(n - done, chunk);
        const u32 total = (u32)(kept + take);
        const u32 p = next_pow2(total > 0 ? total : 1);
        for (u32 i = threadIdx.x; i + kept < p; i += blockDim.x) {
            u64 key = 0;
            if ((int)i < take) {
                const int t = child_token[begin + done + (int)i];
                if (t >= 0 && t < vocab) {
                    const float s = bs + lp[t];
                    key = ((u64)score_ord(s) << 32) | (u64)(0xffffffffu - (flat0 + (u32)t));
                }
            }
            buf[kept + i] = key;
        }
        __syncthreads();
        bitonic_desc(buf, p);
        kept = min((int)total, K);
        done += take;
    } while (done < n);
    for (int j = threadIdx.x; j < K; j += blockDim.x)
        cand[(i64)b * K + j] = j < kept ? buf[j] : 0ull;
}

// Candidates of one beam's sorted list that are >= t (binary search).
__device__ __forceinline__ u32 prefix_at_least(const u64* l, int K, u64 t) {
    int lo = 0, hi = K;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (l[mid] >= t) lo = mid + 1; else hi = mid;
    }
    return (u32)lo;
}

extern "C" __global__ void __launch_bounds__(1024) recache_beam_select(
    const u64* __restrict__ cand, int BW, int K, int vocab,
    const int* __restrict__ beam_node, const int* __restrict__ row_ptr,
    const int* __restrict__ child_token, const int* __restrict__ child_node, int num_nodes,
    int* out_parent, int* out_token, float* out_score, int* out_node, u32* out_visited)
{
    __shared__ u64 buf[SELECT_CAP];
    __shared__ u32 offs[MAX_BW + 1];
    __shared__ u32 s_count;
    const u32 tid = threadIdx.x;

    // Sample: ranks [0, m) of every beam; its BW-th best is a lower bound.
    const int m = min(max(SELECT_CAP / BW, 1), K);
    const u32 S = (u32)BW * (u32)m;
    const u32 P = next_pow2(S);
    for (u32 i = tid; i < P; i += blockDim.x)
        buf[i] = i < S ? cand[(i64)(i / m) * K + (i % m)] : 0ull;
    __syncthreads();
    bitonic_desc(buf, P);
    u64 thresh = buf[BW - 1];
    if (thresh == 0) thresh = 1;  // fewer than BW valid: keep all valid
    const u64 top = buf[0];
    __syncthreads();

    // Raise the bound by bisection while more than SELECT_CAP survive.
    if (tid == 0) s_count = 0;
    __syncthreads();
    for (int b = tid; b < BW; b += blockDim.x)
        atomicAdd(&s_count, prefix_at_least(cand + (i64)b * K, K, thresh));
    __syncthreads();
    const u32 first_count = s_count;
    __syncthreads();  // everyone has read s_count before it is reset below
    if (first_count > SELECT_CAP) {
        u64 lo = thresh, hi = top + 1;
        for (;;) {
            const u64 mid = lo + (hi - lo) / 2;
            __syncthreads();
            if (tid == 0) s_count = 0;
            __syncthreads();
            for (int b = tid; b < BW; b += blockDim.x)
                atomicAdd(&s_count, prefix_at_least(cand + (i64)b * K, K, mid));
            __syncthreads();
            const u32 c = s_count;
            if (c > SELECT_CAP) lo = mid;
            else if (c < (u32)BW) hi = mid;
            else { thresh = mid; break; }
        }
        __syncthreads();  // the last s_count read happens before the reset below
    }

    // Early termination: each beam keeps its prefix >= thresh. Offsets by an
    // inclusive Hillis-Steele scan over offs[1..BW].
    u32 visited = 0;
    for (int b = tid; b < BW; b += blockDim.x) {
        const u64* l = cand + (i64)b * K;
        const u32 c = prefix_at_least(l, K, thresh);
        const u32 valid = prefix_at_least(l, K, 1);
        offs[b + 1] = c;
        visited += min(c + 1, valid);
    }
    if (tid == 0) { offs[0] = 0; s_count = 0; }
    __syncthreads();
    for (int d = 1; d < BW; d <<= 1) {
        u32 add[MAX_BW / 1024];
        int r = 0;
        for (int i = tid; i < BW; i += blockDim.x, ++r) add[r] = i >= d ? offs[i + 1 - d] : 0;
        __syncthreads();
        r = 0;
        for (int i = tid; i < BW; i += blockDim.x, ++r) offs[i + 1] += add[r];
        __syncthreads();
    }
    if (out_visited) atomicAdd(&s_count, visited);
    const u32 C = offs[BW];
    for (u32 i = tid; i < C; i += blockDim.x) {
        int lo = 0, hi = BW;  // beam b owns [offs[b], offs[b+1])
        while (hi - lo > 1) { const int mid = (lo + hi) >> 1; if (offs[mid] <= i) lo = mid; else hi = mid; }
        buf[i] = cand[(i64)lo * K + (i - offs[lo])];
    }
    const u32 P2 = next_pow2(C > (u32)BW ? C : (u32)BW);
    for (u32 i = C + tid; i < P2; i += blockDim.x) buf[i] = 0ull;
    __syncthreads();
    bitonic_desc(buf, P2);

    for (int i = tid; i < BW; i += blockDim.x) {
        const u64 key = buf[i];
        int parent = -1, token = -1, nd = -1;
        float score = __int_as_float(0xff800000);
        if (key != 0) {
            const u32 flat = 0xffffffffu - (u32)key;
            parent = (int)(flat / (u32)vocab);
            token = (int)(flat % (u32)vocab);
            score = ord_score((u32)(key >> 32));
            const int node = beam_node[parent];
            if (node >= 0 && node < num_nodes) {
                int lo = row_ptr[node], hi = row_ptr[node + 1];
                while (lo < hi) {
                    const int mid = (lo + hi) >> 1;
                    if (child_token[mid] < token) lo = mid + 1; else hi = mid;
                }
                if (lo < row_ptr[node + 1] && child_token[lo] == token) nd = child_node[lo];
            }
        }
        out_parent[i] = parent; out_token[i] = token; out_score[i] = score; out_node[i] = nd;
    }
    __syncthreads();
    if (tid == 0 && out_visited) *out_visited = s_count;
}

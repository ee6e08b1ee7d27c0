// jaxgcn's fused sparse x dense product for the CPU, as an XLA FFI custom call.
//
//   out[i, r*H + h] = sum_{k in row i} vals[k, r or 0] * b[cols[k], r*H + h]
//
// A CSR matrix (indptr [n+1], cols [nnz]) with V value columns (V = 1: one shared matrix;
// V = R: R matrices with one sparsity pattern, e.g. R dropout masks of the same features) times a
// dense [m, W] matrix (W = R * H). Each output row is accumulated in place, so no [nnz, W]
// message buffer exists (the gather + segment_sum lowering materializes one). Rows are cut into
// chunks of about equal nnz, run on XLA's intra-op thread pool; the calling thread takes chunks
// too and waits only for chunks another thread already started, so it cannot deadlock.
// The gradient with respect to b is the same product with the transposed pattern (jaxgcn/csr.py).
// With skip_zero_rows it first flags the rows of b that are all zero and never reads them: the
// gradient of a loss masked to the training nodes is zero on every other row, and reading those
// rows (one cache miss each) would be most of the work.
//
// Debug counters (jaxgcn.csr.kernel_counters) record which regime each call ran in: a few relaxed
// atomic adds per call, per-row counts summed per chunk first. JaxgcnKernelIsa says which branch of
// LoadFirst/StoreFirst was compiled: AVX-512 or AVX2 masked moves, or the portable copies.
//
// The regimes (tests/test_csr.py asserts which ran, through the counters in brackets):
//
//   regime            condition                                         where
//   narrow rows       V == 1, W <= 16 (one run's hidden or output      RunRows -> NarrowRows
//                     width; the pair too): a row's sums in one register [narrow_rows]
//   blocked rows      otherwise V == 1 or H % 16 == 0: a row's sums     RunRows -> BlockedRow -> Block
//                     in up to 8 registers of 16 lanes  [blocked_rows]
//   scalar rows       otherwise (per-run width not a multiple of 16)    RunRows, its last loop
//                                                       [scalar_rows]
//   pair              SpmmPair: per-run and shared values from one      Block<true>, RunRows
//                     read of each row of b             [pair_calls]
//   prefetch          b larger than the tile (half of L2): rows of b   Spmm (w->prefetch), Block, RunRows
//                     asked for kPrefetch entries ahead [prefetch_calls]
//   row chunks        (nnz + rows) * W >= the product cut-off: 4 x     SplitRows, RunChunks
//                     threads chunks of
//                     equal nnz + rows on XLA's pool    [chunked_calls]
//   zero rows skipped skip_zero_rows: all-zero rows of b flagged in     SkipFlags (on the pool through
//                     one pass, never read      [skip_calls, skipped_rows]  ParallelFor when m * W >= the
//                                                                       pass cut-off)
//   test mask         an explicit mask replaces those flags [mask_calls] SkipFlags
//   self-loop         diag given (square): out[i] += diag[i] * b[i]     RunRows, Block
//   scatter           one run's gradient A^T g (V == 1, W <= 16): g's    SpmmTImpl (one thread)
//                     live rows scattered     [scatter_calls, skipped_rows]
//   adam              one optimizer step of a params leaf [adam_calls]  adam.h: AdamImpl (ParallelFor)
//   dropout           hidden activations' hash dropout [dropout_calls] dropout.h: DropoutImpl (ParallelFor)
//   dense per run     RunDense modes 0-2; modes 1 and 2 skip all-zero   run_dense.h: RunDenseImpl (on the
//                     rows of g       [dense_calls, dense_skipped_rows]  pool, ParallelFor, when MACs >= the
//                                                                       pass cut-off)
//
// Every parallel part runs on one scheduler, RunChunks (ChunksFor says how many chunks: one below
// a cut-off, else 4 per thread). The two cut-offs (a product's rows, ParallelFor's passes) and the
// prefetch tile are the machine's (jaxgcn/machine.py chooses them from the CPU's vector width and L2
// and sets them once, JaxgcnSetTuning); they change the speed, never the sums.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
// Which branch of LoadFirst/StoreFirst is compiled (JAXGCN_ISA): 1, AVX-512 masked moves; 2, AVX2
// masked moves (vmaskmovps, 8 lanes at a time); 0, portable copies. JAXGCN_PORTABLE
// (JAXGCN_KERNEL_ISA=portable) keeps to the portable branch where the compiler targets AVX2 or
// AVX-512 too, and -mno-avx512f (JAXGCN_KERNEL_ISA=avx2) to the AVX2 one, so that one machine can
// build and test them all.
#if defined(__AVX512F__) && !defined(JAXGCN_PORTABLE)
#define JAXGCN_ISA 1
#include <immintrin.h>
#elif defined(__AVX2__) && !defined(JAXGCN_PORTABLE)
#define JAXGCN_ISA 2
#include <immintrin.h>
#else
#define JAXGCN_ISA 0
#endif
// The tests compile with -DJAXGCN_EXPECT_ISA=0, 1 or 2 to check which branch a set of flags selects.
#if defined(JAXGCN_EXPECT_ISA) && JAXGCN_EXPECT_ISA != JAXGCN_ISA
#error "JAXGCN_EXPECT_ISA: these flags select another branch of LoadFirst/StoreFirst"
#endif
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// ---------------------------------------------------------------------------------------------- helpers

constexpr int64_t kLanes = 16;

// The debug counters, in the order of kCounterNames (jaxgcn.csr.kernel_counters documents them).
enum Counter : int {
  kCalls, kPairCalls, kPrefetchCalls, kChunkedCalls, kSkipCalls, kMaskCalls, kSkippedRows, kBlockedRows,
  kScalarRows, kNarrowRows, kDenseCalls, kDenseSkippedRows, kScatterCalls, kAdamCalls, kDropoutCalls, kNumCounters
};
constexpr const char* kCounterNames =
    "calls,pair_calls,prefetch_calls,chunked_calls,skip_calls,mask_calls,skipped_rows,blocked_rows,scalar_rows,"
    "narrow_rows,dense_calls,dense_skipped_rows,scatter_calls,adam_calls,dropout_calls";
std::atomic<int64_t> g_counters[kNumCounters];

// Relaxed: the counters order nothing; the caller reads them after the call has returned.
inline void Count(Counter c, int64_t v = 1) {
  if (v != 0) g_counters[c].fetch_add(v, std::memory_order_relaxed);
}

// The settings JaxgcnSetTuning gives (defaults: an AVX-512 CPU with a 512 KiB L2); relaxed: each
// call reads them once, and any value gives the same results.
std::atomic<int64_t> g_tile_bytes{256 * 1024}, g_product_cutoff{1 << 18}, g_pass_cutoff{1 << 17};

int64_t Padded(int64_t v) { return (v + kLanes - 1) / kLanes * kLanes; }

// THE scheduler: runs body(t) for every chunk t in [0, n_chunks) on XLA's intra-op pool, the
// calling thread taking chunks too, and returns when every chunk is done. The caller waits only
// for chunks another thread already started, so it cannot deadlock; a pool task that starts after
// every chunk is done only reads the shared counters (never body), so the caller may return.
template <typename Body>
void RunChunks(ffi::ThreadPool& pool, int64_t n_chunks, const Body& body) {
  if (n_chunks <= 1) {
    if (n_chunks == 1) body(int64_t{0});
    return;
  }
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  auto st = std::make_shared<State>();
  auto drain = [st, n_chunks, &body] {
    for (;;) {
      const int64_t t = st->next.fetch_add(1);
      if (t >= n_chunks) return;
      body(t);
      if (st->done.fetch_add(1) + 1 == n_chunks) {
        std::lock_guard<std::mutex> lock(st->mu);
        st->cv.notify_all();
      }
    }
  };
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  for (int64_t t = 0; t < std::min<int64_t>(threads, n_chunks) - 1; ++t) pool.Schedule([drain] { drain(); });
  drain();
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->done.load() == n_chunks; });
}

// How many chunks work of `cost` over n items is cut into: one (the calling thread alone) below
// `cutoff`, else 4 per pool thread (at most n).
int64_t ChunksFor(ffi::ThreadPool& pool, int64_t n, int64_t cost, int64_t cutoff) {
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  return cost < cutoff ? 1 : std::min<int64_t>(n, 4 * threads);
}

// Runs body(lo, hi) over [0, n) in equal chunks (RunChunks).
template <typename Body>
void ParallelFor(ffi::ThreadPool& pool, int64_t n, int64_t cost, const Body& body) {
  const int64_t n_chunks = ChunksFor(pool, n, cost, g_pass_cutoff.load(std::memory_order_relaxed));
  RunChunks(pool, n_chunks, [&](int64_t t) { body(n * t / n_chunks, n * (t + 1) / n_chunks); });
}

// 16 floats: one AVX-512 register (two AVX2 ones, four SSE ones: the compiler splits it).
typedef float V16 __attribute__((vector_size(64)));

inline V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

#if JAXGCN_ISA == 2
// Lanes [0, n) of 8 set (none for n <= 0, all for n >= 8): the mask of vmaskmovps.
inline __m256i FirstLanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

// p[0..n) (n <= 16) in the first lanes, zeros after; reads nothing past p + n. The portable copy
// through the stack costs a call and a stalled load per use: on an AVX2 CPU it made the width-7
// propagations of a Cora epoch 0.35 ms each (benchmarks/profile_epoch.py), hence the AVX2 branch.
inline V16 LoadFirst(const float* p, int64_t n) {
#if JAXGCN_ISA == 1
  return reinterpret_cast<V16>(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p));
#elif JAXGCN_ISA == 2
  const __m256 lo = _mm256_maskload_ps(p, FirstLanes(n));
  const __m256 hi = n > 8 ? _mm256_maskload_ps(p + 8, FirstLanes(n - 8)) : _mm256_setzero_ps();
  V16 v;
  std::memcpy(&v, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof(lo), &hi, sizeof(hi));
  return v;
#else
  float tmp[kLanes] = {};
  std::memcpy(tmp, p, sizeof(float) * n);
  return Load(tmp);
#endif
}

// The first n (<= 16) lanes of v to p.
inline void StoreFirst(float* p, V16 v, int64_t n) {
#if JAXGCN_ISA == 1
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), reinterpret_cast<__m512>(v));
#elif JAXGCN_ISA == 2
  __m256 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  if (n >= 8) {
    _mm256_storeu_ps(p, lo);
    if (n > 8) _mm256_maskstore_ps(p + 8, FirstLanes(n - 8), hi);
  } else {
    _mm256_maskstore_ps(p, FirstLanes(n), lo);
  }
#else
  float tmp[kLanes];
  Store(tmp, v);
  std::memcpy(p, tmp, sizeof(float) * n);
#endif
}

// Whether row[0..width) is all zeros (-0.0 counts as zero), 16 values per compare.
bool ZeroRow(const float* row, int64_t width) {
  typedef int32_t I16 __attribute__((vector_size(64)));
  I16 bits = {};
  int64_t j = 0;
  for (; j + kLanes <= width; j += kLanes) bits |= reinterpret_cast<I16>(Load(row + j));
  if (j < width) bits |= reinterpret_cast<I16>(LoadFirst(row + j, width - j));
  bits &= 0x7fffffff;
  int32_t any = 0;
  for (int k = 0; k < kLanes; ++k) any |= bits[k];
  return any == 0;
}

// ---------------------------------------------------------------------------------------------- sparse x dense

struct Work {
  const int32_t* indptr;
  const int32_t* cols;
  const float* vals;
  const float* b;
  const uint8_t* skip;  // optional [m]: 0 marks a row of b that is not read (all zero, or a test's mask)
  float* out;
  const float* shared;  // optional [nnz]: one more product with these values, into out2
  const float* diag;    // optional [n] (square matrices): out[i] += diag[i] * b[i], after the entries
  float* out2;
  int64_t V, W, H;
  bool prefetch;      // b is too large for the cache: prefetch rows ahead
  int64_t nnz_end;    // indptr[n]
  int64_t m;          // rows of b: every column index must lie in [0, m)
  mutable std::atomic<bool> bad{false};  // set by a chunk that met an out-of-range index or pointer
  std::vector<int64_t> bounds;  // row chunk c covers rows [bounds[c], bounds[c + 1])
  int64_t n_tasks;    // row chunks
};

constexpr int32_t kPrefetch = 16;

// Columns [c0, c0 + 16 * (NZ - 1) + tail) of output row i (and of out2 for the pair), summed in
// NZ vector registers each over the row's entries: every gathered piece of a b row costs one
// load and one multiply-add per output (two for the pair), where a loop over the output row in
// memory would load and store the sums again for every entry (measured: the first-layer pair
// 1.50 -> 0.62 ms at 16 runs of width 16, benchmarks/profile_epoch.py). run[z]: the value column
// of vector z (0 when V = 1). The caller has checked the row's column indices.
template <bool kPair, int NZ>
void Block(const Work& w, int64_t i, int32_t k_begin, int32_t k_end, int64_t c0, int64_t tail,
           const int64_t* run) {
  const int64_t W = w.W, V = w.V;
  V16 a1[NZ] = {}, a2[NZ] = {};
  for (int32_t k = k_begin; k < k_end; ++k) {
    const int64_t col = w.cols[k];
    if (w.skip != nullptr && w.skip[col] == 0) continue;  // a zero row adds nothing
    if (w.prefetch && c0 == 0 && k + kPrefetch < k_end) {
      // rows of b are read in random order: ask for the row kPrefetch entries ahead now
      const char* ahead = reinterpret_cast<const char*>(w.b + static_cast<int64_t>(w.cols[k + kPrefetch]) * W);
      for (int64_t byte = 0; byte < W * 4; byte += 64) __builtin_prefetch(ahead + byte);
    }
    const float* __restrict src = w.b + col * W + c0;
    const float* vk = w.vals + static_cast<int64_t>(k) * V;
    const float s = kPair ? w.shared[k] : 0.0f;
    for (int z = 0; z < NZ; ++z) {
      const V16 x = z < NZ - 1 || tail == kLanes ? Load(src + z * kLanes) : LoadFirst(src + z * kLanes, tail);
      a1[z] += vk[run[z]] * x;
      if (kPair) a2[z] += s * x;
    }
  }
  if (w.diag != nullptr) {  // the self-loop: the row's own entry of b, added after the others
    const float d = w.diag[i];
    const float* __restrict own = w.b + i * W + c0;
    for (int z = 0; z < NZ; ++z) {
      a1[z] += d * (z < NZ - 1 || tail == kLanes ? Load(own + z * kLanes) : LoadFirst(own + z * kLanes, tail));
    }
  }
  for (int z = 0; z < NZ; ++z) {
    const int64_t lanes = z < NZ - 1 ? kLanes : tail;
    StoreFirst(w.out + i * W + c0 + z * kLanes, a1[z], lanes);
    if (kPair) StoreFirst(w.out2 + i * W + c0 + z * kLanes, a2[z], lanes);
  }
}

// How many vectors of 16 floats a block sums in registers, one product / the pair's two: 8 each,
// on AVX-512 (32 registers of 16 floats) and on AVX2 alike. On AVX2 a V16 takes two of its 16
// registers, so 8 spill some sums; blocks of 4 (the pair: 2) that keep them all in registers were
// measured slower, every block walking the row's entries again: 100 Cora seeds in one program
// (benchmarks/bench_sweep.py --seeds 100 --loop 0, AMD EPYC family 25 model 1, Zen 3, AVX2)
// 34.3 s against 22.7 s. -DJAXGCN_BLOCK=n / -DJAXGCN_PAIR_BLOCK=n (1..8) try other sizes.
#ifndef JAXGCN_BLOCK
#define JAXGCN_BLOCK 8
#endif
#ifndef JAXGCN_PAIR_BLOCK
#define JAXGCN_PAIR_BLOCK 8
#endif
static_assert(JAXGCN_BLOCK >= 1 && JAXGCN_BLOCK <= 8 && JAXGCN_PAIR_BLOCK >= 1 && JAXGCN_PAIR_BLOCK <= 8,
              "JAXGCN_BLOCK and JAXGCN_PAIR_BLOCK are 1..8 vectors");

// Output row i in blocks of up to JAXGCN_BLOCK vectors (JAXGCN_PAIR_BLOCK for the pair), for V = 1
// or H a multiple of 16 (each vector then belongs to one value column).
template <bool kPair>
void BlockedRow(const Work& w, int64_t i, int32_t k_begin, int32_t k_end) {
  constexpr int kZ = kPair ? JAXGCN_PAIR_BLOCK : JAXGCN_BLOCK;
  const int64_t W = w.W, V = w.V, H = w.H;
  for (int64_t c0 = 0; c0 < W; c0 += kZ * kLanes) {
    const int64_t span = std::min<int64_t>(kZ * kLanes, W - c0);
    const int nz = static_cast<int>((span + kLanes - 1) / kLanes);
    const int64_t tail = span - (nz - 1) * kLanes;
    int64_t run[8];
    for (int z = 0; z < 8; ++z) run[z] = V == 1 ? 0 : std::min<int64_t>(V - 1, (c0 + z * kLanes) / H);
    switch (nz) {
      case 1: Block<kPair, 1>(w, i, k_begin, k_end, c0, tail, run); break;
      case 2: Block<kPair, 2>(w, i, k_begin, k_end, c0, tail, run); break;
      case 3: Block<kPair, 3>(w, i, k_begin, k_end, c0, tail, run); break;
      case 4: Block<kPair, 4>(w, i, k_begin, k_end, c0, tail, run); break;
      case 5: Block<kPair, 5>(w, i, k_begin, k_end, c0, tail, run); break;
      case 6: Block<kPair, 6>(w, i, k_begin, k_end, c0, tail, run); break;
      case 7: Block<kPair, 7>(w, i, k_begin, k_end, c0, tail, run); break;
      default: Block<kPair, 8>(w, i, k_begin, k_end, c0, tail, run); break;
    }
  }
}

// Rows [lo, hi) of a product whose output row is one vector (V = 1, W <= 16: one run's hidden or
// output width; with kPair the pair's second product too), summed as the blocked rows sum them
// (Block<kPair, 1>: the same order, the same results) without their per-row set-up (a memset of
// the row, a separate pass over its columns to check them, the dispatch on the block count). At
// Cora's ~5 entries per row that set-up cost as much as the sums: a width-7 propagation took 67 us
// (benchmarks/profile_epoch.py --runs 1), 40 us without it. A column index out of range marks the
// call bad and reads row 0 instead (RunRows checks m > 0).
template <bool kPair>
void NarrowRows(const Work& w, int64_t lo, int64_t hi) {
  const int64_t W = w.W;
  const uint32_t m = static_cast<uint32_t>(w.m);
  int64_t rows = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const int32_t k_begin = w.indptr[i], k_end = w.indptr[i + 1];
    if (k_begin < 0 || k_end < k_begin || k_end > w.nnz_end) {
      w.bad.store(true, std::memory_order_relaxed);
      continue;
    }
    V16 acc = {}, acc2 = {};
    bool in_range = true;
    for (int32_t k = k_begin; k < k_end; ++k) {
      const uint32_t c = static_cast<uint32_t>(w.cols[k]);
      in_range &= c < m;
      const int64_t col = c < m ? c : 0;
      if (w.skip != nullptr && w.skip[col] == 0) continue;  // a zero row adds nothing
      if (w.prefetch && k + kPrefetch < k_end) {
        __builtin_prefetch(w.b + static_cast<int64_t>(w.cols[k + kPrefetch]) * W);  // <= 64 bytes
      }
      const V16 x = LoadFirst(w.b + col * W, W);
      acc += w.vals[k] * x;
      if (kPair) acc2 += w.shared[k] * x;
    }
    if (!in_range) {
      w.bad.store(true, std::memory_order_relaxed);
      continue;
    }
    if (w.diag != nullptr) acc += w.diag[i] * LoadFirst(w.b + i * W, W);  // the self-loop, last
    StoreFirst(w.out + i * W, acc, W);
    if (kPair) StoreFirst(w.out2 + i * W, acc2, W);
    ++rows;
  }
  Count(kNarrowRows, rows);
}

// Rows [lo, hi) of the output.
void RunRows(const Work& w, int64_t lo, int64_t hi) {
  if (w.V == 1 && w.W <= kLanes && w.m > 0) {
    if (w.out2 != nullptr) NarrowRows<true>(w, lo, hi); else NarrowRows<false>(w, lo, hi);
    return;
  }
  const int64_t W = w.W, V = w.V, H = w.H;
  const uint32_t m = static_cast<uint32_t>(w.m);
  int64_t blocked = 0, scalar = 0;  // rows per path, for the debug counters (one add per chunk)
  for (int64_t i = lo; i < hi; ++i) {
    float* __restrict o = w.out + i * W;
    std::memset(o, 0, sizeof(float) * W);
    float* __restrict o2 = w.out2 == nullptr ? nullptr : w.out2 + i * W;
    if (o2 != nullptr) std::memset(o2, 0, sizeof(float) * W);
    const int32_t k_begin = w.indptr[i], k_end = w.indptr[i + 1];
    // The host validates every pattern (jaxgcn.csr.csr_from_scipy); these checks keep a pattern
    // that bypassed it from reading or writing out of bounds. Each is one well-predicted compare.
    if (k_begin < 0 || k_end < k_begin || k_end > w.nnz_end) {
      w.bad.store(true, std::memory_order_relaxed);
      continue;
    }
    if (V == 1 || H % kLanes == 0) {  // in registers (the loop below is for other widths)
      bool in_range = true;
      for (int32_t k = k_begin; k < k_end; ++k) in_range &= static_cast<uint32_t>(w.cols[k]) < m;
      if (!in_range) {
        w.bad.store(true, std::memory_order_relaxed);
        continue;
      }
      ++blocked;
      if (o2 != nullptr) BlockedRow<true>(w, i, k_begin, k_end); else BlockedRow<false>(w, i, k_begin, k_end);
      continue;
    }
    ++scalar;
    for (int32_t k = k_begin; k < k_end; ++k) {
      if (static_cast<uint32_t>(w.cols[k]) >= m) {
        w.bad.store(true, std::memory_order_relaxed);
        break;
      }
      if (w.skip != nullptr && w.skip[w.cols[k]] == 0) continue;  // a zero row adds nothing
      const float* __restrict src = w.b + static_cast<int64_t>(w.cols[k]) * W;
      if (w.prefetch && k + kPrefetch < w.nnz_end && static_cast<uint32_t>(w.cols[k + kPrefetch]) < m &&
          (w.skip == nullptr || w.skip[w.cols[k + kPrefetch]] != 0)) {
        // Rows of b are read in random order: ask for the row kPrefetch entries ahead now, so
        // several cache misses are in flight at once instead of one at a time.
        const char* ahead = reinterpret_cast<const char*>(w.b + static_cast<int64_t>(w.cols[k + kPrefetch]) * W);
        for (int64_t byte = 0; byte < W * 4; byte += 64) __builtin_prefetch(ahead + byte);
      }
      if (o2 != nullptr) {  // both products from one read of the row: per-run values and shared ones
        const float* vk = w.vals + static_cast<int64_t>(k) * V;
        const float s = w.shared[k];
        for (int64_t r = 0; r < V; ++r) {
          const float v = vk[r];
          float* __restrict orr = o + r * H;
          float* __restrict o2r = o2 + r * H;
          const float* __restrict sr = src + r * H;
          for (int64_t h = 0; h < H; ++h) {
            orr[h] += v * sr[h];
            o2r[h] += s * sr[h];
          }
        }
      } else if (V == 1) {
        const float v = w.vals[k];
        for (int64_t j = 0; j < W; ++j) o[j] += v * src[j];
      } else {
        // No branch on dropped (zero) values: with dropout ~50% it would mispredict half the time.
        const float* vk = w.vals + static_cast<int64_t>(k) * V;
        for (int64_t r = 0; r < V; ++r) {
          const float v = vk[r];
          float* __restrict orr = o + r * H;
          const float* __restrict sr = src + r * H;
          for (int64_t h = 0; h < H; ++h) orr[h] += v * sr[h];
        }
      }
    }
    if (w.diag != nullptr) {  // the self-loop, after the entries (as the blocked rows add it)
      const float d = w.diag[i];
      const float* __restrict own = w.b + i * W;
      for (int64_t j = 0; j < W; ++j) o[j] += d * own[j];
    }
  }
  Count(kBlockedRows, blocked);
  Count(kScalarRows, scalar);
}

// The rows of b to read (1) or not (0), or nullptr to read all: a test's explicit mask [m] when
// one is given (it replaces the flags: rows it marks are never read, whatever they hold), else
// with skip_zero_rows the all-zero rows of b flagged here into flags (one pass over b).
const uint8_t* SkipFlags(ffi::ThreadPool& pool, const float* b, int64_t m, int64_t W, bool skip_zero_rows,
                         const uint8_t* mask, int64_t n_mask, std::vector<uint8_t>& flags) {
  if (n_mask != 0) {
    Count(kMaskCalls);
    Count(kSkippedRows, std::count(mask, mask + n_mask, uint8_t{0}));
    return mask;
  }
  if (!skip_zero_rows) return nullptr;
  flags.resize(m);
  ParallelFor(pool, m, m * W, [&](int64_t lo, int64_t hi) {
    int64_t zero_rows = 0;
    for (int64_t j = lo; j < hi; ++j) {
      flags[j] = ZeroRow(b + j * W, W) ? 0 : 1;
      zero_rows += 1 - flags[j];
    }
    Count(kSkippedRows, zero_rows);
  });
  return flags.data();
}

// Cuts rows [0, n) into w.n_tasks chunks of about equal nnz + rows (w.bounds).
void SplitRows(ffi::ThreadPool& pool, Work& w, int64_t n) {
  const int64_t nnz = w.nnz_end;
  // Work ~ (nnz + rows) * W; small products run on the calling thread only.
  const int64_t n_chunks = ChunksFor(pool, n, (nnz + n) * w.W, g_product_cutoff.load(std::memory_order_relaxed));
  w.n_tasks = n_chunks;
  w.bounds.resize(n_chunks + 1);
  w.bounds[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {  // equal shares of (nnz + rows)
    const int64_t target = (nnz + n) * c / n_chunks;
    int64_t lo = w.bounds[c - 1], hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (w.indptr[mid] + mid < target) lo = mid + 1; else hi = mid;
    }
    w.bounds[c] = lo;
  }
  w.bounds[n_chunks] = n;
}

// mask/n_mask: the test-only skip mask (SkipFlags); diag/n_diag: the self-loop weights.
ffi::Error Spmm(ffi::ThreadPool& pool, ffi::Buffer<ffi::S32>& indptr, ffi::Buffer<ffi::S32>& cols,
                ffi::Buffer<ffi::F32>& vals, ffi::Buffer<ffi::F32>& b, ffi::ResultBuffer<ffi::F32>& out,
                int64_t skip_zero_rows, const float* shared, float* out2, const float* diag = nullptr,
                int64_t n_diag = 0, const uint8_t* mask = nullptr, int64_t n_mask = 0) {
  const auto vdims = vals.dimensions();
  const auto bdims = b.dimensions();
  const auto odims = out->dimensions();
  if (vdims.size() != 2 || bdims.size() != 2 || odims.size() != 2) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: vals, b and out must be 2-D");
  }
  const int64_t n = odims[0], W = odims[1], V = vdims[1];
  if (static_cast<int64_t>(indptr.element_count()) != n + 1 || bdims[1] != W || W % V != 0 ||
      vdims[0] != static_cast<int64_t>(cols.element_count())) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: inconsistent shapes");
  }
  if (diag != nullptr && (n_diag != n || bdims[0] != n)) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: diag needs a square matrix and one weight per row");
  }
  if (n_mask != 0 && n_mask != bdims[0]) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: the skip mask needs one flag per row of b");
  }
  auto w = std::make_shared<Work>();
  w->diag = diag;
  w->indptr = indptr.typed_data();
  w->cols = cols.typed_data();
  w->vals = vals.typed_data();
  w->b = b.typed_data();
  const int64_t nnz = w->indptr[n];
  if (w->indptr[0] != 0 || nnz != vdims[0]) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: indptr must start at 0 and end at the number of entries");
  }
  std::vector<uint8_t> flags;
  w->skip = SkipFlags(pool, w->b, bdims[0], W, skip_zero_rows != 0, mask, n_mask, flags);
  w->out = out->typed_data();
  w->shared = shared;
  w->out2 = out2;
  w->V = V;
  w->W = W;
  w->H = W / V;
  w->nnz_end = nnz;
  w->m = bdims[0];
  // Rows of a large b are prefetched ahead; a b that fits in L2 needs no help. (Column tiles that
  // kept a slice of a mid-sized b in L2 were measured slower, every tile re-reading the pattern,
  // and were removed: each task covers whole rows.)
  w->prefetch = bdims[0] * W * 4 > g_tile_bytes.load(std::memory_order_relaxed);
  SplitRows(pool, *w, n);
  Count(kCalls);
  Count(kPairCalls, shared != nullptr);
  Count(kPrefetchCalls, w->prefetch);
  Count(kChunkedCalls, w->n_tasks > 1);
  Count(kSkipCalls, w->skip != nullptr);
  RunChunks(pool, w->n_tasks, [&](int64_t t) { RunRows(*w, w->bounds[t], w->bounds[t + 1]); });
  if (w->bad.load()) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: a column index or row pointer is out of range");
  }
  return ffi::Error::Success();
}

// mask: the test-only skip mask, [m] uint8 (0: do not read that row of b) or empty.
ffi::Error SpmmImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> cols,
                    ffi::Buffer<ffi::F32> vals, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::F32> diag,
                    ffi::Buffer<ffi::U8> mask, ffi::ResultBuffer<ffi::F32> out, int64_t skip_zero_rows) {
  // an empty diag: no self-loop term
  const bool has_diag = diag.element_count() != 0;
  return Spmm(pool, indptr, cols, vals, b, out, skip_zero_rows, nullptr, nullptr,
              has_diag ? diag.typed_data() : nullptr, static_cast<int64_t>(diag.element_count()),
              mask.typed_data(), static_cast<int64_t>(mask.element_count()));
}

// Two products over one pattern and one read of b: out with the per-run values [nnz, R] and out2
// with the shared values [nnz] (a training forward with per-run dropout and an evaluation forward
// without it, both through the same first-layer weights).
ffi::Error SpmmPairImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> cols,
                        ffi::Buffer<ffi::F32> vals, ffi::Buffer<ffi::F32> shared, ffi::Buffer<ffi::F32> b,
                        ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> out2) {
  if (shared.element_count() != cols.element_count() || out2->element_count() != out->element_count()) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm_pair: shared values must have one entry per stored entry");
  }
  return Spmm(pool, indptr, cols, vals, b, out, 0, shared.typed_data(), out2->typed_data());
}

// out [m, W] = A^T g (+ diag * g for a square A) for A = (indptr, cols, vals) [n, m] with one value
// column and W <= 16 (one run's gradient of a product, e.g. the first layer's X^T g): each row i of
// g that is not all zero is added, times A's entries of row i, into the output rows they name.
// Every output row so sums its terms in the order of i, as the gather over A's transposed pattern
// does (csr_from_scipy sorts it stably, and makes a symmetric A, its own transpose, exactly
// symmetric), with the same multiply-adds from +0: the same bits. It
// reads A's own values (no gather of them into the transposed order), never touches an all-zero
// row of g, and has no per-entry branch on it: on Cora's first layer (49,216 entries, 70% of g's
// rows zero) the gather took 0.19 ms of a 1.0 ms epoch (benchmarks/profile_epoch.py --runs 1).
// One thread: the whole product is a few microseconds of multiply-adds.
ffi::Error SpmmTImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> cols,
                     ffi::Buffer<ffi::F32> vals, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> diag,
                     ffi::ResultBuffer<ffi::F32> out) {
  const auto gd = g.dimensions(), od = out->dimensions(), vd = vals.dimensions();
  if (gd.size() != 2 || od.size() != 2 || vd.size() != 2) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm_t: vals, g and out must be 2-D");
  }
  const int64_t n = gd[0], W = gd[1], m = od[0];
  if (static_cast<int64_t>(indptr.element_count()) != n + 1 || od[1] != W || vd[1] != 1 || W > kLanes ||
      vd[0] != static_cast<int64_t>(cols.element_count())) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm_t: inconsistent shapes (one value column, width <= 16)");
  }
  const int64_t n_diag = static_cast<int64_t>(diag.element_count());
  if (n_diag != 0 && (n_diag != m || m != n)) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm_t: diag needs a square matrix and one weight per row");
  }
  const int32_t* __restrict ip = indptr.typed_data();
  const int32_t* __restrict cs = cols.typed_data();
  const float* __restrict v = vals.typed_data();
  const float* __restrict G = g.typed_data();
  float* __restrict O = out->typed_data();
  const int64_t nnz = ip[n];
  if (ip[0] != 0 || nnz != vd[0]) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm_t: indptr must start at 0 and end at the number of entries");
  }
  Count(kScatterCalls);
  std::memset(O, 0, sizeof(float) * m * W);
  const uint32_t um = static_cast<uint32_t>(m);
  bool bad = false;
  int64_t zero_rows = 0;
  for (int64_t i = 0; i < n && !bad; ++i) {
    const int32_t k_begin = ip[i], k_end = ip[i + 1];
    if (k_begin < 0 || k_end < k_begin || k_end > nnz) {
      bad = true;
      break;
    }
    const float* gi = G + i * W;
    if (ZeroRow(gi, W)) {  // adds nothing: never read again
      ++zero_rows;
      continue;
    }
    const V16 x = LoadFirst(gi, W);
    for (int32_t k = k_begin; k < k_end; ++k) {
      const uint32_t c = static_cast<uint32_t>(cs[k]);
      if (c >= um) {
        bad = true;
        break;
      }
      float* o = O + static_cast<int64_t>(c) * W;
      StoreFirst(o, LoadFirst(o, W) + v[k] * x, W);
    }
  }
  if (bad) return ffi::Error::InvalidArgument("jaxgcn_spmm_t: a column index or row pointer is out of range");
  if (n_diag != 0) {  // the self-loops, after every other term (as the gather adds them)
    const float* d = diag.typed_data();
    for (int64_t j = 0; j < m; ++j) {
      StoreFirst(O + j * W, LoadFirst(O + j * W, W) + d[j] * LoadFirst(G + j * W, W), W);
    }
  }
  Count(kSkippedRows, zero_rows);
  return ffi::Error::Success();
}

#include "run_dense.h"  // the per-run dense products of a batch (jaxgcn_run_dense)
#include "adam.h"       // one optimizer step of a batch's params leaf (jaxgcn_adam)
#include "dropout.h"    // hash dropout of a batch's hidden activations (jaxgcn_dropout)

}  // namespace

// The debug counters and the compiled branch, read by jaxgcn.csr through ctypes.
extern "C" {
const char* JaxgcnKernelCounterNames() { return kCounterNames; }

void JaxgcnKernelCounters(int64_t* out) {
  for (int c = 0; c < kNumCounters; ++c) out[c] = g_counters[c].load(std::memory_order_relaxed);
}

void JaxgcnResetKernelCounters() {
  for (auto& c : g_counters) c.store(0, std::memory_order_relaxed);
}

int JaxgcnKernelIsa() { return JAXGCN_ISA; }  // 1: AVX-512 masked moves, 2: AVX2 ones, 0: the portable branch

// The machine's settings (jaxgcn.machine.tuning): the prefetch tile in bytes, the product and pass
// cut-offs in multiply-adds; a value <= 0 keeps the current one.
void JaxgcnSetTuning(int64_t tile_bytes, int64_t product_cutoff, int64_t pass_cutoff) {
  if (tile_bytes > 0) g_tile_bytes.store(tile_bytes, std::memory_order_relaxed);
  if (product_cutoff > 0) g_product_cutoff.store(product_cutoff, std::memory_order_relaxed);
  if (pass_cutoff > 0) g_pass_cutoff.store(pass_cutoff, std::memory_order_relaxed);
}

void JaxgcnTuning(int64_t* out) {
  out[0] = g_tile_bytes.load(std::memory_order_relaxed);
  out[1] = g_product_cutoff.load(std::memory_order_relaxed);
  out[2] = g_pass_cutoff.load(std::memory_order_relaxed);
}
}

namespace {
// binding.Arg<Buffer<T>>() for each T of the list, in order: the handlers' buffer operands, one line
// each. Bindings move only (each step returns a new one), hence the last type as the base case.
template <ffi::DataType T, typename B>
auto WithArgs(B&& binding) {
  return std::move(binding).template Arg<ffi::Buffer<T>>();
}
template <ffi::DataType T, ffi::DataType U, ffi::DataType... Ts, typename B>
auto WithArgs(B&& binding) {
  return WithArgs<U, Ts...>(std::move(binding).template Arg<ffi::Buffer<T>>());
}

auto WithPool() { return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>(); }

// The operands the three sparse handlers begin with: the pool, indptr and cols, then three float
// arrays (vals, b and diag; vals, shared values and b for the pair; vals, g and diag for SpmmT).
auto CsrOperands() { return WithArgs<ffi::S32, ffi::S32, ffi::F32, ffi::F32, ffi::F32>(WithPool()); }
}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnSpmm, SpmmImpl,
                              CsrOperands()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("skip_zero_rows"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnRunDense, RunDenseImpl,
                              (WithArgs<ffi::F32, ffi::F32, ffi::F32>(WithPool()))
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("mode"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnAdam, AdamImpl,
                              (WithArgs<ffi::F32, ffi::F32, ffi::F32, ffi::F32, ffi::F32>(WithPool()))
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("b1")
                                  .Attr<float>("c1")
                                  .Attr<float>("b2")
                                  .Attr<float>("c2")
                                  .Attr<float>("eps")
                                  .Attr<int64_t>("decay")
                                  .Attr<int64_t>("couple"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnDropout, DropoutImpl,  // one thread: no pool
                              (WithArgs<ffi::F32, ffi::U32, ffi::U32, ffi::U32, ffi::F32, ffi::U16, ffi::U32>(ffi::Ffi::Bind()))
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::U16>>()
                                  .Attr<int64_t>("mode")
                                  .Attr<int64_t>("relu"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnSpmmT, SpmmTImpl,
                              CsrOperands()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnSpmmPair, SpmmPairImpl,
                              CsrOperands()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

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
// An optional per-row flag array lets it skip rows of b that are all zero: the gradient of a loss
// masked to the training nodes is zero on every other row, and reading those rows (one cache miss
// each) would be most of the work.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Work {
  const int32_t* indptr;
  const int32_t* cols;
  const float* vals;
  const float* b;
  const uint8_t* skip;  // optional [m]: 0 marks an all-zero row of b, which is not read
  float* out;
  int64_t V, W, H;
  bool prefetch;      // b is too large for the cache: prefetch rows ahead
  int64_t nnz_end;    // indptr[n]
  int64_t m;          // rows of b: every column index must lie in [0, m)
  mutable std::atomic<bool> bad{false};  // set by a chunk that met an out-of-range index or pointer
  std::vector<int64_t> bounds;  // row chunk c covers rows [bounds[c], bounds[c + 1])
  int64_t n_tasks;    // row chunks
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
};

constexpr int32_t kPrefetch = 16;
constexpr int64_t kTileBytes = 256 * 1024;  // half of a 512 KiB L2: b smaller than this stays cached

// Rows [lo, hi) of the output.
void RunRows(const Work& w, int64_t lo, int64_t hi) {
  const int64_t W = w.W, V = w.V, H = w.H;
  const uint32_t m = static_cast<uint32_t>(w.m);
  for (int64_t i = lo; i < hi; ++i) {
    float* __restrict o = w.out + i * W;
    std::memset(o, 0, sizeof(float) * W);
    const int32_t k_begin = w.indptr[i], k_end = w.indptr[i + 1];
    // The host validates every pattern (jaxgcn.csr.csr_from_scipy); these checks keep a pattern
    // that bypassed it from reading or writing out of bounds. Each is one well-predicted compare.
    if (k_begin < 0 || k_end < k_begin || k_end > w.nnz_end) {
      w.bad.store(true, std::memory_order_relaxed);
      continue;
    }
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
      if (V == 1) {
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
  }
}

// Takes tasks until none are left; returns after marking each one done.
void Drain(const std::shared_ptr<Work>& w) {
  for (;;) {
    const int64_t t = w->next.fetch_add(1);
    if (t >= w->n_tasks) return;
    RunRows(*w, w->bounds[t], w->bounds[t + 1]);
    if (w->done.fetch_add(1) + 1 == w->n_tasks) {
      std::lock_guard<std::mutex> lock(w->mu);
      w->cv.notify_all();
    }
  }
}

ffi::Error SpmmImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> indptr, ffi::Buffer<ffi::S32> cols,
                    ffi::Buffer<ffi::F32> vals, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::U8> skip,
                    ffi::ResultBuffer<ffi::F32> out) {
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
  auto w = std::make_shared<Work>();
  w->indptr = indptr.typed_data();
  w->cols = cols.typed_data();
  w->vals = vals.typed_data();
  w->b = b.typed_data();
  // An empty skip array means "read every row"; otherwise it has one flag per row of b.
  w->skip = skip.element_count() == 0 ? nullptr : skip.typed_data();
  if (w->skip != nullptr && static_cast<int64_t>(skip.element_count()) != bdims[0]) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: skip must be empty or have one flag per row of b");
  }
  w->out = out->typed_data();
  w->V = V;
  w->W = W;
  w->H = W / V;
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  const int64_t nnz = w->indptr[n];
  if (w->indptr[0] != 0 || nnz != vdims[0]) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: indptr must start at 0 and end at the number of entries");
  }
  w->nnz_end = nnz;
  w->m = bdims[0];
  // Rows of a large b are prefetched ahead; a b that fits in L2 needs no help. (Column tiles that
  // kept a slice of a mid-sized b in L2 were measured slower, every tile re-reading the pattern,
  // and were removed: each task covers whole rows.)
  w->prefetch = bdims[0] * W * 4 > kTileBytes;
  // Work ~ (nnz + rows) * W; small products run on the calling thread only.
  const int64_t cost = (nnz + n) * W;
  const int64_t n_chunks = cost < (1 << 18) ? 1 : std::min<int64_t>(n, std::max<int64_t>(1, 4 * threads));
  w->n_tasks = n_chunks;
  w->bounds.resize(n_chunks + 1);
  w->bounds[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {  // equal shares of (nnz + rows)
    const int64_t target = (nnz + n) * c / n_chunks;
    int64_t lo = w->bounds[c - 1], hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (w->indptr[mid] + mid < target) lo = mid + 1; else hi = mid;
    }
    w->bounds[c] = lo;
  }
  w->bounds[n_chunks] = n;
  if (w->n_tasks > 1 && cost >= (1 << 18)) {
    for (int64_t t = 0; t < std::min<int64_t>(threads, w->n_tasks) - 1; ++t) {
      pool.Schedule([w] { Drain(w); });
    }
  }
  Drain(w);
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [&] { return w->done.load() == w->n_tasks; });
  if (w->bad.load()) {
    return ffi::Error::InvalidArgument("jaxgcn_spmm: a column index or row pointer is out of range");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxgcnSpmm, SpmmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

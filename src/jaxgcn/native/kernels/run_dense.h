// Included by spmm.cc inside its anonymous namespace, after its helpers (V16, Load/Store,
// LoadFirst/StoreFirst, ZeroRow, Count, ParallelFor): one translation unit, one library.
#pragma once

// ----------------------------------------------------------------------------------------------
// Per-run dense products of a batch of R runs (jaxgcn.models._matmul_runs), node-major:
//
//   mode 0 (forward):         out[i, r, c] = sum_h x[i, r, h] * w[h, r, c]      x [n, R*H], out [n, R*C]
//   mode 1 (input gradient):  out[i, r, h] = sum_c g[i, r, c] * w[h, r, c]      g [n, R*C], out [n, R*H]
//   mode 2 (weight gradient): out[h, r, c] = sum_i x[i, r, h] * g[i, r, c]      out [H, R*C]
//
// w is the params' own [H, R, C] layout. XLA computes these either as batched dots (transposing
// the activations to [R, H, n] and back) or as a broadcast product [n, R, H, C] reduced over H
// (materialized when H is large: 50 MB per product at R = 8, H = 64). Modes 1 and 2 skip rows of
// g that are all zero: the gradient of a loss masked to the training nodes is zero outside their
// neighbourhood. Every inner loop runs over 16 padded lanes (one AVX-512 vector), with w copied
// once per call into a padded [R, H, Cp] (mode 0, 2) or [R, C, Hp] (mode 1) block.


// out[k * os + c] = sum_h x[k * xs + h] * wp[h * Cp + c] for c < C and NB rows k (one run's rows
// of NB nodes): each row of wp is loaded once for NB multiply-adds, which also keeps NB
// independent sums in flight.
template <int NB>
void RowsTimesBlock(const float* __restrict x, int64_t xs, const float* __restrict wp, int64_t H, int64_t C,
                    int64_t Cp, float* __restrict out, int64_t os) {
  for (int64_t c0 = 0; c0 < Cp; c0 += kLanes) {
    V16 acc[NB] = {};
    const float* wc = wp + c0;
    for (int64_t h = 0; h < H; ++h) {
      const V16 wv = Load(wc + h * Cp);
      for (int k = 0; k < NB; ++k) acc[k] += x[k * xs + h] * wv;
    }
    const int64_t width = std::min<int64_t>(kLanes, C - c0);
    for (int k = 0; k < NB; ++k) StoreFirst(out + k * os + c0, acc[k], width);
  }
}

ffi::Error RunDenseImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                        ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> out, int64_t mode) {
  const auto ad = a.dimensions(), bd = b.dimensions(), wd = w.dimensions(), od = out->dimensions();
  if (wd.size() != 3 || ad.size() != 2 || od.size() != 2 || mode < 0 || mode > 2) {
    return ffi::Error::InvalidArgument("jaxgcn_run_dense: w must be [H, R, C], a and out 2-D, mode 0-2");
  }
  const int64_t H = wd[0], R = wd[1], C = wd[2], n = ad[0];
  const int64_t in_w = mode == 1 ? R * C : R * H;  // width of a's rows
  if (ad[1] != in_w || (mode == 2 && (bd.size() != 2 || bd[0] != n || bd[1] != R * C)) ||
      od[0] != (mode == 2 ? H : n) || od[1] != (mode == 1 ? R * H : R * C)) {
    return ffi::Error::InvalidArgument("jaxgcn_run_dense: inconsistent shapes");
  }
  const float* __restrict A = a.typed_data();
  float* __restrict O = out->typed_data();
  Count(kDenseCalls);
  if (mode == 0 || mode == 1) {
    // w padded per run: mode 0 [R, H, Cp] (rows of c), mode 1 [R, C, Hp] (rows of h)
    const int64_t K = mode == 0 ? H : C, M = mode == 0 ? C : H, Mp = Padded(M);
    std::vector<float> wp(R * K * Mp, 0.0f);
    const float* W = w.typed_data();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const float v = W[(h * R + r) * C + c];
          if (mode == 0) wp[(r * H + h) * Mp + c] = v; else wp[(r * C + c) * Mp + h] = v;
        }
    const float* WP = wp.data();
    constexpr int kBlock = 8;  // nodes per block
    ParallelFor(pool, (n + kBlock - 1) / kBlock, n * R * H * C, [&](int64_t lo, int64_t hi) {
      int64_t rows[kBlock];
      int64_t zero_rows = 0;  // for the debug counters: one add per chunk
      for (int64_t blk = lo; blk < hi; ++blk) {
        // the block's rows; in mode 1 only those whose gradient is not all zero (the others are 0)
        int64_t nb = 0;
        for (int64_t i = blk * kBlock; i < std::min<int64_t>(n, (blk + 1) * kBlock); ++i) {
          if (mode == 1 && ZeroRow(A + i * R * K, R * K)) {
            std::memset(O + i * R * M, 0, sizeof(float) * R * M);
            ++zero_rows;
          } else {
            rows[nb++] = i;
          }
        }
        const bool contiguous = nb == kBlock;  // then rows are blk*kBlock + k: one strided block
        for (int64_t r = 0; r < R; ++r) {
          const float* wr = WP + r * K * Mp;
          if (contiguous) {
            RowsTimesBlock<kBlock>(A + rows[0] * R * K + r * K, R * K, wr, K, M, Mp, O + rows[0] * R * M + r * M, R * M);
          } else {
            for (int64_t k = 0; k < nb; ++k) {
              RowsTimesBlock<1>(A + rows[k] * R * K + r * K, 0, wr, K, M, Mp, O + rows[k] * R * M + r * M, 0);
            }
          }
        }
      }
      Count(kDenseSkippedRows, zero_rows);
    });
    return ffi::Error::Success();
  }
  // mode 2: the rows of g that are not all zero, then one task per (run, block of 16 h): sixteen
  // 16-lane sums in registers over those rows, each loaded piece of g used for 16 multiply-adds
  const float* __restrict G = b.typed_data();
  std::vector<int64_t> live;
  live.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (!ZeroRow(G + i * R * C, R * C)) live.push_back(i);
  }
  const int64_t Cp = Padded(C), n_live = static_cast<int64_t>(live.size());
  Count(kDenseSkippedRows, n - n_live);
  constexpr int kRowsH = 16;  // a run's 16 h at once: each row's x segment (one cache line) read by one task
  const int64_t h_blocks = (H + kRowsH - 1) / kRowsH;
  ParallelFor(pool, R * h_blocks, n_live * R * H * C, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t r = task / h_blocks, h0 = task % h_blocks * kRowsH, nh = std::min<int64_t>(kRowsH, H - h0);
      for (int64_t c0 = 0; c0 < Cp; c0 += kLanes) {
        V16 acc[kRowsH] = {};
        for (int64_t j = 0; j < n_live; ++j) {
          const V16 g16 = LoadFirst(G + live[j] * R * C + r * C + c0, std::min<int64_t>(kLanes, C - c0));
          const float* xr = A + live[j] * R * H + r * H + h0;
          if (j + 8 < n_live) __builtin_prefetch(A + live[j + 8] * R * H + r * H + h0);  // rows far apart
          if (nh == kRowsH) {
            for (int k = 0; k < kRowsH; ++k) acc[k] += xr[k] * g16;
          } else {
            for (int64_t k = 0; k < nh; ++k) acc[k] += xr[k] * g16;
          }
        }
        const int64_t width = std::min<int64_t>(kLanes, C - c0);
        for (int64_t k = 0; k < nh; ++k) StoreFirst(O + ((h0 + k) * R + r) * C + c0, acc[k], width);
      }
    }
  });
  return ffi::Error::Success();
}

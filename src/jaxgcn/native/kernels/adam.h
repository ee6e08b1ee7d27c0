// Included by spmm.cc inside its anonymous namespace, after its helpers (Count, ParallelFor): one
// translation unit, one library.
#pragma once

// ----------------------------------------------------------------------------------------------
// One Adam (or AdamW) step of one params leaf of a batch of R runs, in one pass (jaxgcn_adam):
//
//   leaf [O, R, I]: a weight [in, R, out], or a bias [1, R, d]; per run r, while running[r]:
//   g   = fma(wd[r], p, g)                                  (with couple: the coupled L2 term's gradient)
//   mu' = fma(g, c1, b1 * mu)            nu' = fma(g * g, c2, b2 * nu)       (c1 = 1 - b1, c2 = 1 - b2)
//   u   = (mu' * rc1[r]) / (sqrt(nu' * rc2[r]) + eps)      (rc = 1 / (1 - b^t), from the caller)
//   u   = fma(wd[r], p, u)                                  (with decay: AdamW)
//   p'  = fma(-lr[r], u, p)
//   and p, mu, nu as they were for a run that has stopped.
//
// These are optax's scale_by_adam, add_decayed_weights, scale_by_learning_rate and apply_updates
// as XLA compiles them for the CPU when they form one fusion (a division by the bias correction
// becomes a product with its reciprocal; each multiply-add an FMA), so one run's results are the
// bits XLA gave (tests/test_optimizers.py). XLA runs them as five passes over the leaf, and a
// batch's select of the runs that still train as three more; on Cora's 16-run first layer
// (1433 x 16 x 16 floats, 1.5 MB per array) those were 1.2 ms of an 8 ms epoch
// (benchmarks/profile_epoch.py --runs 16). Here: one read of p, mu, nu, g and one write of each
// result. No other multiply-add can be contracted; sqrt vectorizes (the build passes
// -fno-math-errno).
//
// hyper [5, R]: lr, rc1, rc2, wd, running (1: a step, 0: keep). The call also returns each run's
// sums of squares of p and p' (ss [2, R]; per chunk, then in chunk order in double: the same
// whichever thread runs a chunk): the L2
// term of the loss before the step and of the validation loss after it, which XLA read the leaf
// for twice more (another 0.5 ms of the 16-run epoch, with the coupled term's own pass).

// Rows [lo, hi) of the [O * R, I] view: row k belongs to run k % R. ss: this chunk's sums [2, R]
// (per run and column in float over the chunk's rows, in the update's own vectorized loop, then
// in double).
void AdamRows(int64_t lo, int64_t hi, int64_t R, int64_t I, const float* __restrict p, const float* __restrict mu,
              const float* __restrict nu, const float* __restrict g, const float* __restrict hyper,
              float* __restrict p2, float* __restrict mu2, float* __restrict nu2, float b1, float c1, float b2,
              float c2, float eps, bool decay, bool couple, double* __restrict ss) {
  std::vector<float> squares(2 * R * I, 0.0f);  // [2, R, I]: before, after
  for (int64_t k = lo; k < hi; ++k) {
    const int64_t r = k % R, at = k * I;
    float* __restrict before = squares.data() + r * I;
    float* __restrict after = squares.data() + (R + r) * I;
    if (hyper[4 * R + r] == 0.0f) {  // stopped: as it was (a copy only where XLA gave other buffers)
      for (int64_t j = 0; j < I; ++j) {
        const float pj = p[at + j];
        before[j] = std::fma(pj, pj, before[j]);
        after[j] = std::fma(pj, pj, after[j]);
      }
      if (p2 != p) std::memcpy(p2 + at, p + at, sizeof(float) * I);
      if (mu2 != mu) std::memcpy(mu2 + at, mu + at, sizeof(float) * I);
      if (nu2 != nu) std::memcpy(nu2 + at, nu + at, sizeof(float) * I);
      continue;
    }
    const float neg_lr = -hyper[r], rc1 = hyper[R + r], rc2 = hyper[2 * R + r], wd = hyper[3 * R + r];
    for (int64_t j = 0; j < I; ++j) {
      const int64_t i = at + j;
      const float pi = p[i], gi = couple ? std::fma(wd, pi, g[i]) : g[i];
      const float m = std::fma(gi, c1, b1 * mu[i]);
      const float v = std::fma(gi * gi, c2, b2 * nu[i]);
      float u = (m * rc1) / (std::sqrt(v * rc2) + eps);
      if (decay) u = std::fma(wd, pi, u);
      const float q = std::fma(neg_lr, u, pi);
      p2[i] = q;
      mu2[i] = m;
      nu2[i] = v;
      before[j] = std::fma(pi, pi, before[j]);
      after[j] = std::fma(q, q, after[j]);
    }
  }
  for (int64_t t = 0; t < 2 * R; ++t) {
    double total = 0.0;
    for (int64_t j = 0; j < I; ++j) total += squares[t * I + j];
    ss[t] += total;
  }
}

ffi::Error AdamImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> p, ffi::Buffer<ffi::F32> mu,
                    ffi::Buffer<ffi::F32> nu, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> hyper,
                    ffi::ResultBuffer<ffi::F32> p2, ffi::ResultBuffer<ffi::F32> mu2, ffi::ResultBuffer<ffi::F32> nu2,
                    ffi::ResultBuffer<ffi::F32> sums, float b1, float c1, float b2, float c2, float eps,
                    int64_t decay, int64_t couple) {
  const auto pd = p.dimensions(), hd = hyper.dimensions();
  if (pd.size() != 3 || hd.size() != 2 || hd[0] != 5 || hd[1] != pd[1]) {
    return ffi::Error::InvalidArgument("jaxgcn_adam: the leaf must be [O, R, I] and hyper [5, R]");
  }
  const int64_t O = pd[0], R = pd[1], I = pd[2];
  const size_t n = p.element_count();
  if (mu.element_count() != n || nu.element_count() != n || g.element_count() != n || p2->element_count() != n ||
      mu2->element_count() != n || nu2->element_count() != n || static_cast<int64_t>(sums->element_count()) != 2 * R) {
    return ffi::Error::InvalidArgument("jaxgcn_adam: p, mu, nu, g and the results must have one shape, sums [2, R]");
  }
  Count(kAdamCalls);
  const float *P = p.typed_data(), *M = mu.typed_data(), *N = nu.typed_data(), *G = g.typed_data(),
              *H = hyper.typed_data();
  float *P2 = p2->typed_data(), *M2 = mu2->typed_data(), *N2 = nu2->typed_data();
  const int64_t rows = O * R, n_chunks = ChunksFor(pool, rows, static_cast<int64_t>(n),
                                                    g_pass_cutoff.load(std::memory_order_relaxed));
  std::vector<double> partial(n_chunks * 2 * R, 0.0);  // per chunk, summed in chunk order: the same on any pool
  RunChunks(pool, n_chunks, [&](int64_t t) {
    AdamRows(rows * t / n_chunks, rows * (t + 1) / n_chunks, R, I, P, M, N, G, H, P2, M2, N2, b1, c1, b2, c2, eps,
             decay != 0, couple != 0, partial.data() + t * 2 * R);
  });
  float* S = sums->typed_data();
  for (int64_t j = 0; j < 2 * R; ++j) {
    double total = 0.0;
    for (int64_t t = 0; t < n_chunks; ++t) total += partial[t * 2 * R + j];
    S[j] = static_cast<float>(total);
  }
  return ffi::Error::Success();
}

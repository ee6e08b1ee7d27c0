// Included by spmm.cc inside its anonymous namespace, after its helpers (Count, ParallelFor): one
// translation unit, one library.
#pragma once

// ----------------------------------------------------------------------------------------------
// One Adam (or AdamW) step of one params leaf of a batch of R runs, in one pass (jaxgcn_adam):
//
//   leaf [O, R, I]: a weight [in, R, out], or a bias [1, R, d]; per run r, while running[r]:
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
// hyper [5, R]: lr, rc1, rc2, wd, running (1: a step, 0: keep).

// Rows [lo, hi) of the [O * R, I] view: row k belongs to run k % R.
void AdamRows(int64_t lo, int64_t hi, int64_t R, int64_t I, const float* __restrict p, const float* __restrict mu,
              const float* __restrict nu, const float* __restrict g, const float* __restrict hyper,
              float* __restrict p2, float* __restrict mu2, float* __restrict nu2, float b1, float c1, float b2,
              float c2, float eps, bool decay) {
  for (int64_t k = lo; k < hi; ++k) {
    const int64_t r = k % R, at = k * I;
    if (hyper[4 * R + r] == 0.0f) {  // stopped: as it was (a copy only where XLA gave other buffers)
      if (p2 != p) std::memcpy(p2 + at, p + at, sizeof(float) * I);
      if (mu2 != mu) std::memcpy(mu2 + at, mu + at, sizeof(float) * I);
      if (nu2 != nu) std::memcpy(nu2 + at, nu + at, sizeof(float) * I);
      continue;
    }
    const float neg_lr = -hyper[r], rc1 = hyper[R + r], rc2 = hyper[2 * R + r], wd = hyper[3 * R + r];
    for (int64_t i = at; i < at + I; ++i) {
      const float gi = g[i], pi = p[i];
      const float m = std::fma(gi, c1, b1 * mu[i]);
      const float v = std::fma(gi * gi, c2, b2 * nu[i]);
      float u = (m * rc1) / (std::sqrt(v * rc2) + eps);
      if (decay) u = std::fma(wd, pi, u);
      p2[i] = std::fma(neg_lr, u, pi);
      mu2[i] = m;
      nu2[i] = v;
    }
  }
}

ffi::Error AdamImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> p, ffi::Buffer<ffi::F32> mu,
                    ffi::Buffer<ffi::F32> nu, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> hyper,
                    ffi::ResultBuffer<ffi::F32> p2, ffi::ResultBuffer<ffi::F32> mu2, ffi::ResultBuffer<ffi::F32> nu2,
                    float b1, float c1, float b2, float c2, float eps, int64_t decay) {
  const auto pd = p.dimensions(), hd = hyper.dimensions();
  if (pd.size() != 3 || hd.size() != 2 || hd[0] != 5 || hd[1] != pd[1]) {
    return ffi::Error::InvalidArgument("jaxgcn_adam: the leaf must be [O, R, I] and hyper [5, R]");
  }
  const int64_t O = pd[0], R = pd[1], I = pd[2];
  const size_t n = p.element_count();
  if (mu.element_count() != n || nu.element_count() != n || g.element_count() != n || p2->element_count() != n ||
      mu2->element_count() != n || nu2->element_count() != n) {
    return ffi::Error::InvalidArgument("jaxgcn_adam: p, mu, nu, g and the results must have one shape");
  }
  Count(kAdamCalls);
  const float *P = p.typed_data(), *M = mu.typed_data(), *N = nu.typed_data(), *G = g.typed_data(),
              *H = hyper.typed_data();
  float *P2 = p2->typed_data(), *M2 = mu2->typed_data(), *N2 = nu2->typed_data();
  ParallelFor(pool, O * R, static_cast<int64_t>(n), [&](int64_t lo, int64_t hi) {
    AdamRows(lo, hi, R, I, P, M, N, G, H, P2, M2, N2, b1, c1, b2, c2, eps, decay != 0);
  });
  return ffi::Error::Success();
}

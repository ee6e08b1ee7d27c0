// Included by spmm.cc inside its anonymous namespace, after its helpers (Count): one translation
// unit, one library.
#pragma once

// ----------------------------------------------------------------------------------------------
// Hash dropout of a batch's hidden activations (jaxgcn_dropout), node-major [n, R, W], with the
// relu before it when asked:
//
//   out[i, r, j] = x * (1 / scale[r])   where hash_bits(id[i] * hidden[r] + j, seeds[r]) >= threshold[r]
//                                       (and, with relu, x is not <= 0)
//                = 0                    elsewhere
//
// hash_bits is jaxgcn.layers.hash_bits (two rounds of Wellons' lowbias32 over the counter, uint32
// arithmetic), and id[i] is ids[i], or i where ids is empty (the rows of some nodes only: each
// row draws its node's mask), so the kept elements are exactly those of the masks jaxgcn.models._keep draws. The
// call also returns the kept lanes as bits (one uint16 per 16 floats), and the gradient is the same
// scaling of the incoming gradient where they are set (mode 1): the mask is read, not hashed again.
// XLA hashed the mask of a 16-run Cora epoch in one fusion (0.54-0.70 ms for 693k elements), copied
// it once more to keep it from being hashed in every consumer, applied it in another, and ran the
// relu and its gradient as two more passes (benchmarks/profile_epoch.py --runs 16: dropout and
// relu 2.1 ms of a 7.6 ms epoch; 1.4 ms with this kernel). The hash costs ~35 cycles per 16
// lanes here: five dependent 32-bit multiplies.

typedef uint32_t U16 __attribute__((vector_size(64)));  // 16 lanes, as V16
typedef int32_t I16 __attribute__((vector_size(64)));

inline U16 Mix32(U16 x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// Bit l set where lane l of a >= t (unsigned) / where lane l of x is not <= 0 (NaN included) /
// x * inv in the lanes whose bit is set, 0 in the others. One compare into a mask register on
// AVX-512, two halves' compares and movemasks on AVX2, the vector compares and a reduction over
// the lanes in the portable branch.
#if JAXGCN_ISA == 1
inline uint16_t AtLeast(U16 a, uint32_t t) {
  return _mm512_cmpge_epu32_mask(reinterpret_cast<__m512i>(a), _mm512_set1_epi32(static_cast<int>(t)));
}
inline uint16_t NotAtMostZero(V16 x) {
  return _mm512_cmp_ps_mask(reinterpret_cast<__m512>(x), _mm512_setzero_ps(), _CMP_NLE_UQ);
}
inline V16 ScaledWhere(V16 x, uint16_t bits, float inv) {
  return reinterpret_cast<V16>(_mm512_maskz_mul_ps(bits, reinterpret_cast<__m512>(x), _mm512_set1_ps(inv)));
}
#elif JAXGCN_ISA == 2
// Halves of 8 lanes with AVX2's own compares: GCC lowers the 16-lane vector compares of the
// portable branch to a scalar loop per lane on AVX2 (a 16-run Cora epoch's dropout took 2.4 ms).
// Lanes 8h .. 8h + 7 of a 16-lane vector as an AVX2 register (__m256i of a U16, __m256 of a V16).
template <typename Half, typename Vec>
inline Half HalfOf(const Vec& a, int h) {
  Half v;
  std::memcpy(&v, reinterpret_cast<const char*>(&a) + 32 * h, sizeof(v));
  return v;
}
inline uint16_t AtLeast(U16 a, uint32_t t) {
  const __m256i tv = _mm256_set1_epi32(static_cast<int>(t));
  int bits = 0;
  for (int h = 0; h < 2; ++h) {  // a >= t (unsigned): max(a, t) == a
    const __m256i x = HalfOf<__m256i>(a, h);
    bits |= _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(x, tv), x))) << (8 * h);
  }
  return static_cast<uint16_t>(bits);
}
inline uint16_t NotAtMostZero(V16 x) {
  int bits = 0;
  for (int h = 0; h < 2; ++h) {
    bits |= _mm256_movemask_ps(_mm256_cmp_ps(HalfOf<__m256>(x, h), _mm256_setzero_ps(), _CMP_NLE_UQ)) << (8 * h);
  }
  return static_cast<uint16_t>(bits);
}
inline V16 ScaledWhere(V16 x, uint16_t bits, float inv) {
  const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  V16 out;
  for (int h = 0; h < 2; ++h) {
    const __m256i set = _mm256_set1_epi32((bits >> (8 * h)) & 0xff);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(set, lane), lane));
    const __m256 v = _mm256_and_ps(_mm256_mul_ps(HalfOf<__m256>(x, h), _mm256_set1_ps(inv)), keep);
    std::memcpy(reinterpret_cast<char*>(&out) + 32 * h, &v, sizeof(v));
  }
  return out;
}
#else
const I16 kLaneBit = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
inline uint16_t LaneBits(I16 set) {  // set: -1 or 0 per lane
  const I16 bits = set & kLaneBit;
  int32_t word = 0;
  for (int l = 0; l < kLanes; ++l) word |= bits[l];
  return static_cast<uint16_t>(word);
}
inline uint16_t AtLeast(U16 a, uint32_t t) { return LaneBits(a >= t); }
inline uint16_t NotAtMostZero(V16 x) { return LaneBits(~(x <= 0.0f)); }
inline V16 ScaledWhere(V16 x, uint16_t bits, float inv) {
  const I16 keep = (static_cast<int32_t>(bits) & kLaneBit) != 0;
  return reinterpret_cast<V16>(reinterpret_cast<I16>(x * inv) & keep);
}
#endif

// mode 0: out = the dropout of x, bits[i, r, c] = the kept lanes of its 16-float chunk c (bit l: lane l);
//   with relu, of relu(x): a lane is kept only where x is not <= 0 too (NaN is kept, as relu keeps it);
// mode 1: out = x * inv where bits says kept (the gradient: the mask of mode 0, read, not hashed; with
//   relu it is relu's gradient too).
ffi::Error DropoutImpl(ffi::Buffer<ffi::F32> h, ffi::Buffer<ffi::U32> seeds,
                       ffi::Buffer<ffi::U32> hidden, ffi::Buffer<ffi::U32> threshold, ffi::Buffer<ffi::F32> scale,
                       ffi::Buffer<ffi::U16> bits_in, ffi::Buffer<ffi::U32> ids, ffi::ResultBuffer<ffi::F32> out,
                       ffi::ResultBuffer<ffi::U16> bits_out, int64_t mode, int64_t relu) {
  const auto hd = h.dimensions();
  if (hd.size() != 3 || mode < 0 || mode > 1) {
    return ffi::Error::InvalidArgument("jaxgcn_dropout: h must be [n, R, W], mode 0 or 1");
  }
  const int64_t n = hd[0], R = hd[1], W = hd[2], chunks = (W + kLanes - 1) / kLanes;
  const int64_t n_bits = n * R * chunks;
  if (static_cast<int64_t>(seeds.element_count()) != 2 * R || static_cast<int64_t>(hidden.element_count()) != R ||
      static_cast<int64_t>(threshold.element_count()) != R || static_cast<int64_t>(scale.element_count()) != R ||
      out->element_count() != h.element_count() || static_cast<int64_t>(bits_out->element_count()) != n_bits ||
      (mode == 1 && static_cast<int64_t>(bits_in.element_count()) != n_bits) ||
      (ids.element_count() != 0 && static_cast<int64_t>(ids.element_count()) != n)) {
    return ffi::Error::InvalidArgument("jaxgcn_dropout: seeds [R, 2], hidden, threshold and scale [R], out like h, "
                                       "bits [n, R, W / 16], ids [n] or empty");
  }
  Count(kDropoutCalls);
  const float* __restrict H = h.typed_data();
  const uint32_t *S = seeds.typed_data(), *D = hidden.typed_data(), *T = threshold.typed_data();
  const float* sc = scale.typed_data();
  float* __restrict O = out->typed_data();
  const uint16_t* __restrict Bin = bits_in.typed_data();
  const uint32_t* Id = ids.element_count() != 0 ? ids.typed_data() : nullptr;
  uint16_t* __restrict Bout = bits_out->typed_data();
  const U16 iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  std::vector<float> inverse(R);  // per run, once: a division per row of 16 cost more than its hash
  for (int64_t r = 0; r < R; ++r) inverse[r] = 1.0f / sc[r];
  const float* inv_r = inverse.data();
  // One thread: the hash is bound by the vector multiplier, and two threads measured slower (0.82
  // against 0.60 ms for 16 Cora runs); the gradient (mode 1) measured the same on the pool.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < R; ++r) {
      const uint32_t node = Id != nullptr ? Id[i] : static_cast<uint32_t>(i);
      const uint32_t base = node * D[r], s0 = S[2 * r], s1 = S[2 * r + 1], t = T[r];
      const float inv = inv_r[r];
      const float* __restrict x = H + (i * R + r) * W;
      float* __restrict o = O + (i * R + r) * W;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t j = c * kLanes, lanes = std::min<int64_t>(kLanes, W - j), at = (i * R + r) * chunks + c;
        const V16 xs = LoadFirst(x + j, lanes);
        uint16_t keep;  // bit l: lane l kept
        if (mode == 0) {
          keep = AtLeast(Mix32(Mix32(((base + static_cast<uint32_t>(j)) + iota) * 0x9E3779B9u ^ s0) + s1), t);
          if (relu) keep &= NotAtMostZero(xs);  // relu's zeros too (a NaN is kept, as relu keeps it)
        } else {
          keep = Bin[at];  // the gradient: the forward's mask
        }
        Bout[at] = keep;
        StoreFirst(o + j, ScaledWhere(xs, keep, inv), lanes);
      }
    }
  }
  return ffi::Error::Success();
}

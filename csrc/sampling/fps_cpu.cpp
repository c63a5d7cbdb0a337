// Farthest point sampling on the CPU: the exact twin of fps_cuda.cu (see fps.h for the rules).
#include "sampling/fps.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <limits>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cpu_simd.h"

namespace pointops {
namespace fps_detail {

void check_fps_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                    const std::optional<at::Tensor>& start, int64_t k) {
  check_padded_clouds(points, lengths, "(B, N, D) with D >= 1", 1);
  check_fits_int32(points.size(1), "points.size(1) (points per cloud)");
  check_optional_batch_vector(start, "start", points.size(0), points, "points");
  check_nonnegative(k, "k");
  check_output_fits(points.device(), "k = " + std::to_string(k), {points.size(0), k}, 16);
}

void check_fps_packed_args(const at::Tensor& points, const at::Tensor& offsets, const std::optional<at::Tensor>& start,
                           int64_t k) {
  check_dim(points, "points", 2, "(P, D)");
  check_floating(points, "points");
  TORCH_CHECK(points.size(1) >= 1, "points must have at least one coordinate (D >= 1), got shape ", points.sizes());
  check_fits_int32(points.size(0), "points.size(0) (total points)");
  check_dim(offsets, "offsets", 1, "(B + 1,)");
  check_dtype(offsets, "offsets", at::kLong);
  TORCH_CHECK(offsets.size(0) >= 1, "offsets must have B + 1 >= 1 entries, got shape ", offsets.sizes());
  check_same_device(offsets, "offsets", points, "points");
  check_optional_batch_vector(start, "start", offsets.size(0) - 1, points, "points");
  check_nonnegative(k, "k");
  check_output_fits(points.device(), "k = " + std::to_string(k), {offsets.size(0) - 1, k}, 16);
}

}  // namespace fps_detail

namespace {

// One step's scan: every point's running distance takes min(itself, its squared distance to the
// newest pick q), and the farthest point not picked yet is returned (-1 when none is left).
// Strict comparison keeps the lowest index among equal candidates; picked (-1) and absent (-inf)
// points never beat the initial best of -1.
template <typename acc_t>
int64_t farthest_after(const acc_t* coords, int64_t n, int64_t dims, const acc_t* q, acc_t* min_distance) {
  acc_t best = fps_detail::picked_marker<acc_t>();
  int64_t next = -1;
  for (int64_t i = 0; i < n; ++i) {
    const acc_t dist = fps_detail::squared_distance(&coords[i * dims], q, dims);
    acc_t m = min_distance[i];
    if (dist < m) m = dist;  // a NaN never compares less, so absent points keep -inf
    min_distance[i] = m;
    if (m > best) {
      best = m;
      next = i;
    }
  }
  return next;
}

#if POINTOPS_X86_DISPATCH
// The same scan, 8 float32 points per instruction, with the coordinates stored by dimension
// (soa[d * n + i]). Per point the arithmetic is the scalar one: diff = p[d] - q[d] and
// acc = acc + diff * diff (each step rounded) from acc = 0 in dimension order, m = dist < m ? dist : m
// (_mm256_min_ps(dist, m) returns m unless dist < m, NaN included). Each lane keeps the first
// strict maximum of the indices it sees (i = lane mod 8, in increasing order); the lowest index
// among the lanes holding the overall maximum is then the scalar scan's answer, and the points
// past the last whole vector continue the scalar scan from there.
__attribute__((target("avx2"))) int64_t farthest_after_avx2(const float* soa, int64_t n, int64_t dims, const float* q,
                                                            float* min_distance) {
  const int64_t whole = n - n % 8;
  __m256 best = _mm256_set1_ps(fps_detail::picked_marker<float>());
  __m256i best_index = _mm256_set1_epi32(-1);
  __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t i = 0; i < whole; i += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t d = 0; d < dims; ++d) {
      const __m256 diff = _mm256_sub_ps(_mm256_loadu_ps(soa + d * n + i), _mm256_set1_ps(q[d]));
      acc = _mm256_add_ps(acc, _mm256_mul_ps(diff, diff));
    }
    const __m256 m = _mm256_min_ps(acc, _mm256_loadu_ps(min_distance + i));
    _mm256_storeu_ps(min_distance + i, m);
    const __m256 better = _mm256_cmp_ps(m, best, _CMP_GT_OQ);
    best = _mm256_blendv_ps(best, m, better);
    best_index = _mm256_blendv_epi8(best_index, index, _mm256_castps_si256(better));
    index = _mm256_add_epi32(index, eight);
  }
  alignas(32) float lane_best[8];
  alignas(32) int32_t lane_index[8];
  _mm256_store_ps(lane_best, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane_index), best_index);
  float top = fps_detail::picked_marker<float>();
  int64_t next = -1;
  for (int lane = 0; lane < 8; ++lane) {
    if (lane_index[lane] < 0) continue;
    if (lane_best[lane] > top || (lane_best[lane] == top && lane_index[lane] < next)) {
      top = lane_best[lane];
      next = lane_index[lane];
    }
  }
  for (int64_t i = whole; i < n; ++i) {
    float acc = 0.f;
    for (int64_t d = 0; d < dims; ++d) {
      const float diff = soa[d * n + i] - q[d];
      acc = add(acc, multiply(diff, diff));
    }
    float m = min_distance[i];
    if (acc < m) m = acc;
    min_distance[i] = m;
    if (m > top) {
      top = m;
      next = i;
    }
  }
  return next;
}
#endif

template <typename scalar_t, typename acc_t>
void sample_one_cloud(const scalar_t* cloud, int64_t n, int64_t dims, int64_t start, int64_t k, int64_t index_base,
                      int64_t* out_index, acc_t* out_distance) {
  constexpr acc_t kInf = std::numeric_limits<acc_t>::infinity();
  std::vector<acc_t> coords(static_cast<size_t>(n * dims));
  std::vector<acc_t> min_distance(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    bool finite = true;
    for (int64_t d = 0; d < dims; ++d) {
      const acc_t v = static_cast<acc_t>(cloud[i * dims + d]);
      coords[i * dims + d] = v;
      finite = finite && std::isfinite(v);
    }
    min_distance[i] = finite ? kInf : -kInf;
  }

  // The first pick: start when it names a present point, else the lowest-index present point,
  // which is what the general argmax below returns while every distance is +inf.
  int64_t pick = (start >= 0 && start < n && min_distance[start] == kInf) ? start : -1;
  if (pick < 0) {
    for (int64_t i = 0; i < n && pick < 0; ++i) pick = min_distance[i] == kInf ? i : -1;
  }

#if POINTOPS_X86_DISPATCH
  std::vector<float> soa;
  if constexpr (std::is_same_v<acc_t, float>) {
    if (cpu_has_avx2_fma() && k > 1) {
      soa.resize(static_cast<size_t>(n * dims));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t d = 0; d < dims; ++d) soa[d * n + i] = coords[i * dims + d];
      }
    }
  }
#endif

  int64_t s = 0;
  for (; s < k && pick >= 0; ++s) {
    out_index[s] = pick + index_base;
    out_distance[s] = min_distance[pick];
    min_distance[pick] = fps_detail::picked_marker<acc_t>();
    const acc_t* q = &coords[pick * dims];
#if POINTOPS_X86_DISPATCH
    if constexpr (std::is_same_v<acc_t, float>) {
      if (!soa.empty()) {
        pick = farthest_after_avx2(soa.data(), n, dims, q, min_distance.data());
        continue;
      }
    }
#endif
    pick = farthest_after(coords.data(), n, dims, q, min_distance.data());
  }
  for (; s < k; ++s) {
    out_index[s] = -1;
    out_distance[s] = -1;
  }
}

std::tuple<at::Tensor, at::Tensor> fps_cpu_impl(const at::Tensor& points, CloudLayout layout, int64_t batch,
                                                int64_t dims, const std::optional<at::Tensor>& start, int64_t k) {
  const auto options = points.options();
  at::Tensor indices = at::empty({batch, k}, options.dtype(at::kLong));
  at::Tensor distances = at::empty({batch, k}, options.dtype(fps_detail::distance_dtype(points)));
  if (batch == 0 || k == 0) return {indices, distances};
  const at::Tensor start_c = start.has_value() ? start->contiguous() : at::Tensor();
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, points.scalar_type(), "fps_cpu", [&] {
    using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* pts = points.data_ptr<scalar_t>();
    int64_t* idx = indices.data_ptr<int64_t>();
    acc_t* dist = distances.data_ptr<acc_t>();
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        sample_one_cloud<scalar_t, acc_t>(pts + layout.begin(b) * dims, layout.length(b), dims,
                                          start_ptr ? start_ptr[b] : 0, k, layout.index_base(b), idx + b * k,
                                          dist + b * k);
      }
    });
  });
  return {indices, distances};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fps_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                           const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_args(points, lengths, start, k);
  const at::Tensor pts = points.contiguous();
  const CloudLengths lengths_c = contiguous_lengths(lengths);
  const CloudLayout layout = padded_layout(lengths_c.data, pts.size(0), pts.size(1));
  return fps_cpu_impl(pts, layout, pts.size(0), pts.size(2), start, k);
}

std::tuple<at::Tensor, at::Tensor> fps_packed_cpu(const at::Tensor& points, const at::Tensor& offsets,
                                                  const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_packed_args(points, offsets, start, k);
  const at::Tensor pts = points.contiguous();
  const at::Tensor offsets_c = offsets.contiguous();
  // The values are on the host here, so a malformed layout is an error rather than the CUDA
  // kernel's documented clamp (which it applies because looking would need a host sync).
  const int64_t* bounds = offsets_c.data_ptr<int64_t>();
  for (int64_t b = 0; b + 1 < offsets_c.size(0); ++b) {
    TORCH_CHECK(bounds[b] >= 0 && bounds[b] <= bounds[b + 1] && bounds[b + 1] <= pts.size(0),
                "offsets must be non-decreasing values in [0, P = ", pts.size(0), "], got offsets[", b,
                "] = ", bounds[b], " and offsets[", b + 1, "] = ", bounds[b + 1]);
  }
  const CloudLayout layout = packed_layout(bounds, pts.size(0));
  return fps_cpu_impl(pts, layout, offsets.size(0) - 1, pts.size(1), start, k);
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("fps", &fps_cpu);
  m.impl("fps_packed", &fps_packed_cpu);
}

}  // namespace pointops

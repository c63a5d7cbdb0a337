// Host-side argument checks and parameter tables shared by the PPF ops' CPU and CUDA entry
// points. Every check runs before any kernel, on argument metadata only (no tensor data is read,
// so a CUDA call never syncs), and names the argument, the expectation and the observed value.
#pragma once

#include "common/aten.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "common/checks.h"
#include "ppf/ppf_math.h"

namespace pointops {
namespace ppf {

// Most keys a model's dense key table (ppf_model's key_offsets, K + 1 entries) may have.
constexpr int64_t kMaxKeys = int64_t{1} << 24;

inline void check_angle_bins(int64_t angle_bins) {
  TORCH_CHECK(angle_bins >= 1 && angle_bins <= kMaxAngleBins, "angle_bins must be in [1, ", kMaxAngleBins, "], got ",
              angle_bins);
}

// The binning of keys; distance_step is per cloud and filled in by the kernels.
inline Binning make_binning(int64_t angle_bins, int64_t distance_bins) {
  check_angle_bins(angle_bins);
  TORCH_CHECK(distance_bins >= 1 && distance_bins <= (int64_t{1} << 20), "distance_bins must be in [1, 2^20], got ",
              distance_bins);
  Binning b;
  b.distance_step = 0.0f;
  b.distance_bins = static_cast<int32_t>(distance_bins);
  b.angle_bins = static_cast<int32_t>(angle_bins);
  b.feature_bins = static_cast<int32_t>((angle_bins + 1) / 2);
  b.angle_step = static_cast<float>(2.0 * M_PI / static_cast<double>(angle_bins));
  b.alpha_scale = static_cast<float>(static_cast<double>(angle_bins) / (2.0 * M_PI));
  return b;
}

// Bin-centre cosines and sines, computed here in double on the host for both backends.
inline AlphaTable make_alpha_table(int64_t angle_bins) {
  check_angle_bins(angle_bins);
  AlphaTable t{};
  for (int64_t k = 0; k < angle_bins; ++k) {
    const double angle = (static_cast<double>(k) + 0.5) * 2.0 * M_PI / static_cast<double>(angle_bins);
    t.cos[k] = static_cast<float>(std::cos(angle));
    t.sin[k] = static_cast<float>(std::sin(angle));
  }
  return t;
}

// Oriented clouds: points and normals (B, N, 3) floating, same shape and device; lengths (B,)
// int64 or none. `p` / `n` / `l` name the arguments in messages.
inline void check_oriented_clouds(const at::Tensor& points, const at::Tensor& normals,
                                  const std::optional<at::Tensor>& lengths, const char* p, const char* n,
                                  const char* l) {
  check_dim(points, p, 3, "(B, N, 3)");
  check_floating(points, p);
  TORCH_CHECK(points.size(2) == 3, p, " must have shape (B, N, 3), got shape ", points.sizes());
  check_floating(normals, n);
  check_same_device(normals, n, points, p);
  TORCH_CHECK(normals.sizes() == points.sizes(), n, " must have the shape of ", p, " ", points.sizes(), ", got ",
              normals.sizes());
  check_optional_batch_vector(lengths, l, points.size(0), points, p);
  check_fits_int32(points.size(1), "points per cloud (N)");
}

// A per-cloud float parameter such as distance_step: (batch,) floating, on ref's device.
inline void check_cloud_values(const at::Tensor& t, const char* name, int64_t batch, const at::Tensor& ref,
                               const char* ref_name) {
  check_floating(t, name);
  check_shape(t, name, {batch});
  check_same_device(t, name, ref, ref_name);
}

inline at::Tensor as_float(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

}  // namespace ppf
}  // namespace pointops

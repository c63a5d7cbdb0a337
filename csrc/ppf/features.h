// Point pair features of given pairs: the contract shared by the CPU and CUDA kernels.
//
// ppf_features(points, normals, pairs, lengths?, distance_step, angle_bins, distance_bins)
//     -> (features, keys, alpha)
//   points, normals (B, N, 3) floating (computed in float32); normals need not have unit length.
//   pairs           (B, P, 2) int64: (first, second) point indices into cloud b.
//   lengths         (B,) int64 or None: cloud b is rows [0, lengths[b]) (clamped to [0, N]).
//   distance_step   (B,) floating: the distance bin width of cloud b (> 0 and finite, else the
//                   cloud gets no keys).
//   angle_bins      A in [1, 360]: alpha bins over [0, 2 pi); the angle step is 2 pi / A and a
//                   feature angle in [0, pi] has ceil(A / 2) bins.
//   distance_bins   number of distance bins; farther pairs get no key.
//   features        (B, P, 4) float32: (|d|, angle(n1, d), angle(n2, d), angle(n1, n2)), radians,
//                   d = p2 - p1 (csrc/ppf/ppf_math.h); NaN rows for pairs that have no feature.
//   keys            (B, P) int64: the packed bins (ppf_math.h), -1 for pairs without a feature or
//                   with a distance bin >= distance_bins or an invalid distance_step.
//   alpha           (B, P) float32: the angle of d about n1 in the first point's frame, in
//                   [-pi, pi]; NaN where the features are.
// A pair has no feature when an index lies outside [0, lengths[b]), a coordinate or normal entry
// is not finite, a normal is zero, or the two points coincide (i == j included).
#pragma once

#include "common/aten.h"

#include <cstdint>
#include <optional>
#include <tuple>

#include "ppf/ppf_math.h"

namespace pointops {
namespace ppf {

// Outputs of one pair (features[4], key, alpha), as the contract above says.
POINTOPS_HOST_DEVICE inline void one_pair_feature(const float* points, const float* normals, int64_t length,
                                                  int64_t first, int64_t second, Binning binning, float* features,
                                                  int64_t* key, float* alpha) {
  const float nan = quiet_nan();
  Vec3 p1, n1, p2, n2;
  *key = -1;
  if (!load_oriented(points, normals, length, first, &p1, &n1) ||
      !load_oriented(points, normals, length, second, &p2, &n2)) {
    for (int c = 0; c < 4; ++c) features[c] = nan;
    *alpha = nan;
    return;
  }
  const Vec3 d = sub3(p2, p1);
  const Frame f1 = make_frame(p1, n1);
  const PairFeature f = pair_feature(f1, n2, d);
  if (!(f.distance > 0.0f) || !finite(f.distance)) {
    for (int c = 0; c < 4; ++c) features[c] = nan;
    *alpha = nan;
    return;
  }
  features[0] = f.distance;
  features[1] = f.a1;
  features[2] = f.a2;
  features[3] = f.a3;
  *alpha = pair_alpha(f1, d);
  if (binning.distance_step > 0.0f && finite(binning.distance_step)) {
    const FeatureBins bins = feature_bins(f, binning);
    if (bins.valid) *key = exact_key(bins, binning.feature_bins);
  }
}

using FeaturesResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Checks shared by both backends; returns the binning without distance_step.
Binning check_features_args(const at::Tensor& points, const at::Tensor& normals, const at::Tensor& pairs,
                            const std::optional<at::Tensor>& lengths, const at::Tensor& distance_step,
                            int64_t angle_bins, int64_t distance_bins);

}  // namespace ppf
}  // namespace pointops

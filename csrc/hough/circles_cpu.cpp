// 2D circle Hough accumulator on the CPU (rules in circles.h; the CUDA twin is circles_cuda.cu),
// and the offset table both backends read.
#include "hough/circles.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

#include "common/checks.h"
#include "common/clouds.h"

namespace pointops {
namespace hough_images {

float check_circles_args(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                         const std::optional<at::Tensor>& weights, const std::optional<at::Tensor>& gradients,
                         int64_t height, int64_t width, at::IntArrayRef radii, double max_angle) {
  check_point_lists(points, lengths, weights, height, width);
  int64_t offsets = 0;
  for (const int64_t r : radii) {
    TORCH_CHECK(r >= 0 && r <= kMaxRadius, "radii must be in [0, ", kMaxRadius, "], got ", radii);
    offsets += 8 * (r + 1);  // an upper bound of the ring's size
  }
  TORCH_CHECK(offsets <= kMaxCircleOffsets, "radii: the circles of all radii must have at most ", kMaxCircleOffsets,
              " offsets in all, got radii ", radii);
  if (!gradients.has_value()) return 0.f;
  check_floating(*gradients, "gradients");
  check_shape(*gradients, "gradients", {points.size(0), points.size(1), 2});
  check_same_device(*gradients, "gradients", points, "points");
  TORCH_CHECK(max_angle > 0.0 && max_angle < 1.5707963267948966,
              "max_angle must be in (0, pi / 2) radians with gradients, got ", max_angle);
  return static_cast<float>(std::tan(max_angle));
}

namespace {

struct TableCache {
  std::mutex mutex;
  std::map<std::vector<int64_t>, CircleTable> plain, pinned;
};

// Never destroyed: its pinned tables belong to CUDA's host allocator, which may already be torn
// down when static destructors run at exit (freeing them then aborts the process).
TableCache& table_cache() {
  static TableCache* cache = new TableCache;
  return *cache;
}

CircleTable build_table(at::IntArrayRef radii) {
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  std::vector<std::vector<std::pair<int32_t, int32_t>>> rings(n_radii);
  int64_t n_entries = 0, n_dy = 0;
  int32_t max_radius = 0;
  for (int64_t i = 0; i < n_radii; ++i) {
    const int32_t r = static_cast<int32_t>(radii[i]);
    rings[i] = circle_offsets(r);
    n_entries += static_cast<int64_t>(rings[i].size());
    n_dy += 2 * int64_t{r} + 2;
    max_radius = std::max(max_radius, r);
  }
  CircleTable t;
  t.n_radii = n_radii;
  t.n_entries = n_entries;
  t.max_radius = max_radius;
  t.data = at::empty({4 * n_radii + n_entries + n_dy}, at::TensorOptions().dtype(at::kInt));
  int32_t* info = t.data.data_ptr<int32_t>();
  int32_t* entries = info + 4 * n_radii;
  int32_t* dy_index = entries + n_entries;
  int64_t entry = 0, dy_base = 0;
  for (int64_t i = 0; i < n_radii; ++i) {
    const int32_t r = static_cast<int32_t>(radii[i]);
    const auto& ring = rings[i];
    // Counting sort by dy, stable (circle_perimeter's order within a row).
    std::vector<int32_t> start(2 * static_cast<size_t>(r) + 2, 0);
    for (const auto& o : ring) ++start[o.first + r + 1];
    for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (const auto& o : ring) entries[entry + fill[o.first + r]++] = pack_offset(o.second, o.first);
    for (size_t k = 0; k < start.size(); ++k) dy_index[dy_base + k] = static_cast<int32_t>(entry + start[k]);
    info[4 * i] = r;
    info[4 * i + 1] = static_cast<int32_t>(entry);
    info[4 * i + 2] = static_cast<int32_t>(entry + ring.size());
    info[4 * i + 3] = static_cast<int32_t>(dy_base);
    entry += static_cast<int64_t>(ring.size());
    dy_base += static_cast<int64_t>(start.size());
  }
  return t;
}

}  // namespace

CircleTable circle_table(at::IntArrayRef radii, bool pinned) {
  TableCache& cache = table_cache();
  const std::vector<int64_t> key(radii.begin(), radii.end());
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& tables = pinned ? cache.pinned : cache.plain;
  auto found = tables.find(key);
  if (found != tables.end()) return found->second;
  // A bounded cache: detectors call with a few radius lists; a caller sweeping many lists only
  // rebuilds (tables are cheap: linear in the offsets).
  if (tables.size() >= 64) tables.clear();
  CircleTable t = build_table(radii);
  if (pinned) t.data = t.data.pin_memory();
  tables.emplace(key, t);
  return t;
}

}  // namespace hough_images

namespace {

using hough_images::CircleTable;

// The votes of radius i for image b into plane (height x width, zeroed by the caller).
template <typename index_t, typename acc_t>
void vote_plane(const index_t* points, const int64_t* lengths, const int64_t* fixed, const float* gradients, int64_t n,
                int32_t height, int32_t width, const CircleTable& table, float tan_angle, int64_t b, int64_t i,
                acc_t* plane) {
  const int32_t* info = table.info();
  const int32_t* entries = table.entries();
  const int32_t* dy_index = table.dy_index();
  const int32_t r = info[4 * i], dy_base = info[4 * i + 3];
  const int64_t length = cloud_length(lengths, b, n);
  for (int64_t p = 0; p < length; ++p) {
    int32_t x, y;
    if (!hough_images::point_in_image(points + (b * n + p) * 2, height, width, x, y)) continue;
    const acc_t vote = fixed == nullptr ? acc_t(1) : static_cast<acc_t>(fixed[b * n + p]);
    if (vote == acc_t(0)) continue;
    float gx = 0.f, gy = 0.f;
    if (gradients != nullptr) {
      gx = gradients[(b * n + p) * 2];
      gy = gradients[(b * n + p) * 2 + 1];
      if (!hough_images::gradient_usable(gx, gy)) continue;
    }
    // Only the offsets whose centre row is inside the image (entries are sorted by dy).
    const int32_t dy_lo = std::max(-r, -y), dy_hi = std::min(r, height - 1 - y);
    if (dy_lo > dy_hi) continue;
    const int32_t e_lo = dy_index[dy_base + dy_lo + r], e_hi = dy_index[dy_base + dy_hi + r + 1];
    for (int32_t e = e_lo; e < e_hi; ++e) {
      const int32_t dx = hough_images::offset_dx(entries[e]), dy = hough_images::offset_dy(entries[e]);
      const int32_t xc = x + dx;
      if (xc < 0 || xc >= width) continue;
      if (gradients != nullptr && !hough_images::along_gradient(dx, dy, gx, gy, tan_angle, 0)) continue;
      plane[int64_t{y + dy} * width + xc] += vote;
    }
  }
}

template <typename index_t, typename acc_t>
void vote_circles(const index_t* points, const int64_t* lengths, const int64_t* fixed, const float* gradients,
                  int64_t batch, int64_t n, int32_t height, int32_t width, const CircleTable& table, float tan_angle,
                  acc_t* out) {
  const int64_t n_radii = table.n_radii;
  const int64_t plane = int64_t{height} * width;
  // One task per (image, radius): each owns its output plane, so no two tasks write one bin.
  at::parallel_for(0, batch * n_radii, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      vote_plane(points, lengths, fixed, gradients, n, height, width, table, tan_angle, task / n_radii, task % n_radii,
                 out + task * plane);
    }
  });
}

// hough_circles_max_points: one image per task, a radius at a time into one plane, each folded into the
// best (key, index) of every centre.
template <typename index_t, typename acc_t>
void best_circles(const index_t* points, const int64_t* lengths, const int64_t* fixed, const float* gradients,
                  int64_t batch, int64_t n, int32_t height, int32_t width, const CircleTable& table, float tan_angle,
                  bool float_scores, bool normalize, uint32_t* keys, int64_t* index) {
  const int64_t n_radii = table.n_radii;
  const int64_t bins = int64_t{height} * width;
  const bool weighted = fixed != nullptr;
  at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
    std::vector<acc_t> plane(static_cast<size_t>(bins));
    for (int64_t b = first; b < last; ++b) {
      uint32_t* best = keys + b * bins;
      int64_t* best_index = index + b * bins;
      for (int64_t i = 0; i < n_radii; ++i) {
        std::fill(plane.begin(), plane.end(), acc_t(0));
        vote_plane(points, lengths, fixed, gradients, n, height, width, table, tan_angle, b, i, plane.data());
        const int32_t ring = table.info()[4 * i + 2] - table.info()[4 * i + 1];
        for (int64_t k = 0; k < bins; ++k) {
          const uint32_t key =
              float_scores ? hough_images::ordered_score(hough_images::float_score(plane[k], weighted, normalize, ring))
                           : hough_images::ordered_score(static_cast<int32_t>(plane[k]));
          if (i == 0 || key > best[k]) {  // strictly larger: ties keep the first radius
            best[k] = key;
            best_index[k] = i;
          }
        }
      }
    }
  });
}

at::Tensor hough_circles_points_cpu(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                    const std::optional<at::Tensor>& weights,
                                    const std::optional<at::Tensor>& gradients, int64_t height, int64_t width,
                                    at::IntArrayRef radii, double max_angle) {
  const float tan_angle =
      hough_images::check_circles_args(points, lengths, weights, gradients, height, width, radii, max_angle);
  hough_images::check_circles_output(points, radii, height, width, weights.has_value());
  const int64_t batch = points.size(0), n = points.size(1);
  const int64_t n_radii = static_cast<int64_t>(radii.size());
  const bool weighted = weights.has_value();
  at::Tensor acc = at::zeros({batch, n_radii, height, width}, points.options().dtype(weighted ? at::kLong : at::kInt));
  if (acc.numel() > 0 && n > 0) {
    const CircleTable table = hough_images::circle_table(radii, false);
    const at::Tensor pts = points.contiguous();
    const CloudLengths lengths_c = contiguous_lengths(lengths);
    at::Tensor fixed, grads;
    if (weighted) {
      const at::Tensor w = weights->to(at::kFloat).contiguous();
      fixed = at::empty({batch, n}, points.options().dtype(at::kLong));
      const float* wp = w.data_ptr<float>();
      int64_t* fp = fixed.data_ptr<int64_t>();
      at::parallel_for(0, batch * n, 4096, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) fp[i] = hough_images::weight_to_fixed(wp[i]);
      });
    }
    if (gradients.has_value()) grads = gradients->to(at::kFloat).contiguous();
    const int64_t* fixed_ptr = weighted ? fixed.data_ptr<int64_t>() : nullptr;
    const float* grad_ptr = grads.defined() ? grads.data_ptr<float>() : nullptr;
    AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_circles_points_cpu", [&] {
      if (weighted) {
        vote_circles(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, grad_ptr, batch, n,
                     static_cast<int32_t>(height), static_cast<int32_t>(width), table, tan_angle,
                     acc.data_ptr<int64_t>());
      } else {
        vote_circles(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, grad_ptr, batch, n,
                     static_cast<int32_t>(height), static_cast<int32_t>(width), table, tan_angle,
                     acc.data_ptr<int32_t>());
      }
    });
  }
  return weighted ? hough_images::fixed_to_float(acc) : acc;
}

std::tuple<at::Tensor, at::Tensor> hough_circles_max_points_cpu(const at::Tensor& points,
                                                                const std::optional<at::Tensor>& lengths,
                                                                const std::optional<at::Tensor>& weights,
                                                                const std::optional<at::Tensor>& gradients,
                                                                int64_t height, int64_t width, at::IntArrayRef radii,
                                                                double max_angle, bool normalize) {
  const float tan_angle =
      hough_images::check_circles_args(points, lengths, weights, gradients, height, width, radii, max_angle);
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for hough_circles_max_points");
  const int64_t batch = points.size(0), n = points.size(1);
  const bool weighted = weights.has_value(), float_scores = weighted || normalize;
  at::Tensor keys = at::empty({batch, height, width}, points.options().dtype(at::kInt));
  at::Tensor index = at::zeros({batch, height, width}, points.options().dtype(at::kLong));
  if (keys.numel() > 0) {
    const CircleTable table = hough_images::circle_table(radii, false);
    const at::Tensor pts = points.contiguous();
    const CloudLengths lengths_c = contiguous_lengths(lengths);
    at::Tensor fixed, grads;
    if (weighted) {
      const at::Tensor w = weights->to(at::kFloat).contiguous();
      fixed = at::empty({batch, n}, points.options().dtype(at::kLong));
      const float* wp = w.data_ptr<float>();
      int64_t* fp = fixed.data_ptr<int64_t>();
      for (int64_t i = 0; i < batch * n; ++i) fp[i] = hough_images::weight_to_fixed(wp[i]);
    }
    if (gradients.has_value()) grads = gradients->to(at::kFloat).contiguous();
    const int64_t* fixed_ptr = weighted ? fixed.data_ptr<int64_t>() : nullptr;
    const float* grad_ptr = grads.defined() ? grads.data_ptr<float>() : nullptr;
    uint32_t* key_ptr = reinterpret_cast<uint32_t*>(keys.data_ptr<int32_t>());
    AT_DISPATCH_INDEX_TYPES(pts.scalar_type(), "hough_circles_max_points_cpu", [&] {
      if (weighted) {
        best_circles<index_t, int64_t>(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, grad_ptr, batch, n,
                                       static_cast<int32_t>(height), static_cast<int32_t>(width), table, tan_angle,
                                       float_scores, normalize, key_ptr, index.data_ptr<int64_t>());
      } else {
        best_circles<index_t, int32_t>(pts.data_ptr<index_t>(), lengths_c.data, fixed_ptr, grad_ptr, batch, n,
                                       static_cast<int32_t>(height), static_cast<int32_t>(width), table, tan_angle,
                                       float_scores, normalize, key_ptr, index.data_ptr<int64_t>());
      }
    });
  }
  return {hough_images::scores_from_keys(keys, float_scores), index};
}

}  // namespace

namespace hough_images {

at::Tensor scores_from_keys(const at::Tensor& keys, bool is_float) {
  // unordered_bits() with torch ops, on the keys' device: int32 scores are key ^ 0x80000000;
  // float scores are key & 0x7fffffff (non-negative) or ~key (negative), viewed as float32.
  const at::Tensor top = at::lt(keys, 0);  // the top bit of the uint32 key
  if (!is_float) return at::bitwise_xor(keys, std::numeric_limits<int32_t>::min());
  const at::Tensor bits = at::where(top, at::bitwise_and(keys, 0x7fffffff), at::bitwise_not(keys));
  return bits.view(at::kFloat);
}

}  // namespace hough_images

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("hough_circles_points", &hough_circles_points_cpu);
  m.impl("hough_circles_max_points", &hough_circles_max_points_cpu);
}

}  // namespace pointops

// Circle and line detections (rules in detections.h): the checks and the generic implementation,
// hough_peaks plus ATen ops on the tensors' own device (the glued line suppression: a C++ box scan
// on the CPU, window maxima of ATen ops on CUDA). The CPU kernels are these; CUDA runs them too
// where its fused kernels do not apply (detections_cuda.cu).
#include "hough/detections.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/argmax_key.h"
#include "common/checks.h"
#include "hough/peaks.h"

namespace pointops {
namespace hough_images {

namespace {

// hough_peaks through the dispatcher, so each backend's kernel runs (peaks.h).
std::tuple<at::Tensor, at::Tensor> call_hough_peaks(const at::Tensor& acc, std::vector<int64_t> radius,
                                                    std::vector<bool> periodic, double min_votes, int64_t k) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("pointops::hough_peaks", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, at::IntArrayRef,
                                                                 const c10::List<bool>&, double, int64_t, bool)>();
  c10::List<bool> flags;
  for (const bool p : periodic) flags.push_back(p);
  return op.call(acc, radius, flags, min_votes, k, false);
}

// A small CPU table on `device` (a stream-ordered copy; on the CPU, the table itself).
at::Tensor device_table(const at::Tensor& host, const at::Device& device) {
  return device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
}

// Which of votes (B, n) pass the threshold: float32(votes) > float32(threshold), or, without
// one, > 0.5 * float32(the image's largest value of acc) (the pipelines' _threshold).
at::Tensor passes(const at::Tensor& acc, const at::Tensor& votes, std::optional<double> threshold) {
  const at::Tensor v = votes.to(at::kFloat);
  if (threshold.has_value()) return at::gt(v, *threshold);  // the scalar rounds to float32, as in torch
  const at::Tensor limit = at::mul(acc.flatten(1).amax(1).to(at::kFloat), 0.5);
  return at::gt(v, limit.unsqueeze(1));
}

// The keys of the glued line map F = [acc, acc flipped along rho] (B, n_rho, 2T) int64: the
// hough_peaks candidate key (vote bits << 32 | ~index, peaks.h) with glued_line_index as the
// index, 0 for a bin that cannot be a peak (votes not > 0, below min_votes, or NaN).
at::Tensor glued_line_keys(const at::Tensor& acc, double min_votes) {
  const int64_t n_rho = acc.size(1), n_theta = acc.size(2);
  const at::Tensor values = acc.contiguous();
  const at::Tensor bits = (values.scalar_type() == at::kFloat ? values.view(at::kInt) : values).to(at::kLong);
  const at::Tensor candidate = at::logical_and(values.gt(0), values.to(at::kDouble).ge(min_votes));
  // glued_line_index of the first copy (2 (d T + j)) and of the mirrored one (that + 1, read at
  // row n_rho - 1 - d, hence the flip)
  const at::Tensor index = at::arange(n_rho * n_theta, acc.options().dtype(at::kLong)).view({1, n_rho, n_theta}).mul(2);
  const at::Tensor high = bits.bitwise_and(0xffffffffLL).bitwise_left_shift(32);
  const at::Tensor zero = at::zeros_like(high);
  const at::Tensor first = at::where(candidate, high.bitwise_or(at::rsub(index, 0xffffffffLL)), zero);
  const at::Tensor second = at::where(candidate, high.bitwise_or(at::rsub(index, 0xffffffffLL - 1)), zero);
  return at::cat({first, second.flip({1})}, 2);
}

// The peaks of the glued turn on the CPU: keys as glued_line_keys', kept where no key in the
// bin's box is larger, each candidate scanning its box (hough_peaks' CPU way), 0 elsewhere. A
// neighbour's key is larger exactly when its votes are, or they are equal and its rank is lower
// (a candidate's neighbour with more votes is a candidate too), so values are compared first.
template <typename T>
at::Tensor glued_line_peaks_cpu(const at::Tensor& acc, int64_t ry, int64_t rx, double min_votes) {
  const int64_t batch = acc.size(0), n_rho = acc.size(1), n_theta = acc.size(2), width = 2 * n_theta;
  const at::Tensor values = acc.contiguous();
  const T* data = values.data_ptr<T>();
  at::Tensor keys = at::empty({batch, n_rho * width}, values.options().dtype(at::kLong));
  int64_t* out = keys.data_ptr<int64_t>();
  ry = std::min(ry, n_rho);
  rx = std::min(rx, n_theta);
  at::parallel_for(0, batch * n_rho, 1, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      const int64_t b = row / n_rho, y = row - b * n_rho;
      const T* image = data + b * n_rho * n_theta;
      auto value = [&](int64_t yy, int64_t xx) {
        return xx < n_theta ? image[yy * n_theta + xx] : image[(n_rho - 1 - yy) * n_theta + (xx - n_theta)];
      };
      for (int64_t x = 0; x < width; ++x) {
        const T v = value(y, x);
        int64_t key = 0;
        if (v > T(0) && static_cast<double>(v) >= min_votes) {
          const uint32_t rank = glued_line_index(y, x, n_rho, n_theta);
          bool peak = true;
          for (int64_t yy = std::max<int64_t>(0, y - ry); peak && yy <= std::min(n_rho - 1, y + ry); ++yy) {
            for (int64_t dx = -rx; dx <= rx; ++dx) {
              int64_t xx = x + dx;  // rx <= n_theta: one turn of 2 n_theta wraps it back
              xx += xx < 0 ? width : (xx >= width ? -width : 0);
              const T u = value(yy, xx);
              if (u > v || (u == v && glued_line_index(yy, xx, n_rho, n_theta) < rank)) {
                peak = false;
                break;
              }
            }
          }
          if (peak) key = static_cast<int64_t>(argmax_key(hough_detail::vote_bits(v), rank));
        }
        out[row * width + x] = key;
      }
    }
  });
  return keys;
}

// The maximum over the window [i - radius, i + radius] along `dim`: zeros past the ends, or
// wrapping around when periodic. Doubling spans, then two overlapping ones: O(log radius) passes.
at::Tensor window_max(const at::Tensor& x, int64_t dim, int64_t radius, bool periodic) {
  const int64_t n = x.size(dim);
  radius = std::min(radius, n);
  if (radius == 0 || n == 0) return x;
  at::Tensor m;
  if (periodic) {
    m = at::cat({x.narrow(dim, n - radius, radius), x, x.narrow(dim, 0, radius)}, dim);
  } else {
    std::vector<int64_t> pad_shape(x.sizes().begin(), x.sizes().end());
    pad_shape[dim] = radius;
    const at::Tensor pad = at::zeros(pad_shape, x.options());
    m = at::cat({pad, x, pad}, dim);
  }
  const int64_t width = 2 * radius + 1;
  int64_t span = 1;  // m[i] = max of the padded row over [i, i + span)
  while (2 * span <= width) {
    const int64_t len = m.size(dim) - span;
    m = m.narrow(dim, 0, len).maximum(m.narrow(dim, span, len));
    span *= 2;
  }
  return m.narrow(dim, 0, n).maximum(m.narrow(dim, width - span, n));
}

}  // namespace

void check_circle_detections_args(const at::Tensor& scores, const at::Tensor& radius_index, at::IntArrayRef radii,
                                  int64_t k, int64_t min_distance, std::optional<double> threshold) {
  check_dim(scores, "scores", 3, "(B, H, W)");
  TORCH_CHECK(scores.scalar_type() == at::kInt || scores.scalar_type() == at::kFloat,
              "scores must be int32 or float32, got ", scores.scalar_type());
  check_dtype(radius_index, "radius_index", at::kLong);
  check_shape(radius_index, "radius_index", scores.sizes());
  check_same_device(radius_index, "radius_index", scores, "scores");
  check_nonnegative(k, "k");
  check_nonnegative(min_distance, "min_distance");
  TORCH_CHECK(!threshold.has_value() || !std::isnan(*threshold), "threshold must not be NaN");
  TORCH_CHECK(!radii.empty(), "radii must hold at least one radius for circle_detections");
  for (const int64_t r : radii) {
    TORCH_CHECK(r >= 0 && r <= 32767, "radii must be in [0, 32767], got ", radii);
  }
  TORCH_CHECK(scores.size(1) * scores.size(2) <= std::numeric_limits<int32_t>::max(),
              "scores must have at most 2^31 - 1 centres per image, got shape ", scores.sizes());
}

void check_line_detections_args(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k, int64_t min_distance,
                                int64_t min_angle, std::optional<double> threshold) {
  check_dim(acc, "acc", 3, "(B, n_rho, T)");
  TORCH_CHECK(acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat, "acc must be int32 or float32, got ",
              acc.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(theta.size()) == acc.size(2), "theta must have one angle per column of acc (",
              acc.size(2), "), got ", theta.size());
  check_nonnegative(k, "k");
  check_nonnegative(min_distance, "min_distance");
  check_nonnegative(min_angle, "min_angle");
  TORCH_CHECK(!threshold.has_value() || !std::isnan(*threshold), "threshold must not be NaN");
  TORCH_CHECK(acc.size(1) * acc.size(2) * 2 <= std::numeric_limits<int32_t>::max(),
              "acc must have at most 2^30 - 1 bins per image, got shape ", acc.sizes());
}

std::tuple<at::Tensor, at::Tensor> circle_detections_generic(const at::Tensor& scores, const at::Tensor& radius_index,
                                                             at::IntArrayRef radii, int64_t k, int64_t min_distance,
                                                             std::optional<double> threshold) {
  const int64_t batch = scores.size(0), height = scores.size(1), width = scores.size(2);
  const at::TensorOptions floats = scores.options().dtype(at::kFloat);
  if (height * width == 0) {
    return {at::full({batch, k, 3}, std::numeric_limits<float>::quiet_NaN(), floats), at::zeros({batch, k}, floats)};
  }
  // a threshold below 0 is 0: peaks have votes > 0, and padding (votes 0) never passes
  const std::optional<double> min_votes =
      threshold.has_value() ? std::optional<double>(std::max(*threshold, 0.0)) : std::nullopt;
  auto [votes, index] =
      call_hough_peaks(scores, {min_distance, min_distance}, {false, false}, min_votes.value_or(0.0), k);
  const at::Tensor y = index.select(2, 0), x = index.select(2, 1);
  // padding rows (index -1) are never circles, whatever the threshold (an image whose scores
  // are all negative has a negative default threshold)
  const at::Tensor keep = at::logical_and(y.ge(0), passes(scores, votes, min_votes));
  const at::Tensor flat = at::add(at::mul(y, width), x).clamp_min(0);
  const at::Tensor picked = radius_index.flatten(1).gather(1, flat);
  const at::Tensor table =
      device_table(at::tensor(std::vector<int64_t>(radii.begin(), radii.end()), at::kLong), scores.device());
  // out-of-range indices (never at the peaks of the best-radius maps) are clamped
  const at::Tensor r = table.index_select(0, picked.clamp(0, table.size(0) - 1).flatten()).view(picked.sizes());
  at::Tensor circles = at::stack({x, y, r}, -1).to(at::kFloat);
  circles = at::where(keep.unsqueeze(-1), circles, at::full_like(circles, std::numeric_limits<float>::quiet_NaN()));
  return {circles, at::where(keep, votes.to(at::kFloat), at::zeros_like(circles.select(2, 0)))};
}

std::tuple<at::Tensor, at::Tensor> line_detections_generic(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k,
                                                           int64_t min_distance, int64_t min_angle,
                                                           std::optional<double> threshold, bool glue) {
  const int64_t batch = acc.size(0), n_rho = acc.size(1), n_theta = acc.size(2);
  if (n_rho * n_theta == 0) {  // no bins: no lines (and hough_peaks cannot decode an empty dim)
    const at::TensorOptions floats = acc.options().dtype(at::kFloat);
    return {at::full({batch, k, 2}, std::numeric_limits<float>::quiet_NaN(), floats), at::zeros({batch, k}, floats)};
  }
  const int64_t offset = (n_rho - 1) / 2;
  const int64_t wanted = glue ? 2 * k : k;
  at::Tensor votes, d, j, valid;
  if (!glue) {
    at::Tensor index;
    std::tie(votes, index) =
        call_hough_peaks(acc, {min_distance, std::min(min_angle, n_theta)}, {false, false}, threshold.value_or(0.0), k);
    d = index.select(2, 0);
    j = index.select(2, 1);
    valid = at::logical_and(d.ge(0), passes(acc, votes, threshold));
  } else {
    // A whole turn: the second half-turn is the first with rho mirrored, so the angle axis is
    // periodic; each line then appears twice and the copies are merged below. hough_peaks would
    // rank equal votes by the turn's own flat index, so the suppression runs here on keys that
    // carry glued_line_index instead (the fused CUDA kernel builds the same keys).
    // (B, n_rho * 2T) keys of the peaks, 0 elsewhere: on the CPU each candidate scans its box;
    // on CUDA (where the fused kernel does not apply) window maxima of the key map give its box
    // maximum, a few passes of ATen ops
    const int64_t rx = std::min(min_angle, n_theta);
    at::Tensor peaks;
    if (acc.device().is_cpu()) {
      peaks = acc.scalar_type() == at::kInt
                  ? glued_line_peaks_cpu<int32_t>(acc, min_distance, rx, threshold.value_or(0.0))
                  : glued_line_peaks_cpu<float>(acc, min_distance, rx, threshold.value_or(0.0));
    } else {
      const at::Tensor keys = glued_line_keys(acc, threshold.value_or(0.0));
      const at::Tensor box = window_max(window_max(keys, 1, min_distance, false), 2, rx, true);
      peaks = at::where(at::logical_and(keys.ne(0), keys.eq(box)), keys, at::zeros_like(keys)).flatten(1);
    }
    at::Tensor top = std::get<0>(at::topk(peaks, std::min(wanted, peaks.size(1)), 1));
    if (top.size(1) < wanted) top = at::cat({top, at::zeros({batch, wanted - top.size(1)}, top.options())}, 1);
    const at::Tensor found = top.ne(0);
    const at::Tensor bin =
        at::where(found, at::rsub(top.bitwise_and(0xffffffffLL), 0xffffffffLL).floor_divide(2), at::zeros_like(top));
    d = bin.floor_divide(n_theta);
    j = at::remainder(bin, n_theta);
    votes = acc.flatten(1).gather(1, bin);
    valid = at::logical_and(found, passes(acc, votes, threshold));
    const at::Tensor unique = at::arange(-1, -1 - wanted, -1, acc.options().dtype(at::kLong));  // -1, -2, ...
    const at::Tensor key = at::where(valid, at::add(at::mul(d, n_theta), j), unique);
    const at::Tensor earlier = at::ones({wanted, wanted}, acc.options().dtype(at::kBool)).tril(-1);
    const at::Tensor repeat = at::logical_and(key.unsqueeze(2).eq(key.unsqueeze(1)), earlier).any(2);
    valid = at::logical_and(valid, at::logical_not(repeat));
    // the first k valid rows, in order
    const at::Tensor order =
        std::get<1>(at::sort(at::logical_not(valid).to(at::kChar), /*stable=*/true, 1, false)).narrow(1, 0, k);
    d = d.gather(1, order);
    j = j.gather(1, order);
    votes = votes.gather(1, order);
    valid = valid.gather(1, order);
  }
  const at::Tensor rho = at::sub(d, offset).to(at::kFloat);
  const at::Tensor table =
      device_table(at::tensor(std::vector<double>(theta.begin(), theta.end()), at::kDouble), acc.device());
  const at::Tensor th = table.index_select(0, j.clamp_min(0).flatten()).view(j.sizes()).to(at::kFloat);
  at::Tensor lines = at::stack({rho, th}, -1);
  lines = at::where(valid.unsqueeze(-1), lines, at::full_like(lines, std::numeric_limits<float>::quiet_NaN()));
  return {lines, at::where(valid, votes.to(at::kFloat), at::zeros_like(rho))};
}

}  // namespace hough_images

namespace {

std::tuple<at::Tensor, at::Tensor> circle_detections_cpu(const at::Tensor& scores, const at::Tensor& radius_index,
                                                         at::IntArrayRef radii, int64_t k, int64_t min_distance,
                                                         std::optional<double> threshold) {
  hough_images::check_circle_detections_args(scores, radius_index, radii, k, min_distance, threshold);
  return hough_images::circle_detections_generic(scores, radius_index, radii, k, min_distance, threshold);
}

std::tuple<at::Tensor, at::Tensor> line_detections_cpu(const at::Tensor& acc, at::ArrayRef<double> theta, int64_t k,
                                                       int64_t min_distance, int64_t min_angle,
                                                       std::optional<double> threshold, bool glue) {
  hough_images::check_line_detections_args(acc, theta, k, min_distance, min_angle, threshold);
  return hough_images::line_detections_generic(acc, theta, k, min_distance, min_angle, threshold, glue);
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) {
  m.impl("circle_detections", &circle_detections_cpu);
  m.impl("line_detections", &line_detections_cpu);
}

}  // namespace pointops

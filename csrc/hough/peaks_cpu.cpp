// Hough peaks on the CPU (rules in peaks.h); the key decoding here serves both backends.
#include "hough/peaks.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/checks.h"

namespace pointops {
namespace hough_detail {

PeakGrid check_peaks_args(const at::Tensor& acc, at::IntArrayRef radius, const c10::List<bool>& periodic,
                          double min_votes, int64_t k, bool plane_seam) {
  const int64_t ndim = acc.dim() - 1;
  TORCH_CHECK(ndim >= 1 && ndim <= kMaxPeakDims, "acc must have shape (B, *dims) with 1 to ", kMaxPeakDims,
              " dims, got shape ", acc.sizes());
  TORCH_CHECK(acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat, "acc must be int32 or float32, got ",
              acc.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(radius.size()) == ndim, "radius must have one entry per dim (", ndim,
              " for acc of shape ", acc.sizes(), "), got ", radius);
  TORCH_CHECK(static_cast<int64_t>(periodic.size()) == ndim, "periodic must have one entry per dim (", ndim,
              " for acc of shape ", acc.sizes(), "), got ", periodic.size(), " entries");
  TORCH_CHECK(!std::isnan(min_votes), "min_votes must not be NaN");
  check_nonnegative(k, "k");
  check_output_fits(acc.device(), "k = " + std::to_string(k), {acc.size(0), k, ndim + 1}, 8);
  PeakGrid g{};
  g.ndim = static_cast<int>(ndim);
  g.plane_seam = plane_seam;
  g.min_votes = min_votes;
  int64_t bins = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    TORCH_CHECK(radius[d] >= 0, "radius must be >= 0 in every dim, got ", radius);
    g.size[d] = acc.size(d + 1);
    g.stride[d] = bins;
    g.radius[d] = radius[d];
    g.periodic[d] = periodic.get(d);
    bins *= g.size[d];
  }
  TORCH_CHECK(bins <= std::numeric_limits<int32_t>::max(), "acc must have at most 2^31 - 1 bins per cloud, got shape ",
              acc.sizes());
  if (plane_seam) {
    TORCH_CHECK(ndim == 3, "plane_seam=True needs a plane grid acc (B, n_phi, n_theta, n_rho), got shape ",
                acc.sizes());
    for (int64_t d = 0; d < ndim; ++d) {
      TORCH_CHECK(!periodic.get(d),
                  "plane_seam=True glues phi and theta itself; periodic must be all "
                  "False, got True for dim ",
                  d);
    }
  }
  return g;
}

at::Tensor top_peak_keys(const at::Tensor& keys, int64_t k) {
  const int64_t batch = keys.size(0), bins = keys.size(1);
  const int64_t kept = std::min(k, bins);
  at::Tensor top =
      batch > 0 && kept > 0 ? std::get<0>(at::topk(keys, kept, 1, true, true)) : keys.new_zeros({batch, kept});
  if (kept < k) top = at::constant_pad_nd(top, {0, k - kept}, 0);
  return top;
}

std::tuple<at::Tensor, at::Tensor> decode_peak_keys(const at::Tensor& keys, const PeakGrid& grid, int64_t k,
                                                    at::ScalarType vote_dtype) {
  const at::Tensor top = top_peak_keys(keys, k);
  at::Tensor vote_bits = at::bitwise_right_shift(top, 32).to(at::kInt);
  at::Tensor votes = vote_dtype == at::kFloat ? vote_bits.view(at::kFloat) : vote_bits;
  const at::Tensor flat = at::rsub(at::bitwise_and(top, int64_t{0xffffffff}), int64_t{0xffffffff});
  std::vector<at::Tensor> coords;
  for (int d = 0; d < grid.ndim; ++d) {
    coords.push_back(at::remainder(at::div(flat, grid.stride[d], "floor"),
                                   std::max<int64_t>(grid.size[d], 1)));  // empty dims: all padding
  }
  const at::Tensor indices =
      at::where(top.ne(0).unsqueeze(-1), at::stack(coords, -1), at::scalar_tensor(-1, top.options()));
  return {votes, indices};
}

}  // namespace hough_detail

namespace {

// peak_key with a cheap first test: a bin that a neighbour in its own row or its adjacent rows of
// the last two dims beats is no peak. Those neighbours are plain offsets from the bin (offsets that
// stay inside the grid along the last two dims only; for the plane seams too, as they only glue
// phi and theta's ends) and near it in memory, without the general walk's index arithmetic. Most
// bins of a dense accumulator fail here; the others take peak_key's full walk, which checks those
// neighbours again. The key is 0 as soon as any neighbour beats the bin, whatever the order they
// are visited in, so the result is peak_key's for every bin.
template <typename T>
int64_t peak_key_cpu(const T* acc, int64_t flat, const hough_detail::PeakGrid& g) {
  const T v = acc[flat];
  if (hough_detail::candidate_key(v, flat, g) == 0) return 0;
  const int last = g.ndim - 1;  // stride 1
  const int64_t size = g.size[last];
  const int64_t c = flat % size;
  const int64_t reach = std::min<int64_t>(g.radius[last], size - 1);
  const int64_t lo = -std::min(reach, c), hi = std::min(reach, size - 1 - c);
  auto beaten_in_row = [&](int64_t row) {
    for (int64_t d = lo; d <= hi; ++d) {
      const int64_t nb = row + d;
      const T u = acc[nb];
      if (u > v || (u == v && nb < flat)) return true;
    }
    return false;
  };
  if (beaten_in_row(flat)) return 0;
  if (g.ndim >= 2) {
    const int64_t stride = g.stride[last - 1], rows = g.size[last - 1];
    const int64_t row = (flat / stride) % rows;
    const int64_t row_reach = std::min<int64_t>(g.radius[last - 1], rows - 1);
    for (int64_t d = 1; d <= row_reach; ++d) {
      if (row - d >= 0 && beaten_in_row(flat - d * stride)) return 0;
      if (row + d < rows && beaten_in_row(flat + d * stride)) return 0;
    }
  }
  return hough_detail::peak_key(acc, flat, g);
}

std::tuple<at::Tensor, at::Tensor> hough_peaks_cpu(const at::Tensor& acc, at::IntArrayRef radius,
                                                   const c10::List<bool>& periodic, double min_votes, int64_t k,
                                                   bool plane_seam) {
  const hough_detail::PeakGrid grid = hough_detail::check_peaks_args(acc, radius, periodic, min_votes, k, plane_seam);
  const at::Tensor a = acc.contiguous();
  return hough_detail::decode_peak_keys(hough_detail::peak_keys_cpu(a, grid), grid, k, a.scalar_type());
}

}  // namespace

at::Tensor hough_detail::peak_keys_cpu(const at::Tensor& acc, const PeakGrid& grid) {
  const int64_t batch = acc.size(0);
  const int64_t bins = batch == 0 ? 0 : acc.numel() / batch;
  at::Tensor keys = at::empty({batch, bins}, acc.options().dtype(at::kLong));
  int64_t* key_ptr = keys.data_ptr<int64_t>();
  auto mark = [&](auto* values) {
    at::parallel_for(0, batch * bins, 4096, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const int64_t b = i / bins;
        key_ptr[i] = peak_key_cpu(values + b * bins, i - b * bins, grid);
      }
    });
  };
  if (acc.scalar_type() == at::kInt) {
    mark(acc.data_ptr<int32_t>());
  } else {
    mark(acc.data_ptr<float>());
  }
  return keys;
}

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("hough_peaks", &hough_peaks_cpu); }

}  // namespace pointops

// Hough peaks on the CPU (rules in peaks.h); the key decoding here serves both backends.
#include "hough/peaks.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/checks.h"

namespace pointops {
namespace hough_detail {

PeakGrid check_peaks_args(const at::Tensor& acc, at::IntArrayRef radius,
                          const c10::List<bool>& periodic, double min_votes, int64_t k,
                          bool plane_seam) {
  const int64_t ndim = acc.dim() - 1;
  TORCH_CHECK(ndim >= 1 && ndim <= kMaxPeakDims, "acc must have shape (B, *dims) with 1 to ",
              kMaxPeakDims, " dims, got shape ", acc.sizes());
  TORCH_CHECK(acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat,
              "acc must be int32 or float32, got ", acc.scalar_type());
  TORCH_CHECK(static_cast<int64_t>(radius.size()) == ndim, "radius must have one entry per dim (",
              ndim, " for acc of shape ", acc.sizes(), "), got ", radius);
  TORCH_CHECK(static_cast<int64_t>(periodic.size()) == ndim,
              "periodic must have one entry per dim (", ndim, " for acc of shape ", acc.sizes(),
              "), got ", periodic.size(), " entries");
  TORCH_CHECK(!std::isnan(min_votes), "min_votes must not be NaN");
  check_nonnegative(k, "k");
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
  TORCH_CHECK(bins <= std::numeric_limits<int32_t>::max(),
              "acc must have at most 2^31 - 1 bins per cloud, got shape ", acc.sizes());
  if (plane_seam) {
    TORCH_CHECK(ndim == 3, "plane_seam=True needs a plane grid acc (B, n_phi, n_theta, n_rho), got shape ",
                acc.sizes());
    for (int64_t d = 0; d < ndim; ++d) {
      TORCH_CHECK(!periodic.get(d), "plane_seam=True glues phi and theta itself; periodic must be all "
                  "False, got True for dim ", d);
    }
  }
  return g;
}

std::tuple<at::Tensor, at::Tensor> decode_peak_keys(const at::Tensor& keys, const PeakGrid& grid,
                                                    int64_t k, at::ScalarType vote_dtype) {
  const int64_t batch = keys.size(0), bins = keys.size(1);
  const int64_t kept = std::min(k, bins);
  at::Tensor top = batch > 0 && kept > 0 ? std::get<0>(at::topk(keys, kept, 1, true, true))
                                         : keys.new_zeros({batch, kept});
  if (kept < k) top = at::constant_pad_nd(top, {0, k - kept}, 0);
  at::Tensor vote_bits = at::bitwise_right_shift(top, 32).to(at::kInt);
  at::Tensor votes = vote_dtype == at::kFloat ? vote_bits.view(at::kFloat) : vote_bits;
  const at::Tensor flat = int64_t{0xffffffff} - at::bitwise_and(top, int64_t{0xffffffff});
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

std::tuple<at::Tensor, at::Tensor> hough_peaks_cpu(const at::Tensor& acc, at::IntArrayRef radius,
                                                   const c10::List<bool>& periodic, double min_votes,
                                                   int64_t k, bool plane_seam) {
  const hough_detail::PeakGrid grid =
      hough_detail::check_peaks_args(acc, radius, periodic, min_votes, k, plane_seam);
  const at::Tensor a = acc.contiguous();
  const int64_t batch = a.size(0);
  const int64_t bins = batch == 0 ? 0 : a.numel() / batch;
  at::Tensor keys = at::empty({batch, bins}, a.options().dtype(at::kLong));
  int64_t* key_ptr = keys.data_ptr<int64_t>();
  auto mark = [&](auto* values) {
    at::parallel_for(0, batch * bins, 4096, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const int64_t b = i / bins;
        key_ptr[i] = hough_detail::peak_key(values + b * bins, i - b * bins, grid);
      }
    });
  };
  if (a.scalar_type() == at::kInt) {
    mark(a.data_ptr<int32_t>());
  } else {
    mark(a.data_ptr<float>());
  }
  return hough_detail::decode_peak_keys(keys, grid, k, a.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CPU, m) { m.impl("hough_peaks", &hough_peaks_cpu); }

}  // namespace pointops

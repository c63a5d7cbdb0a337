// Hough peaks on CUDA (rules in peaks.h; the CPU twin is peaks_cpu.cpp): separable non-maximum
// suppression, then the shared device-agnostic top-k and decoding of peaks_cpu.cpp.
//
// Each bin gets its candidate key (candidate_key(), as on the CPU); one pass per dim with a
// radius replaces every key by the largest key in its 1-D window along that dim (peaks.h says why
// that composes to the box); a last pass appends the candidates that are their box's maximum to a
// pool per cloud, which the top-k reads instead of every bin (a radix top-k reads its input once
// per 8 bits of key: for 16 clouds of 8.1M bins that was 8 GB).
// Scanning each candidate's whole box instead (the CPU's way) is slow on a GPU: nearly every bin
// of a LiDAR accumulator is a candidate, and each would decode its box's coordinates with 64-bit
// divisions. The passes are a few reads and writes of 8 bytes per bin with 32-bit index
// arithmetic (figures: docs/performance.md).
#include "hough/peaks.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <algorithm>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using hough_detail::PeakGrid;

constexpr int kThreads = 256;

int64_t grid_blocks(int64_t total) { return std::min<int64_t>(cuda::ceil_div(total, kThreads), 1 << 20); }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    candidate_keys_kernel(const T* __restrict__ acc, int64_t total, int64_t bins, PeakGrid grid,
                          int64_t* __restrict__ keys) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    keys[i] = hough_detail::candidate_key(acc[i], i % bins, grid);
  }
}

// One window pass along `dim`. The window of a bin is the offsets [-radius, radius] along dim,
// reached as hough_detail::neighbour_index() reaches them (bounded, periodic, or across the plane
// sphere's seams); a window longer than a whole turn of its dim is cut to one turn.
struct WindowPass {
  int64_t bins;  // per cloud
  int32_t dim;
  int32_t radius;
  uint32_t stride, size;
  bool periodic;
  bool plane_seam;
  uint32_t n_phi, n_theta, n_rho;  // plane_seam only
};

__device__ __forceinline__ int32_t floor_div32(int32_t a, int32_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

__global__ void __launch_bounds__(kThreads)
    window_max_kernel(const int64_t* __restrict__ in, int64_t total, WindowPass w, int64_t* __restrict__ out) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t b = i / w.bins;
    const uint32_t local = static_cast<uint32_t>(i - b * w.bins);
    const int64_t* cloud = in + b * w.bins;
    int64_t best = 0;
    if (w.plane_seam && w.dim != 2) {
      const int32_t n_phi = w.n_phi, n_theta = w.n_theta, n_rho = w.n_rho;
      const int32_t row = static_cast<int32_t>(local / w.n_rho);
      const int32_t phi = row / n_theta, theta = row % n_theta;
      const int32_t rho = static_cast<int32_t>(local % w.n_rho);
      for (int32_t o = -w.radius; o <= w.radius; ++o) {
        int32_t p = phi, t = theta;
        bool mirror;
        if (w.dim == 0) {  // past a pole: the same phi circle, normal negated
          p += o;
          const int32_t poles = floor_div32(p, n_phi);
          p -= poles * n_phi;
          mirror = poles & 1;
        } else {  // past theta = pi: phi -> pi - phi, normal negated
          t += o;
          const int32_t seams = floor_div32(t, n_theta);
          t -= seams * n_theta;
          mirror = seams & 1;
          if (mirror) p = n_phi - 1 - p;
        }
        const int32_t r = mirror ? n_rho - 1 - rho : rho;
        best = max(best, cloud[(static_cast<int64_t>(p) * n_theta + t) * n_rho + r]);
      }
    } else {
      const int32_t size = static_cast<int32_t>(w.size);
      const int32_t c = static_cast<int32_t>((local / w.stride) % w.size);
      for (int32_t o = -w.radius; o <= w.radius; ++o) {
        int32_t d = c + o;
        if (w.periodic) {
          d -= floor_div32(d, size) * size;
        } else if (d < 0 || d >= size) {
          continue;
        }
        best = max(best, cloud[local + static_cast<int64_t>(d - c) * w.stride]);
      }
    }
    out[i] = best;
  }
}

// Appends the key of every candidate that is its box's maximum (a peak) to its cloud's pool
// (pool[b][0, capacity), counts[b] its fill). The order within a pool depends on the atomics; only
// the pool's values reach the caller (a top-k), and those are the same in any order.
__global__ void __launch_bounds__(kThreads)
    pool_peaks_kernel(const int64_t* __restrict__ keys, const int64_t* __restrict__ box_max, int64_t total,
                      int64_t bins, int64_t capacity, unsigned long long* __restrict__ counts,
                      int64_t* __restrict__ pool) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t key = keys[i];
    if (key == 0 || key != box_max[i]) continue;
    const int64_t b = i / bins;
    const unsigned long long slot = atomicAdd(counts + b, 1ull);
    if (slot < static_cast<unsigned long long>(capacity)) pool[b * capacity + static_cast<int64_t>(slot)] = key;
  }
}

// The most peaks one cloud can hold: no two peaks are in each other's box (the better beats the
// other), so cutting the grid into blocks of (radius + 1) bins per dim leaves at most one peak in
// each block (plain offsets inside the grid are neighbours whatever the seams or wrap-arounds add).
int64_t peak_capacity(const PeakGrid& grid, int64_t bins) {
  int64_t capacity = 1;
  for (int d = 0; d < grid.ndim; ++d) capacity *= cuda::ceil_div(grid.size[d], grid.radius[d] + 1);
  return std::min(capacity, bins);
}

// The dims to take windows along, in order (see peaks.h for the plane sphere's order).
std::vector<int> window_dims(const PeakGrid& grid) {
  std::vector<int> dims;
  const std::vector<int> order = grid.plane_seam ? std::vector<int>{2, 0, 1} : std::vector<int>{};
  for (int d : order) dims.push_back(d);
  if (!grid.plane_seam) {
    for (int d = grid.ndim - 1; d >= 0; --d) dims.push_back(d);
  }
  std::vector<int> used;
  for (int d : dims) {
    if (grid.radius[d] > 0) used.push_back(d);
  }
  return used;
}

std::tuple<at::Tensor, at::Tensor> hough_peaks_cuda(const at::Tensor& acc, at::IntArrayRef radius,
                                                    const c10::List<bool>& periodic, double min_votes, int64_t k,
                                                    bool plane_seam) {
  const PeakGrid grid = hough_detail::check_peaks_args(acc, radius, periodic, min_votes, k, plane_seam);
  const c10::cuda::CUDAGuard guard(acc.device());
  const at::Tensor a = acc.contiguous();
  return hough_detail::decode_peak_keys(hough_detail::peak_keys_cuda(a, grid), grid, k, a.scalar_type());
}

}  // namespace

at::Tensor hough_detail::peak_keys_cuda(const at::Tensor& acc, const PeakGrid& grid) {
  const c10::cuda::CUDAGuard guard(acc.device());
  const int64_t batch = acc.size(0);
  const int64_t bins = batch == 0 ? 0 : acc.numel() / batch;
  at::Tensor keys = at::empty({batch, bins}, acc.options().dtype(at::kLong));
  const int64_t total = batch * bins;
  if (total == 0) return keys;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t blocks = grid_blocks(total);
  if (acc.scalar_type() == at::kInt) {
    candidate_keys_kernel<int32_t>
        <<<blocks, kThreads, 0, stream>>>(acc.data_ptr<int32_t>(), total, bins, grid, keys.data_ptr<int64_t>());
  } else {
    candidate_keys_kernel<float>
        <<<blocks, kThreads, 0, stream>>>(acc.data_ptr<float>(), total, bins, grid, keys.data_ptr<int64_t>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const std::vector<int> dims = window_dims(grid);
  if (dims.empty()) return keys;
  // Two scratch buffers of the window maxima, ping-ponged, in one allocation.
  at::Tensor scratch = at::empty({2, batch, bins}, keys.options());
  int64_t* buffers[2] = {scratch.data_ptr<int64_t>(), scratch.data_ptr<int64_t>() + total};
  const int64_t* source = keys.data_ptr<int64_t>();
  int next = 0;
  for (int d : dims) {
    // A window wider than one turn of its dim (two for the sphere's phi and theta, which
    // come back mirrored after one) sees nothing new.
    const int64_t turn = grid.plane_seam && d != 2 ? 2 * grid.size[d] : grid.size[d];
    WindowPass w{};
    w.bins = bins;
    w.dim = d;
    w.radius = static_cast<int32_t>(std::min<int64_t>(grid.radius[d], turn));
    w.stride = static_cast<uint32_t>(grid.stride[d]);
    w.size = static_cast<uint32_t>(grid.size[d]);
    w.periodic = grid.periodic[d];
    w.plane_seam = grid.plane_seam;
    if (grid.plane_seam) {
      w.n_phi = static_cast<uint32_t>(grid.size[0]);
      w.n_theta = static_cast<uint32_t>(grid.size[1]);
      w.n_rho = static_cast<uint32_t>(grid.size[2]);
    }
    int64_t* target = buffers[next];
    window_max_kernel<<<blocks, kThreads, 0, stream>>>(source, total, w, target);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    source = target;
    next ^= 1;
  }
  // The peaks, gathered into a pool per cloud (zeros after them): the top-k then reads the pool,
  // at most 1 / ((r_0 + 1)(r_1 + 1)...) of the bins, instead of every bin's key.
  const int64_t capacity = peak_capacity(grid, bins);
  at::Tensor pool = at::zeros({batch * capacity + batch}, keys.options());
  pool_peaks_kernel<<<blocks, kThreads, 0, stream>>>(
      keys.data_ptr<int64_t>(), source, total, bins, capacity,
      reinterpret_cast<unsigned long long*>(pool.data_ptr<int64_t>() + batch * capacity), pool.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return pool.narrow(0, 0, batch * capacity).view({batch, capacity});
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("hough_peaks", &hough_peaks_cuda); }

}  // namespace pointops

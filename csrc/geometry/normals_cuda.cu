// Normals and curvature on CUDA (rules in normals.h; the CPU twin is normals_cpu.cpp): one
// thread per point runs point_normal(), the same float64 arithmetic as the CPU kernel.
// What bounds it: each thread gathers its K neighbours twice (mean, then centred moments;
// the second pass hits L1/L2) and runs 8 Jacobi sweeps of 3 rotations in float64, each with two
// square roots and three divisions: a few thousand float64 instructions per point, which the
// H100's float64 units (half the float32 rate) absorb; the gathers of 12-byte points by
// neighbour index are the other cost. Registers, not shared memory, hold the 3x3 state.
#include "geometry/normals.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"
#include "common/cuda_utils.cuh"

namespace pointops {
namespace {

using namespace normals_detail;

constexpr int kThreads = 128;

template <typename scalar_t, typename out_t>
__global__ void normals_kernel(const scalar_t* __restrict__ points, const int64_t* __restrict__ lengths,
                               const int64_t* __restrict__ neighbors, const double* __restrict__ viewpoints, int64_t n,
                               int64_t k, int64_t total, int64_t orientation, out_t* __restrict__ normals,
                               out_t* __restrict__ curvature) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const int64_t b = p / n;
  double normal[3], curv;
  point_normal<scalar_t>(points + 3 * b * n, cloud_length(lengths, b, n), p - b * n, neighbors + p * k, k,
                         viewpoints + 3 * b, orientation, normal, &curv);
  for (int d = 0; d < 3; ++d) normals[3 * p + d] = static_cast<out_t>(normal[d]);
  curvature[p] = static_cast<out_t>(curv);
}

std::tuple<at::Tensor, at::Tensor> estimate_normals_cuda(const at::Tensor& points,
                                                         const std::optional<at::Tensor>& lengths,
                                                         const at::Tensor& neighbors,
                                                         const std::optional<at::Tensor>& viewpoints,
                                                         int64_t orientation) {
  check_device_type(points, "points", at::kCUDA);
  const c10::cuda::CUDAGuard device_guard(points.device());
  const NormalsInputs in = prepare_normals_inputs(points, lengths, neighbors, viewpoints, orientation);
  const auto out_type = points.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor normals = at::empty({in.batch, in.n, 3}, points.options().dtype(out_type));
  at::Tensor curvature = at::empty({in.batch, in.n}, points.options().dtype(out_type));
  const int64_t total = in.batch * in.n;
  if (total == 0) return {normals, curvature};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const unsigned blocks = static_cast<unsigned>(cuda::ceil_div(total, kThreads));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.points.scalar_type(), "estimate_normals_cuda", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    normals_kernel<scalar_t, out_t><<<blocks, kThreads, 0, stream>>>(
        in.points.data_ptr<scalar_t>(), in.lengths.data, in.neighbors.data_ptr<int64_t>(),
        in.viewpoints.data_ptr<double>(), in.n, in.k, total, in.orientation, normals.data_ptr<out_t>(),
        curvature.data_ptr<out_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {normals, curvature};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("estimate_normals", &estimate_normals_cuda); }

}  // namespace pointops

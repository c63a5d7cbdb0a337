// plane_detections on CUDA (rules in plane_detections.h; the CPU twin is plane_detections_cpu.cpp):
// hough_peaks' key passes, at::topk, then one thread per detection decodes its key with the cached
// tables (plane_tables.h), so a call copies nothing from the host.
#include "hough/plane_detections.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <torch/library.h>

#include "common/cuda_utils.cuh"
#include "hough/plane_tables.h"

namespace pointops {
namespace {

using namespace hough_detail;

__global__ void decode_kernel(const int64_t* __restrict__ keys, int64_t count, const float* __restrict__ normals,
                              const float* __restrict__ rho_centres, int64_t n_rho, bool float_votes,
                              float* __restrict__ planes, float* __restrict__ votes) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= count) return;
  decode_plane_key(keys[i], normals, rho_centres, n_rho, float_votes, planes + 4 * i, votes + i);
}

std::tuple<at::Tensor, at::Tensor> plane_detections_cuda(const at::Tensor& acc, int64_t n_phi, int64_t n_theta,
                                                         double rho_step, double rho_max, int64_t k, int64_t radius,
                                                         double min_votes) {
  const PlaneDetectionArgs args =
      check_plane_detections_args(acc, n_phi, n_theta, rho_step, rho_max, k, radius, min_votes);
  const c10::cuda::CUDAGuard guard(acc.device());
  const at::Tensor a = acc.contiguous();
  const at::Tensor top = top_peak_keys(peak_keys_cuda(a, args.grid), k);
  const int64_t batch = a.size(0);
  at::Tensor planes = at::empty({batch, k, 4}, a.options().dtype(at::kFloat));
  at::Tensor votes = at::empty({batch, k}, a.options().dtype(at::kFloat));
  const int64_t count = batch * k;
  if (count == 0) return {planes, votes};
  const bool capturing = c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  const at::Tensor normals = plane_cell_normals(args.ball, n_phi, n_theta, a.device(), capturing);
  const at::Tensor rho = plane_rho_centres(args.n_rho, rho_max, a.device(), capturing);
  constexpr int kThreads = 128;
  decode_kernel<<<static_cast<unsigned>(cuda::ceil_div(count, kThreads)), kThreads, 0,
                  at::cuda::getCurrentCUDAStream()>>>(top.data_ptr<int64_t>(), count, normals.data_ptr<float>(),
                                                      rho.data_ptr<float>(), args.n_rho, a.scalar_type() == at::kFloat,
                                                      planes.data_ptr<float>(), votes.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {planes, votes};
}

}  // namespace

TORCH_LIBRARY_IMPL(pointops, CUDA, m) { m.impl("plane_detections", &plane_detections_cuda); }

}  // namespace pointops

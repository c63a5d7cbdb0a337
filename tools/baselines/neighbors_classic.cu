// Bench-only baselines: the classic PointNet++ ball query and three_nn kernels in the style of
// OpenPCDet's pointnet2_batch (one thread per query scanning every point of its cloud from global
// memory, float32, int32 indices). Built by tools/bench_geometry.py with
// torch.utils.cpp_extension.load; not part of the pointops package.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {

constexpr int kThreads = 256;

// Each centre walks the points in index order and keeps the first `nsample` within the radius;
// the first hit is written over the whole row first, so a short row repeats it; no hit leaves
// the row as the caller zeroed it.
__global__ void classic_ball_query_kernel(int b, int n, int m, float radius, int nsample,
                                          const float* __restrict__ centres,
                                          const float* __restrict__ points, int* __restrict__ out) {
  const int cloud = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (cloud >= b || c >= m) return;
  const float* q = centres + (static_cast<int64_t>(cloud) * m + c) * 3;
  const float* p = points + static_cast<int64_t>(cloud) * n * 3;
  int* row = out + (static_cast<int64_t>(cloud) * m + c) * nsample;
  const float r2 = radius * radius;
  int found = 0;
  for (int i = 0; i < n && found < nsample; ++i) {
    const float dx = q[0] - p[i * 3], dy = q[1] - p[i * 3 + 1], dz = q[2] - p[i * 3 + 2];
    if (dx * dx + dy * dy + dz * dz < r2) {
      if (found == 0) {
        for (int s = 0; s < nsample; ++s) row[s] = i;
      }
      row[found++] = i;
    }
  }
}

// Each query keeps its three best (distance, index) pairs in registers over all points.
__global__ void classic_three_nn_kernel(int b, int n, int m, const float* __restrict__ queries,
                                        const float* __restrict__ points, float* __restrict__ dist2,
                                        int* __restrict__ index) {
  const int cloud = blockIdx.y;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (cloud >= b || t >= n) return;
  const float* q = queries + (static_cast<int64_t>(cloud) * n + t) * 3;
  const float* p = points + static_cast<int64_t>(cloud) * m * 3;
  float d0 = 1e30f, d1 = 1e30f, d2 = 1e30f;
  int i0 = 0, i1 = 0, i2 = 0;
  for (int i = 0; i < m; ++i) {
    const float dx = q[0] - p[i * 3], dy = q[1] - p[i * 3 + 1], dz = q[2] - p[i * 3 + 2];
    const float d = dx * dx + dy * dy + dz * dz;
    if (d < d0) {
      d2 = d1; i2 = i1; d1 = d0; i1 = i0; d0 = d; i0 = i;
    } else if (d < d1) {
      d2 = d1; i2 = i1; d1 = d; i1 = i;
    } else if (d < d2) {
      d2 = d; i2 = i;
    }
  }
  const int64_t o = (static_cast<int64_t>(cloud) * n + t) * 3;
  dist2[o] = d0; dist2[o + 1] = d1; dist2[o + 2] = d2;
  index[o] = i0; index[o + 1] = i1; index[o + 2] = i2;
}

void check_cloud(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 3 && t.size(2) == 3 && t.scalar_type() == at::kFloat,
              name, " must be a (B, N, 3) float32 CUDA tensor");
}

// centres (B, M, 3), points (B, N, 3) -> (B, M, nsample) int32
torch::Tensor classic_ball_query(torch::Tensor centres, torch::Tensor points, double radius,
                                 int64_t nsample) {
  check_cloud(centres, "centres");
  check_cloud(points, "points");
  const c10::cuda::CUDAGuard guard(points.device());
  auto q = centres.contiguous(), p = points.contiguous();
  const int b = p.size(0), n = p.size(1), m = q.size(1);
  auto out = torch::zeros({b, m, nsample}, p.options().dtype(at::kInt));
  const dim3 blocks((m + kThreads - 1) / kThreads, b);
  classic_ball_query_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      b, n, m, static_cast<float>(radius), static_cast<int>(nsample), q.data_ptr<float>(),
      p.data_ptr<float>(), out.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// queries (B, N, 3), points (B, M, 3) -> (squared distances (B, N, 3), int32 indices (B, N, 3))
std::vector<torch::Tensor> classic_three_nn(torch::Tensor queries, torch::Tensor points) {
  check_cloud(queries, "queries");
  check_cloud(points, "points");
  const c10::cuda::CUDAGuard guard(points.device());
  auto q = queries.contiguous(), p = points.contiguous();
  const int b = q.size(0), n = q.size(1), m = p.size(1);
  auto dist2 = torch::empty({b, n, 3}, q.options());
  auto index = torch::empty({b, n, 3}, q.options().dtype(at::kInt));
  const dim3 blocks((n + kThreads - 1) / kThreads, b);
  classic_three_nn_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      b, n, m, q.data_ptr<float>(), p.data_ptr<float>(), dist2.data_ptr<float>(),
      index.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {dist2, index};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("classic_ball_query", &classic_ball_query);
  m.def("classic_three_nn", &classic_three_nn);
}

// Bench-only baseline: the classic farthest point sampling kernel (OpenPCDet / PointNet++
// lineage). One block per cloud; every step re-reads the cloud and a global
// min-distance array, then a shared-memory tree argmax. Built by tools/bench.py with
// torch.utils.cpp_extension.load; not part of the pointops package.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {

template <int kThreads>
__global__ void classic_fps_kernel(int n, int m, const float* __restrict__ points,
                                   float* __restrict__ min_dist, int* __restrict__ out) {
  __shared__ float best_dist[kThreads];
  __shared__ int best_index[kThreads];
  const int64_t cloud = blockIdx.x;
  points += cloud * n * 3;
  min_dist += cloud * n;
  out += cloud * m;
  const int tid = threadIdx.x;
  int last = 0;
  if (tid == 0) out[0] = 0;
  for (int j = 1; j < m; ++j) {
    const float qx = points[last * 3], qy = points[last * 3 + 1], qz = points[last * 3 + 2];
    float best = -1.f;
    int besti = 0;
    for (int i = tid; i < n; i += kThreads) {
      const float dx = points[i * 3] - qx, dy = points[i * 3 + 1] - qy, dz = points[i * 3 + 2] - qz;
      const float d = fminf(dx * dx + dy * dy + dz * dz, min_dist[i]);
      min_dist[i] = d;
      if (d > best) {
        best = d;
        besti = i;
      }
    }
    best_dist[tid] = best;
    best_index[tid] = besti;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (tid < half && best_dist[tid + half] > best_dist[tid]) {
        best_dist[tid] = best_dist[tid + half];
        best_index[tid] = best_index[tid + half];
      }
      __syncthreads();
    }
    last = best_index[0];
    if (tid == 0) out[j] = last;
    __syncthreads();
  }
}

// points (B, N, 3) float32 CUDA -> (B, m) int32
torch::Tensor classic_fps(torch::Tensor points, int64_t m) {
  TORCH_CHECK(points.is_cuda() && points.dim() == 3 && points.size(2) == 3 &&
              points.scalar_type() == at::kFloat, "classic_fps expects (B, N, 3) float32 CUDA points");
  const c10::cuda::CUDAGuard guard(points.device());
  auto pts = points.contiguous();
  const int64_t b = pts.size(0), n = pts.size(1);
  auto out = torch::empty({b, m}, pts.options().dtype(at::kInt));
  auto min_dist = torch::full({b, n}, 1e10f, pts.options());  // as the seed: a fill kernel first
  auto stream = at::cuda::getCurrentCUDAStream();
  // The seed's block size: the largest power of two <= n, capped at 1024.
  int threads = 1;
  while (threads * 2 <= n && threads < 1024) threads *= 2;
  switch (threads) {
#define CLASSIC_CASE(T) \
  case T: classic_fps_kernel<T><<<b, T, 0, stream>>>(n, m, pts.data_ptr<float>(), min_dist.data_ptr<float>(), out.data_ptr<int>()); break;
    CLASSIC_CASE(1024) CLASSIC_CASE(512) CLASSIC_CASE(256) CLASSIC_CASE(128) CLASSIC_CASE(64)
    CLASSIC_CASE(32) CLASSIC_CASE(16) CLASSIC_CASE(8) CLASSIC_CASE(4) CLASSIC_CASE(2) CLASSIC_CASE(1)
#undef CLASSIC_CASE
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("classic_fps", &classic_fps); }

// Farthest point sampling on CUDA (rules in fps.h; the CPU twin is fps_cpu.cpp): the entry
// points and the launch code. The kernels are in fps_kernels.cuh, the choice of layout in
// fps_plan.h. The launch code fits a plan to the kernel it runs: block width, cluster size (halved
// until such clusters can be resident) and, for the cooperative grid, the blocks that can be
// resident at once.
#include "sampling/fps.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "common/checks.h"
#include "common/clouds.h"
#include "common/cuda_utils.cuh"
#include "common/launch.cuh"
#include "sampling/fps_kernels.cuh"
#include "sampling/fps_plan.h"

namespace pointops {
namespace {

using fps_detail::fps_onchip_kernel;
using fps_detail::fps_streaming_kernel;
using fps_detail::kCellWords;
using fps_detail::kGridListLength;
using fps_detail::kStreamingThreads;
using fps_plan::kMaxClusterParts;
using fps_plan::kPointsPerThread;
using fps_plan::kSmallPointsPerThread;
using fps_plan::Plan;
using fps_plan::Sync;

// Dynamic shared memory of the on-chip kernel: the slots' coordinates and indices, the cell
// counters of the spatial order, and (grid) the gathered block lists of `parts` blocks.
template <int DIM, int PPT>
size_t onchip_smem_bytes(int threads, Sync sync, int parts) {
  const size_t slots = size_t{PPT} * threads;
  const size_t lists = sync == Sync::kGrid ? size_t(parts) * kGridListLength * 2 * sizeof(uint4) : 0;
  return sizeof(float) * (DIM * slots + slots + kCellWords) + lists;
}

template <int DIM, int PPT, Sync SYNC>
void set_kernel_attributes(size_t smem) {
  auto kernel = fps_onchip_kernel<DIM, PPT, SYNC>;
  cuda::set_dynamic_smem(kernel, smem);
  if constexpr (SYNC == Sync::kCluster) cuda::allow_large_clusters(kernel);
}

// How many clusters of `parts` blocks can be resident at once (0: this shape can't run).
template <int DIM, int PPT>
int active_clusters(int parts, int threads) {
  const size_t smem = onchip_smem_bytes<DIM, PPT>(threads, Sync::kCluster, parts);
  set_kernel_attributes<DIM, PPT, Sync::kCluster>(smem);
  cuda::LaunchShape shape{dim3(parts), dim3(threads), smem};
  shape.cluster = static_cast<unsigned>(parts);
  return cuda::max_active_clusters(fps_onchip_kernel<DIM, PPT, Sync::kCluster>, shape);
}

struct OnchipScratch {
  float* overflow;                 // running distances of the points beyond the blocks' on-chip shares
  unsigned long long* grid_words;  // grid: the blocks' lists as flagged words, zeroed
  bool spatial;                    // blocks order their points spatially (only without overflow)
};

template <int DIM, int PPT, Sync SYNC>
void launch_onchip(const Plan& plan, const at::Tensor& points, const CloudLayout& layout, int64_t batch,
                   const int64_t* start, int64_t k, const OnchipScratch& scratch, at::Tensor& indices,
                   at::Tensor& distances) {
  const size_t smem = onchip_smem_bytes<DIM, PPT>(plan.threads, SYNC, plan.parts);
  set_kernel_attributes<DIM, PPT, SYNC>(smem);
  cuda::LaunchShape shape{dim3(static_cast<unsigned>(batch * plan.parts)), dim3(plan.threads), smem};
  shape.cooperative = SYNC == Sync::kGrid;
  shape.cluster = SYNC == Sync::kCluster ? static_cast<unsigned>(plan.parts) : 0u;
  cuda::launch(fps_onchip_kernel<DIM, PPT, SYNC>, shape, at::cuda::getCurrentCUDAStream(), points.data_ptr<float>(),
               layout, start, k, plan.parts, plan.max_picks, scratch.spatial, scratch.overflow, scratch.grid_words,
               indices.data_ptr<int64_t>(), distances.data_ptr<float>());
}

// Fits the plan to the kernel with PPT points per thread (threads, cluster shape, residency)
// and launches it. Clouds up to `max_cloud` points run: what does not fit on chip is streamed
// through the overflow scratch.
template <int DIM, int PPT>
void run_onchip_ppt(Plan plan, const at::Tensor& points, const CloudLayout& layout, int64_t batch,
                    int64_t typical_cloud, int64_t max_cloud, const int64_t* start, int64_t k, at::Tensor& indices,
                    at::Tensor& distances) {
  const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
  plan.threads = fps_plan::threads_for(cuda::ceil_div(typical_cloud, plan.parts), PPT);
  if (plan.sync == Sync::kCluster) {
    TORCH_CHECK(props->major >= 9,
                "fps: thread-block clusters need compute capability 9.0, "
                "this device has ",
                props->major, ".", props->minor);
    while (plan.parts > 1 && active_clusters<DIM, PPT>(plan.parts, plan.threads) < 1) {
      plan.parts /= 2;
      plan.threads = fps_plan::threads_for(cuda::ceil_div(typical_cloud, plan.parts), PPT);
    }
    if (plan.parts == 1) plan.sync = Sync::kBlock;
  } else if (plan.sync == Sync::kGrid) {
    // A cooperative launch needs every block resident at once (the residency is measured with
    // the largest list area the plan may need).
    const size_t smem = onchip_smem_bytes<DIM, PPT>(plan.threads, Sync::kGrid, plan.parts);
    set_kernel_attributes<DIM, PPT, Sync::kGrid>(smem);
    const int per_sm = cuda::blocks_per_sm(fps_onchip_kernel<DIM, PPT, Sync::kGrid>, plan.threads, smem);
    const int64_t resident = int64_t{props->multiProcessorCount} * per_sm;
    TORCH_CHECK(batch <= resident, "fps: ", batch,
                " clouds do not fit the grid layout on this "
                "device (",
                resident, " resident blocks)");
    plan.parts = static_cast<int>(std::min<int64_t>(plan.parts, resident / batch));
  }

  OnchipScratch scratch{nullptr, nullptr, true};
  at::Tensor overflow, grid_words;
  if (cuda::ceil_div(max_cloud, plan.parts) > int64_t{PPT} * plan.threads) {
    overflow = at::empty({layout.total_rows}, points.options());
    scratch.overflow = overflow.data_ptr<float>();
    scratch.spatial = false;
  }
  if (plan.sync == Sync::kGrid) {
    // (B, 2 parities, parts, kGridListLength records of 6 words); 0 is no round's number.
    grid_words = at::zeros({batch * 2 * plan.parts * kGridListLength * 6}, points.options().dtype(at::kLong));
    scratch.grid_words = reinterpret_cast<unsigned long long*>(grid_words.data_ptr<int64_t>());
  }
  auto launch = plan.sync == Sync::kGrid      ? launch_onchip<DIM, PPT, Sync::kGrid>
                : plan.sync == Sync::kCluster ? launch_onchip<DIM, PPT, Sync::kCluster>
                                              : launch_onchip<DIM, PPT, Sync::kBlock>;
  launch(plan, points, layout, batch, start, k, scratch, indices, distances);
}

// `typical_cloud` sizes the plan (fps_plan.h).
template <int DIM>
void run_onchip(const at::Tensor& points, const CloudLayout& layout, int64_t batch, int64_t typical_cloud,
                int64_t max_cloud, const int64_t* start, int64_t k, at::Tensor& indices, at::Tensor& distances) {
  const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
  const Plan plan = fps_plan::plan_layout(batch, typical_cloud, props->multiProcessorCount, props->major);
  const int ppt = fps_plan::points_per_thread(plan, typical_cloud);
  auto run =
      ppt == kPointsPerThread ? run_onchip_ppt<DIM, kPointsPerThread> : run_onchip_ppt<DIM, kSmallPointsPerThread>;
  run(plan, points, layout, batch, typical_cloud, max_cloud, start, k, indices, distances);
}

std::tuple<at::Tensor, at::Tensor> fps_cuda_impl(const at::Tensor& points_in, const at::Tensor& counts, bool packed,
                                                 int64_t batch, int64_t rows_per_cloud, int64_t dims,
                                                 const std::optional<at::Tensor>& start, int64_t k) {
  const c10::cuda::CUDAGuard device_guard(points_in.device());
  const auto options = points_in.options();
  at::Tensor indices = at::empty({batch, k}, options.dtype(at::kLong));
  at::Tensor distances = at::empty({batch, k}, options.dtype(fps_detail::distance_dtype(points_in)));
  if (batch == 0 || k == 0) return {indices, distances};

  // float16/bfloat16 are computed in float32, so they take the float32 kernels.
  const at::Tensor points =
      points_in.scalar_type() == at::kDouble ? points_in.contiguous() : points_in.to(at::kFloat).contiguous();
  const at::Tensor start_c = start.has_value() ? start->contiguous() : at::Tensor();
  const int64_t* start_ptr = start_c.defined() ? start_c.data_ptr<int64_t>() : nullptr;
  const int64_t total_rows = packed ? points.size(0) : batch * rows_per_cloud;
  const int64_t* counts_ptr = counts.defined() ? counts.data_ptr<int64_t>() : nullptr;
  const CloudLayout layout =
      packed ? packed_layout(counts_ptr, total_rows) : padded_layout(counts_ptr, batch, rows_per_cloud);
  // Sizes known without reading lengths/offsets back to the host.
  const int64_t max_cloud = packed ? total_rows : rows_per_cloud;
  const int64_t typical_cloud = packed ? cuda::ceil_div(total_rows, batch) : rows_per_cloud;
  TORCH_CHECK(batch <= std::numeric_limits<int32_t>::max() / kMaxClusterParts, "fps: at most ",
              std::numeric_limits<int32_t>::max() / kMaxClusterParts, " clouds per call, got ", batch);

  if (points.scalar_type() == at::kFloat && (dims == 2 || dims == 3)) {
    auto run = dims == 2 ? run_onchip<2> : run_onchip<3>;
    run(points, layout, batch, typical_cloud, max_cloud, start_ptr, k, indices, distances);
    return {indices, distances};
  }
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "fps_cuda", [&] {
    at::Tensor min_distance = at::empty({total_rows}, points.options());
    // The query point in shared memory, rounded up to whole 16-byte words: the compiler reads it
    // 16 bytes at a time (LDS.128), so a D that is not a multiple of 16 bytes would read past it.
    const size_t query_bytes = cuda::ceil_div(sizeof(scalar_t) * dims, 16) * 16;
    fps_streaming_kernel<scalar_t>
        <<<static_cast<unsigned>(batch), kStreamingThreads, query_bytes, at::cuda::getCurrentCUDAStream()>>>(
            points.data_ptr<scalar_t>(), static_cast<int>(dims), layout, start_ptr, k,
            min_distance.data_ptr<scalar_t>(), indices.data_ptr<int64_t>(), distances.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {indices, distances};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fps_cuda(const at::Tensor& points, const std::optional<at::Tensor>& lengths,
                                            const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_args(points, lengths, start, k);
  check_device_type(points, "points", at::kCUDA);
  const at::Tensor counts = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  return fps_cuda_impl(points, counts, /*packed=*/false, points.size(0), points.size(1), points.size(2), start, k);
}

std::tuple<at::Tensor, at::Tensor> fps_packed_cuda(const at::Tensor& points, const at::Tensor& offsets,
                                                   const std::optional<at::Tensor>& start, int64_t k) {
  fps_detail::check_fps_packed_args(points, offsets, start, k);
  check_device_type(points, "points", at::kCUDA);
  return fps_cuda_impl(points, offsets.contiguous(), /*packed=*/true, offsets.size(0) - 1, 0, points.size(1), start, k);
}

TORCH_LIBRARY_IMPL(pointops, CUDA, m) {
  m.impl("fps", &fps_cuda);
  m.impl("fps_packed", &fps_packed_cuda);
}

}  // namespace pointops
